"""The answers operators ask for, derived per group from the audit's base tables (pure Python).

Standard library only: `coordinator_audit.udfs.derived` runs `derive_group` once per group inside Spark
(`mapInArrow`), the tests call it directly. Its inputs are the group's rows of `generations`,
`assignments`, `rebalance_causes` and `violations` as dicts, and of `offset_commits` as tuples of
the four columns it reads (`CommitTimes`: the most numerous rows; `commit_times` makes them from
dicts), any number of runs of the job, one row per natural key (`coordinator_audit.udfs.derived.NATURAL_KEYS`);
its outputs are the rows of three tables:

* `partition_ownership` (`OwnershipRow`): per (group, topic, partition), consecutive intervals,
  each owned (member, instance id, client id, host, generation) or unowned, with why, and how each
  bound is known. The replay (`coordinator_audit.udfs.replay`) also runs `derive_group` at each group's end, with its
  assignments as the audit's runs (`AssignedRun`: a member's assignments of one interval, one
  object): the owned rows that are such assignments as stored then come as one `OwnershipRun` per
  run. Within, every assignment input becomes such a run (`_Assigned`: dicts in a row that share
  every column but topic and partition are one), so the derivation's loops go over members'
  intervals and their partitions, not over one dict per partition.
* `rebalances` (`RebalanceRow`): one row per join phase that produced a generation (a Stable or
  an Empty one) or was aborted (a generation id the log skipped).
* `group_health` (`HealthRow`): per group per UTC day, with the flapping score (`flapping_score`).

A KIP-848 consumer group (generations of group_type `consumer`) has no join phase: its epochs,
members' current assignments and reconciliation are records, so its ownership intervals are its
assignments as stored with the gaps between owners, and its `rebalances` are its epochs, from the
epoch's record to when the group reached it (`_consumer_history`). A group migrated between the
protocols derives each protocol's part its own way.

What the log proves and what it does not. A GroupMetadata record is written when the leader's
assignment is stored (GroupMetadataManager#storeGroup, GroupCoordinator#doSyncGroup), and its
currentStateTimestamp is when the group entered CompletingRebalance, i.e. when the join phase
ended (ClassicGroup#transitionTo). The start of a join phase is written nowhere in
`__consumer_offsets` (GroupCoordinator#prepareRebalance writes no record). An EAGER consumer
revokes every partition before it sends its JoinGroup (ConsumerCoordinator#onJoinPrepare, after
committing its positions when auto-commit is on), so under EAGER the old owners hold nothing from
their revocation until the next assignment; under COOPERATIVE (KIP-429) a member keeps what it is
not asked to give up, and a partition that moves is assigned to nobody for one generation.

Bounds (`from_evidence` / `to_evidence`; `*_exact` is true only for the first three):

* `record`: the timestamp of the GroupMetadata record that stored or replaced an assignment.
* `join_completed`: a generation's state_timestamp: every member had rejoined (EAGER: revoked).
* `group_emptied`: an Empty generation's state_timestamp: the last member had gone.
* `last_commit`: the old owner's last offset commit in its generation: it still held its
  partitions then, and revoked them at or after it (and at the latest at `join_completed`).
* `broker_rebalance_start`: the broker's "Preparing to rebalance" line (`generations` column
  `rebalance_started_at`, present when the job was given the broker's log): an old owner without
  a commit in its generation revoked no earlier. It refines only what the log leaves open: an
  owner with a commit is unowned from that commit whether or not the broker's log is given (a
  crashed owner was gone a session timeout before the broker's line).
* `join_completed_latest`: no earlier evidence: the latest moment the bound can be.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from operator import attrgetter, itemgetter
from typing import Any, Protocol

from coordinator_audit.core.records_fast import fast_constructor

__all__ = [
    "BASE_INPUTS",
    "DAY_MS",
    "DEFAULT_HEALTH",
    "DERIVED_KEYS",
    "OWNERSHIP_PER_ROW",
    "AssignedRun",
    "CommitTimes",
    "HealthRow",
    "HealthThresholds",
    "OwnershipRow",
    "OwnershipRun",
    "RebalanceRow",
    "as_dict",
    "astuple_fast",
    "commit_times",
    "derive_from_tables",
    "derive_group",
    "flapping_score",
    "health_status",
    "values_getter",
]

DAY_MS = 86_400_000
HOUR_MS = 3_600_000

EXACT_EVIDENCE = frozenset({"record", "join_completed", "group_emptied"})
"""Bounds read off a record (module docstring); every other bound is inferred and marked inexact."""

JOIN_PHASE_GAPS = frozenset({"eager_join_phase", "owner_departed", "cooperative_revocation"})
"""Unowned reasons caused by a rebalance (counted in `rebalances` and in the health figures)."""

@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """What makes a day `flapping` or `unstable` (the job's `[health]` configuration keys).

    `flapping_score` is the largest of the day's three figures, each divided by its threshold:
    1.0 means a threshold is reached. Shares are of the observed part of the day, at least one hour
    (so that a group seen for a few seconds is not judged on them). `health_status`: a score of 1.0
    or more is `flapping`, `unstable_score` or more `unstable`, else `healthy`."""

    peak_hour_rebalances: float = 6.0  # completed join phases in one clock hour
    rebalancing_share: float = 0.10    # share of the observed day between a join start and its assignment
    unowned_share: float = 0.05        # share of the day's partition-time not consumed because of rebalances
    unstable_score: float = 0.5        # the score from which a day is `unstable`

    def __post_init__(self) -> None:
        for name in ("peak_hour_rebalances", "rebalancing_share", "unowned_share", "unstable_score"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"health threshold {name} must be positive, got {value!r}")
        if self.unstable_score > 1.0:
            raise ValueError(f"health threshold unstable_score must be at most 1.0 (the flapping score), "
                             f"got {self.unstable_score!r}")


DEFAULT_HEALTH = HealthThresholds()
"""The thresholds without configuration."""


@dataclass(frozen=True, slots=True)
class OwnershipRow:
    """One interval of one partition of a group: owned by one member, or unowned and why."""

    group_id: str
    topic: str
    partition: int
    valid_from: int
    valid_to: int | None           # null while it lasts (the last interval the tables know)
    owned: bool
    member_id: str | None
    group_instance_id: str | None
    client_id: str | None
    client_host: str | None
    generation_id: int             # owned: the owner's generation; unowned: the generation whose rebalance left it so
    unowned_reason: str | None     # eager_join_phase, cooperative_revocation, owner_departed, group_empty, not_assigned
    duration_ms: int | None
    from_evidence: str
    from_exact: bool
    to_evidence: str | None
    to_exact: bool | None
    from_source_offset: int | None  # the record proving the bound, when one does
    to_source_offset: int | None


_ownership_row = fast_constructor(OwnershipRow)
"""OwnershipRow(*values) without a frozen dataclass's per-field object.__setattr__ (one row per
ownership interval: the derivation's most numerous row)."""

class AssignedRun(Protocol):
    """A member's assignments of one interval given as one object (the Spark job's replay: its
    `coordinator_audit.core.audit.AssignmentRun`): what its rows share, and `groups`, (topic, partitions)
    in row order. The ownership rows of such a run that are its assignment as stored (one owner,
    never unowned, bounded by records: most of them) come out as one `OwnershipRun` (`derive_group`)."""

    @property
    def generation_id(self) -> int: ...
    @property
    def member_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...
    @property
    def client_id(self) -> str | None: ...
    @property
    def client_host(self) -> str | None: ...
    @property
    def valid_from(self) -> int: ...
    @property
    def valid_to(self) -> int | None: ...
    @property
    def source_offset(self) -> int | None: ...
    @property
    def groups(self) -> Sequence[tuple[str, Sequence[int]]]: ...


@dataclass(frozen=True, slots=True)
class OwnershipRun:
    """Owned `OwnershipRow`s that share every column but topic and partition, as one object: each an
    assignment as stored (from its record to the record that replaced it, or open), `keys` their
    (topic, partition) in no particular order. `rows()` are the rows."""

    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str | None
    client_host: str | None
    generation_id: int
    valid_from: int
    valid_to: int | None
    from_source_offset: int | None
    to_source_offset: int | None
    keys: list[tuple[str, int]]

    def shared(self) -> tuple[Any, ...]:
        """The values the run's rows share: every `OwnershipRow` field but topic and partition, in
        field order (as `owned_row` fills them for an assignment as stored)."""
        end = self.valid_to
        to_ev, duration = (None, None) if end is None else ("record", end - self.valid_from)
        return (self.group_id, self.valid_from, end, True, self.member_id, self.group_instance_id, self.client_id,
                self.client_host, self.generation_id, None, duration, "record", True, to_ev,
                None if to_ev is None else True, self.from_source_offset, self.to_source_offset)

    def rows(self) -> list[OwnershipRow]:
        """The run's rows."""
        group_id, *rest = self.shared()
        return [_ownership_row(group_id, topic, partition, *rest) for topic, partition in self.keys]


OWNERSHIP_PER_ROW = ("topic", "partition")
"""The `OwnershipRow` fields an `OwnershipRun` holds per row (`keys`); `shared()` are the others."""
assert [f.name for f in dataclasses.fields(OwnershipRow)][1:3] == list(OWNERSHIP_PER_ROW), "OwnershipRun.rows"


@dataclass(frozen=True, slots=True)
class RebalanceRow:
    """One join phase of a group: what started and ended it, who it moved, how long partitions waited."""

    group_id: str
    generation_id: int             # the generation it produced (aborted: the generation id it would have had)
    outcome: str                   # completed (Stable), emptied (Empty), aborted (no record: the id was skipped)
    rebalance_protocol: str | None
    started_at: int | None
    start_evidence: str
    start_exact: bool
    join_completed_at: int | None  # the generation's state_timestamp
    ended_at: int | None           # the record storing the assignment
    join_ms: int | None
    duration_ms: int | None        # started_at -> ended_at
    trigger: str | None            # the generation's primary cause (rebalance_causes)
    trigger_member_id: str | None
    causes: tuple[str, ...]
    previous_generation_id: int | None
    members_before: int | None
    members_after: int
    members_joined: int            # members holding partitions, keyed by instance id (static) or member id
    members_left: int
    partitions_moved: int          # owner changed from the last owner before this generation
    partitions_unowned: int        # partitions this rebalance left unowned for a while
    unowned_ms_sum: int            # summed over those partitions (open intervals not counted)
    unowned_ms_max: int
    observed_at: int               # the record that revealed it
    source_partition: int
    source_offset: int


@dataclass(frozen=True, slots=True)
class HealthRow:
    """One group on one UTC day."""

    group_id: str
    day: str                       # YYYY-MM-DD (UTC)
    observed_ms: int               # the part of the day between the group's first and last known event
    rebalances: int                # completed or emptied join phases ending that day
    aborted_rebalances: int
    peak_hour_rebalances: int      # the most in one clock hour
    rebalancing_ms: int            # time between join starts and assignments, clipped to the day
    unowned_partition_ms: int      # partition-time unowned because of rebalances (not while Empty)
    empty_partition_ms: int        # partition-time unowned while the group was Empty
    partitions: int                # partitions of the group known that day
    members_joined: int
    members_left: int
    static_members: int            # distinct group.instance.ids owning partitions that day
    dynamic_members: int           # distinct member ids without one
    violations: int
    last_commit_at: int | None
    flapping_score: float
    status: str


_ownership_run = fast_constructor(OwnershipRun)
_rebalance_row = fast_constructor(RebalanceRow)
_health_row = fast_constructor(HealthRow)
"""The same for the derivation's other rows (one `OwnershipRun` per member's assignment as stored)."""


# ------------------------------------------------------------------------------------------------
# helpers


@functools.lru_cache(maxsize=1024)
def _day(ms: int) -> str:
    """The UTC day of `ms` as yyyy-MM-dd; the health rows ask for the same day starts over and over
    (one name per group and day: strftime cost 1% of the audit's replay)."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d")


def _day_start(ms: int) -> int:
    return ms - ms % DAY_MS


def _clip(start: int, end: int, lo: int, hi: int) -> int:
    return max(0, min(end, hi) - max(start, lo))


def flapping_score(*, peak_hour_rebalances: int, rebalancing_ms: int, unowned_partition_ms: int,
                   partitions: int, observed_ms: int, health: HealthThresholds = DEFAULT_HEALTH) -> float:
    """The day's flapping score (`HealthThresholds`): the largest figure over its threshold."""
    figures = [peak_hour_rebalances / health.peak_hour_rebalances]
    if observed_ms > 0:
        figures.append(rebalancing_ms / observed_ms / health.rebalancing_share)
        if partitions > 0:
            figures.append(unowned_partition_ms / (partitions * observed_ms) / health.unowned_share)
    return round(max(figures), 4)


def health_status(score: float, health: HealthThresholds = DEFAULT_HEALTH) -> str:
    return "flapping" if score >= 1.0 else "unstable" if score >= health.unstable_score else "healthy"


class _Assigned:
    """A member's assignments of one generation interval: the columns they share, once, and their
    (topic, partition) in row order; `marked` when given as an `AssignedRun` (its ownership rows as
    stored come out as one `OwnershipRun`). A run of assignment dicts is the dicts in a row that share
    every column but topic and partition (`_assigned`)."""

    __slots__ = ("client_host", "client_id", "generation_id", "group_instance_id", "keys", "marked", "member_id",
                 "source_offset", "valid_from", "valid_to")

    def __init__(self, generation_id: int, member_id: str, group_instance_id: str | None, client_id: str | None,
                 client_host: str | None, valid_from: int, valid_to: int | None, source_offset: int | None,
                 keys: list[tuple[str, int]], marked: bool) -> None:
        self.generation_id, self.member_id, self.group_instance_id = generation_id, member_id, group_instance_id
        self.client_id, self.client_host, self.valid_from, self.valid_to = client_id, client_host, valid_from, valid_to
        self.source_offset, self.keys, self.marked = source_offset, keys, marked

    def closed(self, end: int) -> _Assigned:
        """The same assignments ending at `end` (closed by the next generation's record)."""
        return _Assigned(self.generation_id, self.member_id, self.group_instance_id, self.client_id,
                         self.client_host, self.valid_from, end, self.source_offset, self.keys, self.marked)

    def member_key(self) -> str:
        """The member as `rebalances` counts it: by instance id when static, else by member id."""
        return f"static:{self.group_instance_id}" if self.group_instance_id else f"dynamic:{self.member_id}"


def _assigned(assignments: Iterable[Mapping[str, Any] | AssignedRun]) -> list[_Assigned]:
    """The assignments (dicts of `BASE_INPUTS["assignments"]`, or `AssignedRun`s) as `_Assigned`
    runs, in their order (a run without partitions is no assignment)."""
    out: list[_Assigned] = []
    last: tuple[Any, ...] | None = None
    for a in assignments:
        if isinstance(a, (dict, Mapping)):  # a dict first: the common input, checked without the ABC
            shared = (a["generation_id"], a["member_id"], a.get("group_instance_id"), a.get("client_id"),
                      a.get("client_host"), a["valid_from"], a.get("valid_to"), a.get("source_offset"))
            if shared == last:
                out[-1].keys.append((a["topic"], a["partition"]))
            else:
                out.append(_Assigned(*shared, [(a["topic"], a["partition"])], False))
                last = shared
            continue
        keys = [(topic, partition) for topic, partitions in a.groups for partition in partitions]
        if keys:
            out.append(_Assigned(a.generation_id, a.member_id, a.group_instance_id, a.client_id, a.client_host,
                                 a.valid_from, a.valid_to, a.source_offset, keys, True))
        last = None
    return out


def _is_cooperative(*gens: Mapping[str, Any] | None) -> bool:
    return any(g is not None and (g.get("rebalance_protocol") == "COOPERATIVE"
                                  or g.get("protocol_name") == "cooperative-sticky") for g in gens)


@dataclass(slots=True)
class _Segment:
    """An ownership interval under construction (bounds may move while gaps are cut)."""

    row: _Assigned
    start: int
    end: int | None
    from_evidence: str = "record"
    from_offset: int | None = None
    to_evidence: str | None = "record"
    to_offset: int | None = None


@dataclass(slots=True)
class _Gap:
    start: int
    end: int | None
    reason: str
    generation_id: int
    from_evidence: str
    to_evidence: str | None
    from_offset: int | None = None
    to_offset: int | None = None


# ------------------------------------------------------------------------------------------------
# the derivation


CommitTimes = tuple[str, int, int | None, int | None]
"""An `offset_commits` row as the derivation reads it: its `BASE_INPUTS` columns (topic, partition,
first_commit_timestamp, last_commit_timestamp), in that order."""


NOT_DERIVED_GROUP_TYPES = frozenset({"share", "streams"})
"""Group types the derived tables leave out: several share-group members may hold one partition and
a streams member holds tasks, not partitions, so neither has one owner per partition; their
generations and assignments are in the base tables."""


def commit_times(rows: Iterable[Mapping[str, Any]]) -> list[CommitTimes]:
    """`offset_commits` rows given as dicts, as the derivation reads them (`CommitTimes`)."""
    return [(r["topic"], r["partition"], r.get("first_commit_timestamp"), r.get("last_commit_timestamp"))
            for r in rows]


def derive_group(group_id: str, *, generations: Sequence[Mapping[str, Any]],
                 assignments: Sequence[Mapping[str, Any] | AssignedRun] = (), commits: Sequence[CommitTimes] = (),
                 causes: Sequence[Mapping[str, Any]] = (), violations: Sequence[Mapping[str, Any]] = (),
                 health: HealthThresholds = DEFAULT_HEALTH,
                 ) -> tuple[list[OwnershipRow | OwnershipRun], list[RebalanceRow], list[HealthRow]]:
    """The three derived tables' rows of one group (module docstring).

    Rows are dicts with the base tables' column names (`commits`: `CommitTimes` tuples; an
    assignment may also be an `AssignedRun` of several); `generations` may carry the optional
    `rebalance_started_at` (the broker's own start of the join phase). The ownership rows are
    `OwnershipRow`s in key order, then one `OwnershipRun` per `AssignedRun` whose rows are its
    assignments as stored. `health` judges the health rows' days. Raises ValueError naming the group and the generation when an assignment
    has no generation row."""
    gens = sorted((dict(g) for g in generations if g.get("group_type") not in NOT_DERIVED_GROUP_TYPES),
                  key=lambda g: (g["record_timestamp"], g.get("source_offset") or 0, g["generation_id"]))
    if not gens:
        return [], [], []
    consumer_gens = [g for g in gens if g.get("group_type") == "consumer"]
    if not consumer_gens:
        ownership, rebalances = _classic_history(group_id, gens, assignments, commits, causes)
    else:  # a KIP-848 consumer group, or a group migrated between the protocols: each part its own way
        classic_gens = [g for g in gens if g.get("group_type") != "consumer"]
        consumer_rows = [a for a in assignments if isinstance(a, Mapping) and a.get("group_type") == "consumer"]
        classic_rows = [a for a in assignments if not (isinstance(a, Mapping) and a.get("group_type") == "consumer")]
        classic_causes, consumer_causes = _causes_by_protocol(gens, causes)
        ownership, rebalances = (_classic_history(group_id, classic_gens, classic_rows, commits, classic_causes)
                                 if classic_gens else ([], []))
        c_ownership, c_rebalances = _consumer_history(group_id, consumer_gens, _assigned(consumer_rows),
                                                      consumer_causes)
        ownership = [*ownership, *c_ownership]
        rebalances = sorted([*rebalances, *c_rebalances], key=lambda r: (r.observed_at, r.source_offset))
    days = _health(group_id, gens, ownership, rebalances, commits, violations, health)
    return ownership, rebalances, days


def _causes_by_protocol(gens: list[dict[str, Any]], causes: Sequence[Mapping[str, Any]]
                        ) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """A migrated group's causes split between its classic generations and its consumer epochs
    (generation ids go on across a conversion, so one id can be both): a cause belongs to the last
    generation row of its id at or before its record."""
    rows: dict[int, list[tuple[int, bool]]] = defaultdict(list)
    for g in gens:
        rows[g["generation_id"]].append((g.get("source_offset") or 0, g.get("group_type") == "consumer"))
    classic: list[Mapping[str, Any]] = []
    consumer: list[Mapping[str, Any]] = []
    for c in causes:
        candidates = sorted(rows.get(c["generation_id"], ()))
        at = c.get("source_offset")
        before = [is_consumer for offset, is_consumer in candidates if at is None or offset <= at]
        (consumer if (before or [is_consumer for _, is_consumer in candidates] or [False])[-1] else classic).append(c)
    return classic, consumer


def _classic_history(group_id: str, gens: list[dict[str, Any]],
                     assignments: Sequence[Mapping[str, Any] | AssignedRun], commits: Sequence[CommitTimes],
                     causes: Sequence[Mapping[str, Any]]
                     ) -> tuple[list[OwnershipRow | OwnershipRun], list[RebalanceRow]]:
    """The ownership and rebalance rows of a classic group's generations (`gens`, in record order;
    their open ends are closed here by the next one)."""
    # assignments -> the generation row they belong to (generation ids restart after a tombstone)
    by_gen_index: dict[int, list[_Assigned]] = defaultdict(list)
    starts: dict[int, list[int]] = defaultdict(list)
    for i, g in enumerate(gens):
        starts[g["generation_id"]].append(i)
    owner_of: dict[tuple[int, int], int] = {}
    for a in _assigned(assignments):
        key = (a.generation_id, a.valid_from)
        index = owner_of.get(key)
        if index is None:
            candidates = [i for i in starts.get(key[0], ()) if gens[i]["record_timestamp"] <= key[1]]
            if not candidates:
                topic, partition = a.keys[0]
                raise ValueError(f"group {group_id!r}: assignment of {topic}-{partition} to {a.member_id!r} in "
                                 f"generation {a.generation_id} (valid from {a.valid_from}) has no generations row")
            index = owner_of[key] = candidates[-1]
        by_gen_index[index].append(a)  # copied below only if it is closed here
    # rows an earlier run left open are closed by the next record the tables know of
    for i, g in enumerate(gens[:-1]):
        if g.get("ended_at") is None:
            g["ended_at"], g["ended_by_offset"] = gens[i + 1]["record_timestamp"], gens[i + 1].get("source_offset")
    for i, runs in by_gen_index.items():
        if i + 1 < len(gens):
            closing = gens[i + 1]["record_timestamp"]
            for j, a in enumerate(runs):
                if a.valid_to is None:
                    runs[j] = a.closed(closing)
    member_commits = _MemberCommits(by_gen_index, _last_commits(gens, commits))
    cause_rows: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for c in causes:
        cause_rows[c["generation_id"]].append(c)

    ownership = _ownership(group_id, gens, by_gen_index, member_commits, cause_rows)
    return ownership, _rebalances(group_id, gens, by_gen_index, member_commits, cause_rows, ownership)


def derive_from_tables(group_id: str, rows: Mapping[str, Sequence[Any]], health: HealthThresholds = DEFAULT_HEALTH
                       ) -> tuple[list[OwnershipRow | OwnershipRun], list[RebalanceRow], list[HealthRow]]:
    """`derive_group` of a group's rows given per base table name (`BASE_INPUTS`' keys; the
    `offset_commits` rows as `CommitTimes`)."""
    return derive_group(group_id, generations=rows["generations"], assignments=rows["assignments"],
                        commits=rows["offset_commits"], causes=rows["rebalance_causes"], violations=rows["violations"],
                        health=health)


def _last_commits(gens: list[dict[str, Any]], commits: Iterable[CommitTimes]
                  ) -> dict[int, dict[tuple[str, int], int]]:
    """generation index -> {(topic, partition): last commit timestamp while it was current}, for
    every generation but the last (only the join phase that ends a generation reads them:
    `_revocation`, `_start`).

    A commit belongs to the generation whose record is the latest at or before it (log order is
    time order within the group's `__consumer_offsets` partition); by time rather than by the row's
    generation_id, because a run that starts mid-generation has commits whose generation it did not
    see (generation_id null) and that an earlier run's rows explain."""
    out: dict[int, dict[tuple[str, int], int]] = defaultdict(dict)
    starts = [g["record_timestamp"] for g in gens]
    if len(starts) < 2:
        return out
    first, last = starts[0], starts[-1]
    for topic, partition, _, ts in commits:
        if ts is None or ts < first or ts >= last:
            continue  # the last generation's commits: no later join phase reads them
        current = out[bisect_right(starts, ts) - 1]
        key = (topic, partition)
        known = current.get(key)
        if known is None or ts > known:
            current[key] = ts
    return out


class _MemberCommits:
    """Per generation index, each member's last commit, while that generation was current, of the
    partitions it was assigned in it (members without one left out): what the join phase that ends
    the generation reads, for a revoked owner (`_revocation`) and for the members that stayed or
    left (`_start`). Built once per generation, and only when asked."""

    __slots__ = ("_by_gen", "_commits", "_done")

    def __init__(self, by_gen: Mapping[int, list[_Assigned]],
                 commits: Mapping[int, Mapping[tuple[str, int], int]]) -> None:
        self._by_gen, self._commits = by_gen, commits
        self._done: dict[int, dict[str, int]] = {}

    def of(self, i: int) -> dict[str, int]:
        """Member id -> its last commit in generation `i`."""
        done = self._done.get(i)
        if done is None:
            commits = self._commits.get(i, {})
            done = self._done[i] = {}
            for a in self._by_gen.get(i, ()):
                member = a.member_id
                for key in a.keys:
                    t = commits.get(key)
                    if t is not None:
                        known = done.get(member)
                        if known is None or t > known:
                            done[member] = t
        return done


def _departed(cause_rows: Sequence[Mapping[str, Any]]) -> set[str]:
    return {c["member_id"] for c in cause_rows if c.get("cause") == "member_left_or_expired" and c.get("member_id")}


def _revocation(seg: _Segment, nxt: Mapping[str, Any], owner_last: int | None) -> tuple[int, str]:
    """When an old owner gave its partitions up before the next generation, clamped to the
    segment: its last commit `owner_last` in the generation; without one, the broker's start of the
    join phase; without that, the latest possible moment (module docstring). The broker's time
    never moves an owner's end past its last commit: an owner that crashed committed last before
    it died, and the broker starts the join phase only when its session times out."""
    latest = nxt["state_timestamp"] if nxt.get("state_timestamp") is not None else nxt["record_timestamp"]
    latest = max(seg.start, min(latest, nxt["record_timestamp"]))
    broker = nxt.get("rebalance_started_at")
    if owner_last is not None:
        t, ev = owner_last, "last_commit"
    elif broker is not None:
        t, ev = int(broker), "broker_rebalance_start"
    else:
        return latest, "join_completed_latest"
    return max(seg.start, min(t, latest)), ev


def _ownership(group_id: str, gens: list[dict[str, Any]], by_gen: Mapping[int, list[_Assigned]],
               member_commits: _MemberCommits,
               cause_rows: Mapping[int, Sequence[Mapping[str, Any]]]) -> list[OwnershipRow | OwnershipRun]:
    """The group's `partition_ownership` rows: each assignment an owned interval (its end moved to
    its owner's revocation where a join phase took the partition away), and the intervals in which
    a partition the group had owned had no owner, with why."""
    offset_at = {g["record_timestamp"]: g.get("source_offset") for g in gens}
    assigned = [a for i in range(len(gens)) for a in by_gen.get(i, ())]
    single = ONE_OWNER_PATH and _one_assignment_each(assigned)
    segments, ending_at, owned_in = _partition_segments(gens, by_gen, single)
    gaps: dict[tuple[str, int], list[_Gap]] = defaultdict(list)
    _join_phase_gaps(gens, segments, ending_at, member_commits, cause_rows, offset_at, gaps)
    _unassigned_gaps(gens, owned_in, gaps)
    out = _OwnershipRows(group_id, offset_at)
    if single:
        return out.one_owner(assigned, segments, gaps)
    return out.by_partition(segments, gaps)


def _one_assignment_each(assigned: Sequence[_Assigned]) -> bool:
    """Whether no partition has two assignments (the common case: a group whose assignment did not
    change during the run); found with dict updates, not a loop per partition."""
    holder: dict[tuple[str, int], _Assigned] = {}
    for a in assigned:
        holder.update(zip(a.keys, itertools.repeat(a)))
    return len(holder) == sum(len(a.keys) for a in assigned)


def _partition_segments(gens: list[dict[str, Any]], by_gen: Mapping[int, list[_Assigned]], single: bool
                        ) -> tuple[dict[tuple[str, int], list[_Assigned | _Segment]],
                                   dict[int, list[tuple[tuple[str, int], int]]], list[set[tuple[str, int]]]]:
    """Per partition, its assignments in generation order; the (partition, index there) of the
    assignments ending at each record timestamp; per generation, the partitions it assigned.

    An assignment whose end a join phase moves becomes a `_Segment` later (most never do: no object
    per assignment); with `single` (`_one_assignment_each`), only the partitions of assignments
    that end are listed (the others' one segment is their assignment)."""
    segments: dict[tuple[str, int], list[_Assigned | _Segment]] = defaultdict(list)
    ending_at: dict[int, list[tuple[tuple[str, int], int]]] = defaultdict(list)
    owned_in: list[set[tuple[str, int]]] = []
    for i in range(len(gens)):
        owned: set[tuple[str, int]] = set()
        for a in by_gen.get(i, ()):
            end = a.valid_to
            if single:
                if end is not None:
                    ending_at[end].extend(zip(a.keys, itertools.repeat(0)))
                    segments.update((key, [a]) for key in a.keys)
            else:
                ending = ending_at[end] if end is not None else None
                for key in a.keys:
                    segs = segments[key]
                    if ending is not None:
                        ending.append((key, len(segs)))
                    segs.append(a)
            owned.update(a.keys)
        owned_in.append(owned)
    return segments, ending_at, owned_in


def _join_phase_gaps(gens: list[dict[str, Any]], segments: dict[tuple[str, int], list[_Assigned | _Segment]],
                     ending_at: Mapping[int, list[tuple[tuple[str, int], int]]], member_commits: _MemberCommits,
                     cause_rows: Mapping[int, Sequence[Mapping[str, Any]]], offset_at: Mapping[int, int | None],
                     gaps: dict[tuple[str, int], list[_Gap]]) -> None:
    """The join phase before each new generation: EAGER owners revoked everything, departed owners
    are gone. Moves the end of each such owner's segment to its revocation (`_revocation`) and adds
    the gap up to the new generation's record (or the group's emptying) to `gaps`."""
    for i in range(1, len(gens)):
        prev, g = gens[i - 1], gens[i]
        if g["generation_id"] == prev["generation_id"]:
            continue  # same-generation rewrite (a static replacement, KIP-345): no join phase
        ending = ending_at.get(g["record_timestamp"])
        if not ending:
            continue
        eager = not _is_cooperative(prev, g)
        empty = g["state"] == "Empty"
        gone = _departed(cause_rows.get(g["generation_id"], ()))
        gap_end, to_ev, to_off = g["record_timestamp"], "record", g.get("source_offset")
        if empty and g.get("state_timestamp") is not None and g["state_timestamp"] >= 0:
            gap_end, to_ev, to_off = min(g["state_timestamp"], g["record_timestamp"]), "group_emptied", None
        for key, j in ending:
            found = segments[key][j]
            row = found.row if isinstance(found, _Segment) else found
            member = row.member_id
            if row.generation_id != prev["generation_id"]:
                continue
            if not (eager or empty or member in gone):
                continue  # COOPERATIVE: the owner kept it until the new assignment (KIP-429)
            s = found if isinstance(found, _Segment) else _segment(row, offset_at)
            segments[key][j] = s
            t, ev = _revocation(s, g, member_commits.of(i - 1).get(member))
            s.end, s.to_evidence, s.to_offset = t, ev, None
            reason = "eager_join_phase" if eager and not empty and member not in gone else "owner_departed"
            gaps[key].append(_Gap(t, max(t, gap_end), reason, g["generation_id"], ev, to_ev, to_offset=to_off))


def _unassigned_gaps(gens: list[dict[str, Any]], owned_in: Sequence[set[tuple[str, int]]],
                     gaps: dict[tuple[str, int], list[_Gap]]) -> None:
    """Adds to `gaps` the generations in which a partition the group had owned has no owner."""
    seen: set[tuple[str, int]] = set()
    for i, g in enumerate(gens):
        seen |= owned_in[i]
        missing = seen - owned_in[i]
        if not missing:
            continue
        end = gens[i + 1]["record_timestamp"] if i + 1 < len(gens) else g.get("ended_at")
        end_offset = gens[i + 1].get("source_offset") if i + 1 < len(gens) else g.get("ended_by_offset")
        for key in missing:
            if g["state"] == "Empty":
                st = g.get("state_timestamp")
                start = st if st is not None and 0 <= st <= g["record_timestamp"] else g["record_timestamp"]
                reason, ev, off = "group_empty", "group_emptied", None
            else:
                start, ev, off = g["record_timestamp"], "record", g.get("source_offset")
                revoked = i > 0 and key in owned_in[i - 1] and _is_cooperative(gens[i - 1], g)
                reason = "cooperative_revocation" if revoked else "not_assigned"
            gaps[key].append(_Gap(start, end, reason, g["generation_id"], ev, None if end is None else "record",
                                  from_offset=off, to_offset=None if end is None else end_offset))


def _merged_gaps(key_gaps: Iterable[_Gap]) -> list[_Gap]:
    """A partition's gaps in time order, each run of adjacent gaps with the same reason as one."""
    merged: list[_Gap] = []
    for gp in sorted(key_gaps, key=lambda x: (x.start, x.end is None, x.end or 0)):
        last = merged[-1] if merged else None
        if last is not None and last.reason == gp.reason and last.end == gp.start:
            last.end, last.to_evidence, last.to_offset = gp.end, gp.to_evidence, gp.to_offset
        else:
            merged.append(gp)
    return merged


class _OwnershipRows:
    """A group's ownership rows as they are made: `OwnershipRow`s in key order, then one
    `OwnershipRun` per marked assignment (`_Assigned.marked`) whose rows are its assignments as
    stored."""

    __slots__ = ("group_id", "offset_at", "rows", "runs")

    def __init__(self, group_id: str, offset_at: Mapping[int, int | None]) -> None:
        self.group_id, self.offset_at = group_id, offset_at
        self.rows: list[OwnershipRow | OwnershipRun] = []
        self.runs: dict[int, OwnershipRun] = {}  # id of a marked `_Assigned` -> its rows as stored

    def owned(self, topic: str, partition: int, found: _Assigned | _Segment) -> OwnershipRow:
        """The owned row of an assignment, or of a segment whose end a join phase moved."""
        if isinstance(found, _Segment):
            r, start, end, to_ev, to_off = found.row, found.start, found.end, found.to_evidence, found.to_offset
        else:  # an assignment as stored: bounded by records
            r, start, end, to_ev = found, found.valid_from, found.valid_to, "record"
            to_off = None if end is None else self.offset_at.get(end)
        if end is None:
            return _ownership_row(
                self.group_id, topic, partition, start, None, True, r.member_id, r.group_instance_id, r.client_id,
                r.client_host, r.generation_id, None, None, "record", True, None, None, r.source_offset, None)
        return _ownership_row(
            self.group_id, topic, partition, start, end, True, r.member_id, r.group_instance_id, r.client_id,
            r.client_host, r.generation_id, None, end - start, "record", True, to_ev, to_ev in EXACT_EVIDENCE,
            r.source_offset, to_off)

    def run_of(self, found: _Assigned) -> OwnershipRun:
        """The run of a marked assignment (made empty the first time it is asked for)."""
        same = self.runs.get(id(found))
        if same is None:
            end = found.valid_to
            same = self.runs[id(found)] = _ownership_run(
                self.group_id, found.member_id, found.group_instance_id, found.client_id, found.client_host,
                found.generation_id, found.valid_from, end, found.source_offset,
                None if end is None else self.offset_at.get(end), [])
        return same

    def add_partition(self, key: tuple[str, int], segs: Sequence[_Assigned | _Segment],
                      key_gaps: list[_Gap] | None) -> None:
        """The rows of a partition that had several owners or was unowned for a while."""
        topic, partition = key
        items = [self.owned(topic, partition, s) for s in segs]
        for gp in _merged_gaps(key_gaps or ()):
            if gp.end is not None and gp.end <= gp.start:
                continue  # nothing unowned (e.g. a join completed and synced in the same millisecond)
            items.append(_ownership_row(
                self.group_id, topic, partition, gp.start, gp.end, False, None, None, None, None, gp.generation_id,
                gp.reason, None if gp.end is None else gp.end - gp.start, gp.from_evidence,
                gp.from_evidence in EXACT_EVIDENCE, gp.to_evidence,
                None if gp.to_evidence is None else gp.to_evidence in EXACT_EVIDENCE,
                gp.from_offset, gp.to_offset))
        if len(items) > 1:
            items.sort(key=lambda r: (r.valid_from, r.owned, r.member_id or ""))
        self.rows.extend(items)

    def by_partition(self, segments: Mapping[tuple[str, int], Sequence[_Assigned | _Segment]],
                     gaps: Mapping[tuple[str, int], list[_Gap]]) -> list[OwnershipRow | OwnershipRun]:
        """All rows, partition by partition in key order, then the runs."""
        rows = self.rows
        for key in sorted(segments):
            segs, key_gaps = segments[key], gaps.get(key)
            if key_gaps is None and len(segs) == 1:  # the common case: one owner, never unowned
                found = segs[0]
                if isinstance(found, _Segment) or not found.marked:
                    rows.append(self.owned(key[0], key[1], found))
                    continue
                self.run_of(found).keys.append(key)
                continue
            self.add_partition(key, segs, key_gaps)
        rows.extend(self.runs.values())
        return rows

    def one_owner(self, assigned: Sequence[_Assigned],
                  segments: Mapping[tuple[str, int], Sequence[_Assigned | _Segment]],
                  gaps: Mapping[tuple[str, int], list[_Gap]]) -> list[OwnershipRow | OwnershipRun]:
        """The rows of `by_partition`, in its order, when every partition had one assignment, with a
        marked assignment's partitions sorted at once: each partition with gaps or of an unmarked
        assignment in key order, then the runs in the order of their first partition."""
        rows = self.rows
        one: list[tuple[tuple[str, int], _Assigned]] = []
        firsts: list[tuple[tuple[str, int], OwnershipRun]] = []
        for a in assigned:
            if not a.marked:
                one.extend(zip(a.keys, itertools.repeat(a)))
                continue
            keys = a.keys
            if gaps:
                one.extend((key, a) for key in keys if key in gaps)
                keys = [key for key in keys if key not in gaps]
            if keys:
                keys = sorted(keys)
                same = self.run_of(a)
                same.keys.extend(keys)
                firsts.append((keys[0], same))
        one.sort(key=_first)
        for key, found in one:
            key_gaps = gaps.get(key)
            if key_gaps is None:
                rows.append(self.owned(key[0], key[1], found))
            else:
                self.add_partition(key, segments.get(key) or [found], key_gaps)
        firsts.sort(key=_first)
        rows.extend(run for _, run in firsts)
        return rows


_first = itemgetter(0)

ONE_OWNER_PATH = True
"""Whether `_ownership` takes its shorter way for a group whose every partition had one assignment
in the run (the tests turn it off to hold both ways equal)."""


def _segment(row: _Assigned, offset_at: Mapping[int, int | None]) -> _Segment:
    """The interval of an assignment as stored (both bounds records), to move its end."""
    end = row.valid_to
    return _Segment(row, row.valid_from, end, "record", row.source_offset, "record",
                    None if end is None else offset_at.get(end))


def _rebalances(group_id: str, gens: list[dict[str, Any]], by_gen: Mapping[int, list[_Assigned]],
                member_commits: _MemberCommits,
                cause_rows: Mapping[int, Sequence[Mapping[str, Any]]],
                ownership: Sequence[OwnershipRow | OwnershipRun]) -> list[RebalanceRow]:
    gaps_by_gen: dict[int, list[OwnershipRow]] = defaultdict(list)
    for o in ownership:
        if isinstance(o, OwnershipRow) and not o.owned and o.unowned_reason in JOIN_PHASE_GAPS:
            gaps_by_gen[o.generation_id].append(o)
    out: list[RebalanceRow] = []
    last_owner: dict[tuple[str, int], str] = {}
    prev_i: int | None = None
    members_before: set[str] = set()  # the member keys of generation prev_i's assignments
    for i, g in enumerate(gens):
        rows = by_gen.get(i, ())
        keys = [a.member_key() for a in rows]
        owners = {tp: k for a, k in zip(rows, keys, strict=True) for tp in a.keys}
        if prev_i is not None and gens[prev_i]["generation_id"] == g["generation_id"]:
            last_owner.update(owners)  # a same-generation rewrite: not a join phase
            prev_i, members_before = i, set(keys)
            continue
        if g["generation_id"] == 0 and g["state"] == "Empty":
            prev_i, members_before = i, set(keys)  # the record that made a new group durable, not a rebalance
            continue
        prev = gens[prev_i] if prev_i is not None else None
        members_after = set(owners.values())
        cs = cause_rows.get(g["generation_id"], ())
        primary = next((c for c in cs if c.get("is_primary")), None)
        for skipped in range(int(g.get("missing_generations") or 0)):
            out.append(_rebalance_row(
                group_id, g["generation_id"] - int(g["missing_generations"]) + skipped, "aborted",
                g.get("rebalance_protocol"), None, "unknown", False, None, None, None, None, None, None, (),
                prev["generation_id"] if prev else None, None, 0, 0, 0, 0, 0, 0, 0,
                g["record_timestamp"], g["source_partition"], g["source_offset"]))
        join_done = g.get("state_timestamp")
        if join_done is not None and join_done < 0:
            join_done = None
        start, ev = _start(g, prev, prev_i, by_gen.get(prev_i, []) if prev_i is not None else [], member_commits,
                           _departed(cs), join_done)
        moved = sum(1 for k, m in owners.items() if k in last_owner and last_owner[k] != m)
        gaps = gaps_by_gen.get(g["generation_id"], [])
        closed = [o.duration_ms for o in gaps if o.duration_ms is not None]
        out.append(_rebalance_row(
            group_id, g["generation_id"], "emptied" if g["state"] == "Empty" else "completed",
            g.get("rebalance_protocol") or (prev.get("rebalance_protocol") if prev else None),
            start, ev, ev in EXACT_EVIDENCE, join_done, g["record_timestamp"],
            None if start is None or join_done is None else join_done - start,
            None if start is None else g["record_timestamp"] - start,
            primary.get("cause") if primary else None, primary.get("member_id") if primary else None,
            tuple(sorted({c["cause"] for c in cs})), prev["generation_id"] if prev else None,
            prev.get("member_count") if prev else None, g.get("member_count") or 0,
            len(members_after - members_before), len(members_before - members_after), moved,
            len({(o.topic, o.partition) for o in gaps}), sum(closed), max(closed, default=0),
            g["record_timestamp"], g["source_partition"], g["source_offset"]))
        last_owner.update(owners)
        prev_i, members_before = i, set(keys)
    return out


def _start(g: Mapping[str, Any], prev: Mapping[str, Any] | None, prev_i: int | None, prev_rows: Sequence[_Assigned],
           member_commits: _MemberCommits, gone: set[str], join_done: int | None) -> tuple[int | None, str]:
    """Best evidence of when the join phase began (the generation's own record says only when it
    ended): the broker's line, when given; else, under EAGER, the earliest final commit of the old
    members that stayed (each commits its positions, then revokes, when it learns of the rebalance
    from a heartbeat: ConsumerCoordinator#onJoinPrepare; so at most about heartbeat.interval.ms
    late); else the latest final commit of a member that left (it was still there then; a member
    that crashed committed a session timeout or more before); else the join completion itself (the
    latest possible moment)."""
    latest = join_done if join_done is not None else g["record_timestamp"]
    if g.get("rebalance_started_at") is not None:
        return int(g["rebalance_started_at"]), "broker_rebalance_start"
    final = member_commits.of(prev_i) if prev_i is not None else {}
    if g["state"] == "Empty":
        gone = set(final)  # everyone left
    stayed = [t for m, t in final.items() if m not in gone]
    left = [t for m, t in final.items() if m in gone]
    floor = max((a.valid_from for a in prev_rows), default=prev["record_timestamp"] if prev else latest)
    if stayed and not _is_cooperative(prev, g):
        return max(floor, min(min(stayed), latest)), "last_commit"
    if left:
        return max(floor, min(max(left), latest)), "last_commit"
    return latest, "join_completed_latest"


# ------------------------------------------------------------------------------------------------
# KIP-848 consumer groups


def _consumer_history(group_id: str, gens: list[dict[str, Any]], assigned: list[_Assigned],
                      causes: Sequence[Mapping[str, Any]]
                      ) -> tuple[list[OwnershipRow | OwnershipRun], list[RebalanceRow]]:
    """The ownership and rebalance rows of a KIP-848 consumer group's epochs (`gens`, group_type
    consumer, in record order) from its members' current assignments as stored (`assigned`: each
    an interval of one member epoch, from the ConsumerGroupCurrentMemberAssignment record that gave
    the partitions to the one that took them away; partitions pending revocation still owned).

    The broker moves a partition only once its owner released it (`ConsumerGroup`'s reconciliation,
    KIP-848: a partition pending revocation is not assigned to its next owner until the owner's
    heartbeat acknowledges the revocation), so every bound is a record. A partition between two owners is
    unowned: `owner_departed` when its last owner left the group (its tombstones), else
    `cooperative_revocation` (released while the owner stays); after its last owner, or with no
    next owner, `not_assigned`; while the group has no member, `group_empty`. `rebalances` has one
    row per group epoch: it starts at the epoch's record and ends when the group reached it (every
    member reconciled to the target assignment: `generations.reached_at`); its duration is the
    reconciliation time."""
    for i, g in enumerate(gens[:-1]):
        if g.get("ended_at") is None:
            g["ended_at"], g["ended_by_offset"] = gens[i + 1]["record_timestamp"], gens[i + 1].get("source_offset")
    offset_at: dict[int, int | None] = {g["record_timestamp"]: g.get("source_offset") for g in gens}
    for a in assigned:
        offset_at.setdefault(a.valid_from, a.source_offset)
    left = {c["member_id"] for c in causes if c.get("cause") == "member_left_or_expired" and c.get("member_id")}
    member_end: dict[str, int | None] = {}  # each member's last assignment's end (None: it still holds one)
    per_key: dict[tuple[str, int], list[_Assigned]] = defaultdict(list)
    for a in sorted(assigned, key=attrgetter("valid_from")):
        end = member_end.get(a.member_id, -1)
        member_end[a.member_id] = None if end is None or a.valid_to is None else max(end, a.valid_to)
        for key in a.keys:
            per_key[key].append(a)

    def released(a: _Assigned) -> str:
        """Why a partition its owner `a` gave up was unowned next: the owner left the group then."""
        gone = a.member_id in left and member_end.get(a.member_id) == a.valid_to
        return "owner_departed" if gone else "cooperative_revocation"

    starts = [g["record_timestamp"] for g in gens]
    gaps: dict[tuple[str, int], list[_Gap]] = defaultdict(list)
    for key, items in per_key.items():
        for prev, nxt in itertools.pairwise(items):
            if prev.valid_to is not None and prev.valid_to < nxt.valid_from:
                gaps[key].extend(_consumer_gaps(gens, starts, prev.valid_to, nxt.valid_from, released(prev),
                                                offset_at))
        last = items[-1]
        if last.valid_to is not None and all(a.valid_to is not None and a.valid_to <= last.valid_to for a in items):
            gaps[key].extend(_consumer_gaps(gens, starts, last.valid_to, None, released(last), offset_at))
    out = _OwnershipRows(group_id, offset_at)
    ownership = out.by_partition(per_key, gaps)
    return ownership, _consumer_rebalances(group_id, gens, per_key, ownership, causes)


def _consumer_gaps(gens: list[dict[str, Any]], starts: list[int], start: int, end: int | None, reason: str,
                   offset_at: Mapping[int, int | None]) -> list[_Gap]:
    """The unowned interval [start, end) of a partition cut at the epochs it spans (end None: no
    next owner): `group_empty` in an epoch without members; elsewhere `reason` while a next owner
    is to come or in the epoch of the release, `not_assigned` in the later epochs that leave it
    unassigned. Each piece's generation is the epoch in effect at its start; bounds are records."""
    out: list[_Gap] = []
    i = max(bisect_right(starts, start) - 1, 0)
    first = i
    at = start
    while at is not None and (end is None or at < end):
        g = gens[i]
        nxt = starts[i + 1] if i + 1 < len(starts) else g.get("ended_at")
        piece_end = nxt if end is None or (nxt is not None and nxt < end) else end
        why = "group_empty" if not g.get("member_count") else reason if end is not None or i == first else "not_assigned"
        if piece_end is None or piece_end > at:
            out.append(_Gap(at, piece_end, why, g["generation_id"], "record", None if piece_end is None else "record",
                            offset_at.get(at), None if piece_end is None else offset_at.get(piece_end)))
        if piece_end is None or i + 1 >= len(starts) or piece_end == end:
            break
        at, i = piece_end, i + 1
    return out


def _consumer_rebalances(group_id: str, gens: list[dict[str, Any]],
                         per_key: Mapping[tuple[str, int], Sequence[_Assigned]],
                         ownership: Sequence[OwnershipRow | OwnershipRun],
                         causes: Sequence[Mapping[str, Any]]) -> list[RebalanceRow]:
    """One row per group epoch (`_consumer_history`): `completed` when the group reached it,
    `emptied` when it has no member, `superseded` when the next epoch came first, `reconciling`
    while it stands unreached."""
    by_epoch: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for c in causes:
        by_epoch[c["generation_id"]].append(c)
    gaps_by_gen: dict[int, list[OwnershipRow]] = defaultdict(list)
    for o in ownership:
        if isinstance(o, OwnershipRow) and not o.owned and o.unowned_reason in JOIN_PHASE_GAPS:
            gaps_by_gen[o.generation_id].append(o)
    out: list[RebalanceRow] = []
    prev: dict[str, Any] | None = None
    for i, g in enumerate(gens):
        epoch, start = g["generation_id"], g["record_timestamp"]
        later = gens[i + 1]["record_timestamp"] if i + 1 < len(gens) else None
        reached = g.get("reached_at")
        members = g.get("member_count") or 0
        if members == 0:
            outcome, end = "emptied", start
        elif reached is not None:
            outcome, end = "completed", reached
        elif g.get("ended_at") is not None:
            outcome, end = "superseded", g["ended_at"]
        else:
            outcome, end = "reconciling", None
        cs = [c for c in by_epoch.get(epoch, ())
              if c.get("source_offset") is None or c.get("source_offset") == g.get("source_offset")
              or c.get("cause") in ("member_joined", "member_left_or_expired")]
        primary = next((c for c in cs if c.get("is_primary")), None)
        moved = 0
        for items in per_key.values():
            for before, after in itertools.pairwise(items):
                if (start <= after.valid_from and (later is None or after.valid_from < later)
                        and after.member_key() != before.member_key()):
                    moved += 1
        gaps = gaps_by_gen.get(epoch, [])
        closed = [o.duration_ms for o in gaps if o.duration_ms is not None]
        out.append(_rebalance_row(
            group_id, epoch, outcome, "consumer", start, "record", True, None, end, None,
            None if end is None else end - start, primary.get("cause") if primary else None,
            primary.get("member_id") if primary else None, tuple(sorted({c["cause"] for c in cs})),
            prev["generation_id"] if prev else None, prev.get("member_count") if prev else None, members,
            sum(1 for c in cs if c.get("cause") == "member_joined"),
            sum(1 for c in cs if c.get("cause") == "member_left_or_expired"), moved,
            len({(o.topic, o.partition) for o in gaps}), sum(closed), max(closed, default=0),
            start, g["source_partition"], g["source_offset"]))
        prev = g
    return out


def _spread(start: int, end: int, add: Any) -> None:
    """Calls add(day_start, ms) for each UTC day [start, end) touches."""
    day = _day_start(start)
    while day < end:
        add(day, _clip(start, end, day, day + DAY_MS))
        day += DAY_MS


def _health(group_id: str, gens: list[dict[str, Any]], ownership: Sequence[OwnershipRow | OwnershipRun],
            rebalances: Sequence[RebalanceRow], commits: Sequence[CommitTimes],
            violations: Sequence[Mapping[str, Any]], health: HealthThresholds) -> list[HealthRow]:
    """Per UTC day from the group's first to its last known event (a record or a commit)."""
    times = [g["record_timestamp"] for g in gens] + [g["ended_at"] for g in gens if g.get("ended_at")]
    last_commit_on = _commit_days(commits, times)
    first, horizon = min(times), max(times) + 1
    days = range(_day_start(first), horizon, DAY_MS)
    acc: dict[int, dict[str, Any]] = {d: {"done": 0, "aborted": 0, "hours": defaultdict(int), "rebalancing": 0,
                                          "unowned": 0, "empty": 0, "joined": 0, "left": 0, "violations": 0,
                                          "last_commit": last_commit_on.get(d)} for d in days}
    _count_rebalances(acc, rebalances)
    _count_ownership(acc, days, horizon, ownership)
    for v in violations:
        if (b := acc.get(_day_start(v["record_timestamp"]))) is not None:
            b["violations"] += 1
    return [_health_day(group_id, d, acc[d], first, horizon, health) for d in days]


def _commit_days(commits: Sequence[CommitTimes], times: list[int]) -> dict[int, int]:
    """Day -> the latest commit that day; adds the earliest and latest first and last commit times
    to `times` (so every commit is within the days)."""
    last_commit_on: dict[int, int] = {}
    if not commits:
        return last_commit_on
    _, _, firsts, lasts = zip(*commits, strict=True)
    known_firsts = [t for t in firsts if t is not None]
    known_lasts = [t for t in lasts if t is not None]
    if known_firsts:
        times += (min(known_firsts), max(known_firsts))
    if known_lasts:
        lo, hi = min(known_lasts), max(known_lasts)
        times += (lo, hi)
        if _day_start(lo) == _day_start(hi):  # all on one day: its latest is the latest
            last_commit_on[_day_start(hi)] = hi
        else:
            for t in known_lasts:
                day = t - t % DAY_MS
                latest_that_day = last_commit_on.get(day)
                if latest_that_day is None or t > latest_that_day:
                    last_commit_on[day] = t
    return last_commit_on


def _count_rebalances(acc: dict[int, dict[str, Any]], rebalances: Sequence[RebalanceRow]) -> None:
    """Adds the rebalances to the days: outcomes, members joined and left, and the time spent
    rebalancing (on every day a join phase spans)."""
    for r in rebalances:
        b = acc.get(_day_start(r.observed_at))
        if b is not None:
            if r.outcome == "aborted":
                b["aborted"] += 1
            else:
                b["done"] += 1
                b["hours"][r.observed_at // HOUR_MS] += 1
                b["joined"] += r.members_joined
                b["left"] += r.members_left
        if r.started_at is not None and r.ended_at is not None:
            _spread(r.started_at, r.ended_at, lambda d, ms: acc[d].__setitem__("rebalancing", acc[d]["rebalancing"] + ms)
                    if d in acc else None)


def _count_ownership(acc: dict[int, dict[str, Any]], days: range, horizon: int,
                     ownership: Sequence[OwnershipRow | OwnershipRun]) -> None:
    """Adds each day's partitions, static and dynamic owners, and unowned partition-time.

    An ownership row counts on every day from the one it starts on to the one before its end (or
    its start day only), its end cut at the horizon."""
    for d in days:
        b, nxt = acc[d], d + DAY_MS
        parts: set[tuple[str, int]] = set()
        static: set[str] = set()
        dynamic: set[str | None] = set()
        unowned = empty = 0
        for o in ownership:
            start, end = o.valid_from, o.valid_to
            if end is None or end > horizon:
                end = horizon
            if start >= nxt or (end <= d and start < d):
                continue
            if isinstance(o, OwnershipRun):  # owned rows of one member
                parts.update(o.keys)
                if o.group_instance_id:
                    static.add(o.group_instance_id)
                else:
                    dynamic.add(o.member_id)
                continue
            parts.add((o.topic, o.partition))
            if o.owned:
                if o.group_instance_id:
                    static.add(o.group_instance_id)
                else:
                    dynamic.add(o.member_id)
            elif o.unowned_reason == "group_empty":
                empty += _clip(start, end, d, nxt)
            elif o.unowned_reason in JOIN_PHASE_GAPS:
                unowned += _clip(start, end, d, nxt)
        b["parts"], b["static"], b["dynamic"] = parts, static, dynamic
        b["empty"] += empty
        b["unowned"] += unowned


def _health_day(group_id: str, d: int, b: Mapping[str, Any], first: int, horizon: int,
                health: HealthThresholds) -> HealthRow:
    """The health row of day `d` from its counts `b` (the group observed from `first` to `horizon`)."""
    observed = max(0, min(d + DAY_MS, horizon) - max(d, first))
    peak = max(b["hours"].values(), default=0)
    score = flapping_score(peak_hour_rebalances=peak, rebalancing_ms=b["rebalancing"],
                           unowned_partition_ms=b["unowned"], partitions=len(b["parts"]),
                           observed_ms=max(observed, HOUR_MS), health=health)
    return _health_row(
        group_id, _day(d), observed, b["done"], b["aborted"], peak, b["rebalancing"], b["unowned"], b["empty"],
        len(b["parts"]), b["joined"], b["left"], len(b["static"]), len(b["dynamic"]), b["violations"],
        b["last_commit"], score, health_status(score, health))


BASE_INPUTS: dict[str, tuple[str, ...]] = {
    "generations": ("generation_id", "state", "state_timestamp", "record_timestamp", "ended_at", "ended_by_offset",
                    "member_count", "missing_generations", "rebalance_protocol", "protocol_name",
                    "source_partition", "source_offset", "group_type", "reached_at"),
    "assignments": ("generation_id", "member_id", "group_instance_id", "client_id", "client_host", "topic",
                    "partition", "valid_from", "valid_to", "source_offset", "group_type"),
    "offset_commits": ("topic", "partition", "first_commit_timestamp", "last_commit_timestamp"),
    "rebalance_causes": ("generation_id", "cause", "member_id", "is_primary", "source_offset"),
    "violations": ("generation_id", "kind", "record_timestamp"),
}
"""The columns of each base table the derivation reads (besides group_id)."""
assert BASE_INPUTS["offset_commits"] == ("topic", "partition", "first_commit_timestamp", "last_commit_timestamp"), \
    "CommitTimes are these columns, in this order"

DERIVED_KEYS: dict[str, tuple[str, ...]] = {
    "partition_ownership": ("group_id", "topic", "partition", "valid_from", "owned", "member_id"),
    "rebalances": ("group_id", "generation_id", "source_partition", "source_offset", "outcome"),
    "group_health": ("group_id", "day"),
}
"""Derived table -> natural key: a row's identity across runs (a run replaces its groups' stored
rows by key, `coordinator_audit.jobs.delta_io.Merge.scope`)."""


_GETTERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def values_getter(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving a row dataclass's values in field order (an `attrgetter`, built once per
    class): what `astuple_fast` calls, for callers that convert many rows of one class."""
    getter = _GETTERS.get(cls)
    if getter is None:
        getter = _GETTERS[cls] = attrgetter(*(f.name for f in dataclasses.fields(cls)))
    return getter


def astuple_fast(row: Any) -> tuple[Any, ...]:
    """A row dataclass's values in field order (`dataclasses.astuple` without its deep copies)."""
    return values_getter(type(row))(row)


def as_dict(row: Any) -> dict[str, Any]:
    """A row dataclass as a dict (tuples become lists, for Arrow)."""
    return {f.name: (list(v) if isinstance(v := getattr(row, f.name), tuple) else v) for f in dataclasses.fields(row)}
