"""A group's history replayed under a configuration, what it cost, and how well the actual one reproduces.

`replay(history, config)` turns the `GroupHistory` into a simulator scenario (one consumer process per
history consumer, its events as timeline steps) with the configuration's assignor, static membership,
session.timeout.ms, max.poll.interval.ms and group.initial.rebalance.delay.ms (each None keeps what
the log showed), runs it through the simulator's clients and the coordinator port, and measures
(`Costs`) from the simulated clients themselves:

* rebalances: generations completed with members (assignment records; static replacements are not);
* unowned_partition_ms: per partition, the time no running consumer held it, summed (counted from the
  group's first assignment on, for the partitions of the topics some running consumer subscribes to;
  a crashed or stalled process holds nothing);
* longest_unowned_ms: the longest single stretch of one partition;
* partitions_moved: times a partition was next held by a different consumer than the one before;
* members_stopped: eager revocations, a member giving up all its partitions to rejoin.

`reproduction(observed_rows, replayed_rows)` compares the audit of the log with the audit of the
replay's simulated log, generation by generation: state, member count, primary cause, assignment
per consumer and static replacements; `ReplayResult.score` is the share of generations that match
in every one. A replay under another configuration is worth trusting only as far as the actual
configuration's replay reproduces the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from coordinator_audit.core.audit import (
    AssignmentRow,
    AuditRow,
    GenerationRow,
    RebalanceCauseRow,
    audit_group,
)
from coordinator_audit.core.client.consumer import MemberState
from coordinator_audit.core.coordinator import CoordinatorConfig
from coordinator_audit.core.coordinator.state import GroupState
from coordinator_audit.core.errors import ScenarioError
from coordinator_audit.core.sim.port import SeededMemberIds
from coordinator_audit.core.sim.runner import Runner, RunResult
from coordinator_audit.core.sim.scenario import ConsumerSpec, Scenario, Step
from coordinator_audit.core.whatif.events import EXACT_BASES, Assumptions, GroupHistory, LifecycleEvent

__all__ = [
    "ASSIGNOR_CHOICES",
    "HEARTBEAT_CANDIDATES_MS",
    "Configuration",
    "Costs",
    "GenerationDiff",
    "ReplayResult",
    "Reproduction",
    "calibrate",
    "costs_of_rows",
    "fit",
    "measure",
    "replay",
    "reproduction",
    "to_scenario",
]

ASSIGNOR_CHOICES = ("range", "roundrobin", "sticky", "cooperative-sticky")

_BROKER = CoordinatorConfig()
"""The broker settings the replay's coordinator runs with (Kafka's defaults)."""

_SETTLE_MS = 10000
"""Time simulated after the last record plus twice the longest session timeout, for the last
expiries to happen under any configuration."""


@dataclass(frozen=True, slots=True)
class Configuration:
    """A configuration to replay under; None keeps what the log showed for the group (or each member)."""

    assignor: str | None = None
    static: bool | None = None
    session_timeout_ms: int | None = None
    max_poll_interval_ms: int | None = None
    initial_rebalance_delay_ms: int | None = None

    def __post_init__(self) -> None:
        if self.assignor is not None and self.assignor not in ASSIGNOR_CHOICES:
            raise ScenarioError(f"assignor {self.assignor!r}: expected one of {', '.join(ASSIGNOR_CHOICES)}")
        low, high = _BROKER.group_min_session_timeout_ms, _BROKER.group_max_session_timeout_ms
        if self.session_timeout_ms is not None and not low <= self.session_timeout_ms <= high:
            # GroupCoordinator#handleJoinGroup answers INVALID_SESSION_TIMEOUT outside the broker's bounds
            raise ScenarioError(f"session_timeout_ms {self.session_timeout_ms}: the broker accepts {low} to {high} "
                                f"(group.min.session.timeout.ms, group.max.session.timeout.ms)")
        if self.max_poll_interval_ms is not None and self.max_poll_interval_ms < 1:
            raise ScenarioError(f"max_poll_interval_ms must be >= 1, got {self.max_poll_interval_ms}")
        if self.initial_rebalance_delay_ms is not None and self.initial_rebalance_delay_ms < 0:
            raise ScenarioError(f"initial_rebalance_delay_ms must be >= 0, got {self.initial_rebalance_delay_ms}")

    @property
    def is_actual(self) -> bool:
        return all(getattr(self, f) is None for f in ("assignor", "static", "session_timeout_ms",
                                                      "max_poll_interval_ms", "initial_rebalance_delay_ms"))

    def label(self) -> str:
        if self.is_actual:
            return "actual"
        parts = []
        if self.assignor is not None:
            parts.append(self.assignor)
        if self.static is not None:
            parts.append("static" if self.static else "dynamic")
        if self.session_timeout_ms is not None:
            parts.append(f"session={self.session_timeout_ms}")
        if self.max_poll_interval_ms is not None:
            parts.append(f"max.poll={self.max_poll_interval_ms}")
        if self.initial_rebalance_delay_ms is not None:
            parts.append(f"delay={self.initial_rebalance_delay_ms}")
        return " ".join(parts)

    def resolved(self, history: GroupHistory) -> Configuration:
        """The values in force: the log's where this configuration keeps them (the longest session
        timeout and max poll interval among the members when they differ)."""
        return Configuration(
            assignor=self.assignor or history.assignor,
            static=history.static if self.static is None else self.static,
            session_timeout_ms=self.session_timeout_ms or max(c.session_timeout_ms for c in history.consumers),
            max_poll_interval_ms=self.max_poll_interval_ms or max(c.rebalance_timeout_ms for c in history.consumers),
            initial_rebalance_delay_ms=(history.initial_rebalance_delay_ms if self.initial_rebalance_delay_ms is None
                                        else self.initial_rebalance_delay_ms))


@dataclass(frozen=True, slots=True)
class Costs:
    """What a replay (or the log) cost the group; see the module docstring for each measure."""

    rebalances: int
    unowned_partition_ms: int | None
    longest_unowned_ms: int | None
    partitions_moved: int | None
    members_stopped: int | None
    static_replacements: int
    """None: not measurable from the log alone (the replay of the actual configuration measures it)."""


@dataclass(frozen=True, slots=True)
class GenerationDiff:
    """One generation of the log against the replay's generation at the same position."""

    index: int
    observed: tuple[Any, ...] | None
    replayed: tuple[Any, ...] | None
    differs_in: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Reproduction:
    """How closely the replay's log matches the observed one (generation by generation)."""

    generations_observed: int
    generations_replayed: int
    matched: int
    """Generations equal in state, member count, primary cause, assignment and static replacements."""
    cause_matches: int
    assignment_matches: int
    mean_time_error_ms: float | None
    """Mean |record time difference| over the positions both have."""
    diffs: tuple[GenerationDiff, ...]

    @property
    def score(self) -> float:
        total = max(self.generations_observed, self.generations_replayed)
        return self.matched / total if total else 1.0


@dataclass(slots=True)
class ReplayResult:
    history: GroupHistory
    config: Configuration
    resolved: Configuration
    scenario: Scenario
    run: RunResult
    costs: Costs
    rows: list[AuditRow] = field(default_factory=list)
    """The audit of the replay's simulated log."""


_FIELDS = ("state", "members", "primary_cause", "assignment", "static_replacements")


def _identity(row: AssignmentRow) -> str:
    return row.group_instance_id if row.group_instance_id is not None else f"{row.client_id}@{row.client_host}"


def _generations(rows: Iterable[AuditRow]) -> list[tuple[int, tuple[Any, ...]]]:
    """(record time, (state, members, primary cause, assignment, static replacements)) per generation."""
    gens = sorted((r for r in rows if isinstance(r, GenerationRow)), key=lambda g: (g.source_partition,
                                                                                     g.source_offset))
    primary: dict[int | None, str] = {}
    for r in rows:
        if isinstance(r, RebalanceCauseRow) and r.is_primary:
            primary.setdefault(r.generation_id, r.cause)
    owned: dict[int, dict[str, set[tuple[str, int]]]] = {}
    for r in rows:
        if isinstance(r, AssignmentRow):
            owned.setdefault(r.generation_id, {}).setdefault(_identity(r), set()).add((r.topic, r.partition))
    out = []
    for g in gens:
        assignment = tuple(sorted((k, tuple(sorted(v))) for k, v in owned.get(g.generation_id, {}).items()))
        out.append((g.record_timestamp, (g.state, g.member_count, primary.get(g.generation_id), assignment,
                                         g.static_replacements)))
    return out


def reproduction(observed: Sequence[AuditRow], replayed: Sequence[AuditRow]) -> Reproduction:
    """Generation-by-generation comparison of two audits of one group (module docstring)."""
    a, b = _generations(observed), _generations(replayed)
    matched = causes = assignments = 0
    errors: list[int] = []
    diffs = []
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x is None or y is None:
            diffs.append(GenerationDiff(i, x[1] if x else None, y[1] if y else None, _FIELDS))
            continue
        errors.append(abs(x[0] - y[0]))
        differs = tuple(f for f, u, v in zip(_FIELDS, x[1], y[1], strict=True) if u != v)
        matched += not differs
        causes += x[1][2] == y[1][2]
        assignments += x[1][3] == y[1][3]
        if differs:
            diffs.append(GenerationDiff(i, x[1], y[1], differs))
    return Reproduction(len(a), len(b), matched, causes, assignments,
                        sum(errors) / len(errors) if errors else None, tuple(diffs))


def costs_of_rows(rows: Iterable[AuditRow]) -> Costs:
    """What the log itself shows: rebalances and static replacements (ownership gaps need the replay)."""
    gens = [r for r in rows if isinstance(r, GenerationRow)]
    return Costs(sum(1 for g in gens if g.state == "Stable"), None, None, None, None,
                 sum(g.static_replacements for g in gens))


Stall = tuple[str, int, int]
"""(consumer, from, to): a poll timeout's stretch (epoch ms) when the process holds its partitions but
processes nothing, from its last poll to its heartbeat thread's LeaveGroup (or its restart)."""


def to_scenario(history: GroupHistory, config: Configuration) -> Scenario:
    """The simulator scenario of `history` under `config` (each consumer's own timeouts where kept)."""
    return _plan(history, config)[0]


def _plan(history: GroupHistory, config: Configuration) -> tuple[Scenario, list[Stall]]:
    r = config.resolved(history)
    assert r.assignor is not None and r.initial_rebalance_delay_ms is not None
    a = history.assumptions
    specs = []
    for c in history.consumers:
        session = config.session_timeout_ms or c.session_timeout_ms
        instance = (c.group_instance_id or c.name) if r.static else None
        specs.append(ConsumerSpec(
            name=c.name, topics=c.topics, static=instance is not None, instance_id=instance, client_id=c.client_id,
            client_host=c.client_host, assignors=(r.assignor,), session_timeout_ms=session,
            heartbeat_interval_ms=a.heartbeat(session),
            max_poll_interval_ms=config.max_poll_interval_ms or c.rebalance_timeout_ms))
    by_name = {s.name: s for s in specs}
    steps: list[tuple[int, int, str, dict[str, Any]]] = []
    stalls: list[Stall] = []
    events = list(history.events)
    for i, e in enumerate(events):
        at = e.at_ms - history.start_ms
        if e.kind == "poll_timeout":
            # the heartbeat thread's LeaveGroup once max.poll.interval.ms passes without a poll, unless
            # the process was restarted first
            leave = at + by_name[e.consumer].max_poll_interval_ms
            restart = next((f.at_ms - history.start_ms for f in events[i + 1:]
                            if f.consumer == e.consumer and f.kind == "start"), None)
            until = min(leave, restart) if restart is not None else leave
            steps.append((until, i, "close", {"consumer": e.consumer}))
            stalls.append((e.consumer, e.at_ms, history.start_ms + until))
        elif e.kind == "subscribe":
            steps.append((at, i, "subscribe", {"consumer": e.consumer, "topics": list(e.topics)}))
        else:
            steps.append((at, i, e.kind, {"consumer": e.consumer}))
    steps.sort(key=lambda s: (s[0], s[1]))
    longest = max(s.session_timeout_ms for s in specs)
    end = history.end_ms - history.start_ms + 2 * longest + _SETTLE_MS
    end = max(end, steps[-1][0] + 2 * longest + _SETTLE_MS)
    return Scenario.from_dict({
        "name": f"whatif-{history.group_id}", "group": history.group_id, "start_ms": history.start_ms,
        "initial_rebalance_delay_ms": r.initial_rebalance_delay_ms, "flavor": history.flavour,
        "topics": dict(history.topics),
        "consumers": [_spec_dict(s) for s in specs],
        "timeline": [{"at": at, "do": do, **args} for at, _, do, args in steps],
        "end_ms": end,
    }, source=f"what-if of group {history.group_id!r}"), stalls


def _spec_dict(s: ConsumerSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"name": s.name, "topics": list(s.topics), "client_id": s.client_id,
                           "client_host": s.client_host, "assignors": list(s.assignors),
                           "session_timeout_ms": s.session_timeout_ms,
                           "heartbeat_interval_ms": s.heartbeat_interval_ms,
                           "max_poll_interval_ms": s.max_poll_interval_ms}
    if s.instance_id is not None:
        out["instance_id"] = s.instance_id
    return out


_OWNERSHIP_EVENTS = frozenset({"start", "crash", "fatal", "assigned", "revoked", "lost", "stale_claims", "leave",
                               "pause", "resume", "assignment_mismatch"})
"""The consumer events (`GroupConsumer`'s observer) around which a consumer's partitions or liveness change."""


_UUID_LEN = 36


class _ObservedMemberIds:
    """Member ids as the log shows them: the coordinator's k-th new id for a prefix (the client id, or
    a static member's group.instance.id; `GroupCoordinator` appends a UUID) is the k-th observed id of
    that prefix, so that the assignors, which order members by id, break ties as the real group's
    did; past the observed ones (or for a prefix the log never showed), seeded ids."""

    def __init__(self, observed: Iterable[str], seed: int) -> None:
        self._left: dict[str, list[str]] = {}
        for member_id in observed:
            if len(member_id) > _UUID_LEN and member_id[-_UUID_LEN - 1] == "-":
                self._left.setdefault(member_id[:-_UUID_LEN - 1], []).append(member_id)
        for ids in self._left.values():
            ids.reverse()
        self._seeded = SeededMemberIds(seed)

    def __call__(self, prefix: str) -> str:
        ids = self._left.get(prefix)
        return ids.pop() if ids else self._seeded(prefix)


class _MeasuringRunner(Runner):
    """The simulator's runner (without its ground truth, which a replay does not read), sampling which
    consumer holds each partition after every instant at which something could have changed it."""

    def __init__(self, scenario: Scenario, stalls: Sequence[Stall] = (), member_ids: Sequence[str] = ()) -> None:
        super().__init__(scenario, track_truth=False, member_ids=_ObservedMemberIds(member_ids, scenario.seed))
        self.stalls = list(stalls)
        self.stopped = 0
        self.unowned: dict[tuple[str, int], int] = {}
        self.stretch: dict[tuple[str, int], int] = {}
        self.longest = 0
        self.moved = 0
        self.last_owner: dict[tuple[str, int], str] = {}
        self._missing: frozenset[tuple[str, int]] = frozenset()
        """The partitions wanted and held by no one since the last change."""
        self._at = scenario.start_ms
        self._changed = True
        """Something that may change who holds what happened since the last sample: a consumer event
        of `_OWNERSHIP_EVENTS` or the commit a closing consumer gives up its partitions after, a
        timeline step, a stall's start or end."""
        self.assigned = False
        """Costs count from the group's first assignment on (startup is not a rebalance's cost)."""

    def _observe(self, proc: Any, kind: str, data: dict[str, Any]) -> None:
        if kind in _OWNERSHIP_EVENTS or (kind == "commit_result" and data.get("why") == "close"):
            self._changed = True
        if kind == "revoked" and data.get("when") == "join_prepare":
            self.stopped += 1
        super()._observe(proc, kind, data)

    def _do(self, step: Step, now: int) -> None:
        self._changed = True
        super()._do(step, now)

    def _stall_edge(self, now: int) -> None:
        self._changed = True

    def _sample(self, now: int) -> None:
        """Accrues the time since the last sample to the partitions unowned then, and, when something
        may have changed, takes the new state: who holds what (a stalled consumer holds nothing) and
        which partitions are wanted (those of a topic some running consumer subscribes to, once the
        group's first assignment happened). An open unowned stretch's length counts when it closes or
        the run ends (`_finish`)."""
        dt = now - self._at
        if dt > 0:
            for tp in self._missing:
                self.unowned[tp] = self.unowned.get(tp, 0) + dt
        self._at = now
        if not self._changed:
            return
        self._changed = False
        holders: dict[tuple[str, int], str] = {}
        topics: set[str] = set()
        for proc in self.procs.values():
            c = proc.consumer
            if not c.alive:
                continue
            topics.update(c.subscription)
            if c.paused_until is not None and c.paused_until > now:
                continue
            if any(who == proc.name and start <= now < end for who, start, end in self.stalls):
                continue
            for tp in c.owned:
                holders.setdefault((tp.topic, tp.partition), proc.name)
        self.assigned = self.assigned or bool(holders)
        now_wanted = {(t, p) for t in topics for p in range(self.metadata.get(t, 0))} if self.assigned else set()
        for tp, name in holders.items():
            prev = self.last_owner.get(tp)
            if prev is not None and prev != name:
                self.moved += 1
            self.last_owner[tp] = name
        for tp in list(self.stretch):
            if tp in holders or tp not in now_wanted:
                self.longest = max(self.longest, now - self.stretch.pop(tp))
        missing = frozenset(now_wanted - holders.keys())
        for tp in missing:
            self.stretch.setdefault(tp, now)
        self._missing = missing

    def _finish(self, now: int) -> None:
        for begun in self.stretch.values():
            self.longest = max(self.longest, now - begun)

    def _settled(self, end: int) -> bool:
        """Nothing but heartbeats and offset commits can happen any more before `end`: no step or stall
        edge is left (the caller checks), no response is in flight, every running consumer is a member
        of the Stable group in its generation and neither rejoining, closing nor paused, and the
        coordinator's only timers are those members' sessions (which their heartbeats keep renewing)
        and the offset-expiration check, which expires nothing in a Stable group whose commits are all
        younger than offsets.retention.minutes. From then on no one's partitions change hands, and the
        log only grows by offset commits after the group's last GroupMetadata record: the costs and
        the generations, assignments and causes the audit reads are what running on to `end` gives."""
        for entry in self.q.pending():
            action = entry.action
            if action != self._coordinator_tick and not (isinstance(action, partial) and action.func == self._tick):
                return False
        group = self.port.coord.group(self.s.group)
        if (group is None or group.state is not GroupState.STABLE or group.pending_members
                or group.pending_sync_members or group.num_members_awaiting_join or self.zombies):
            return False
        members = set(group.member_ids)
        running = set()
        for proc in self.procs.values():
            c = proc.consumer
            if not c.alive:
                continue
            if (c.closing or c.state is not MemberState.STABLE or c.rejoin_needed or c.paused_until is not None
                    or c.generation.generation_id != group.generation_id):
                return False
            running.add(c.generation.member_id)
        if running != members:
            return False
        young = end - self.s.start_ms < self.port.coord.config.offsets_retention_ms
        for timer in self.port.coord.timers():
            if timer.kind == "heartbeat" and len(timer.params) == 2 and timer.params[1] in members:
                continue
            if timer.kind == "expiration" and (young or timer.deadline > end):
                continue
            return False
        return True

    def run(self) -> RunResult:
        """Runs the scenario to its end, or until it is settled (`_settled`): the costs are then
        accrued to the end as they stand."""
        s = self.s
        for step in s.timeline:
            self.q.schedule(s.start_ms + step.at, partial(self._do, step), f"step {step.index}")
        last = s.start_ms + max((step.at for step in s.timeline), default=0)
        for who, start, stop in self.stalls:  # samples where a stall begins and ends
            for at in (start, stop):
                self.q.schedule(at, self._stall_edge, f"stall of {who}")
                last = max(last, at)
        end = s.start_ms + s.end_ms
        while True:
            t = self.q.peek_time()
            if t is None or t > end:
                break
            self.q.run_until(t)
            self._sample(t)
            if t >= last and self._settled(end):
                break
        self._sample(end)
        self._finish(end)
        self.truth.records = len(self.log)
        records = list(self.log.records)
        return RunResult(s, records, records, self.truth, self.port)


def measure(scenario: Scenario, stalls: Sequence[Stall] = (), member_ids: Sequence[str] = ()
            ) -> tuple[RunResult, Costs, list[AuditRow]]:
    """Runs `scenario` in the simulator, measuring its costs from the simulated clients (a consumer holds
    nothing during its `stalls`; the coordinator gives the observed `member_ids`, `_ObservedMemberIds`),
    and audits the log it wrote (the rows a replay's reproduction and
    rebalance count are read from). The run stops where it settles (`_MeasuringRunner._settled`): the
    log then lacks only the offset commits running on to the scenario's end would have added."""
    runner = _MeasuringRunner(scenario, stalls, member_ids)
    run = runner.run()
    rows = list(audit_group(((r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in run.records),
                            group_id=scenario.group))
    gens = [r for r in rows if isinstance(r, GenerationRow)]
    costs = Costs(rebalances=sum(1 for g in gens if g.state == "Stable"),
                  unowned_partition_ms=sum(runner.unowned.values()), longest_unowned_ms=runner.longest,
                  partitions_moved=runner.moved, members_stopped=runner.stopped,
                  static_replacements=sum(g.static_replacements for g in gens))
    return run, costs, rows


def replay(history: GroupHistory, config: Configuration | None = None, *, known: Iterable[ReplayResult] = ()
           ) -> ReplayResult:
    """Runs `history` under `config` (the actual configuration when None) and measures it. A result
    in `known` of the same history whose scenario is this one (e.g. a sweep's point that is the
    actual configuration) is reused instead of run again: the simulator is deterministic."""
    config = config or Configuration()
    scenario, stalls = _plan(history, config)
    for done in known:
        if done.history is history and done.scenario == scenario:
            return ReplayResult(history, config, config.resolved(history), scenario, done.run, done.costs, done.rows)
    run, costs, rows = measure(scenario, stalls, history.member_ids)
    if costs.rebalances == 0:
        raise ScenarioError(f"group {history.group_id!r} under {config.label()}: no generation completed (no "
                            f"consumer was ever assigned a partition), nothing to measure")
    return ReplayResult(history, config, config.resolved(history), scenario, run, costs, rows)


def _record_times(rows: Iterable[AuditRow]) -> dict[int, tuple[int, int]]:
    """generation id -> (record time, member count) of its first record."""
    out: dict[int, tuple[int, int]] = {}
    for r in rows:
        if isinstance(r, GenerationRow):
            out.setdefault(r.generation_id, (r.record_timestamp, r.member_count))
    return out


def calibrate(history: GroupHistory, observed: Sequence[AuditRow], *, rounds: int = 4,
              first: tuple[ReplayResult, Reproduction] | None = None
              ) -> tuple[GroupHistory, ReplayResult, Reproduction]:
    """Fits the event times the log does not give (every event whose `basis` is not in `EXACT_BASES`) so that the
    actual configuration's replay completes each generation when the log says it did: each round
    shifts an event by the difference between the observed and the replayed record time of the
    generation that revealed it (the generation of the same id in the replay), keeping each
    consumer's events in order. Returns the best round's history (highest reproduction score, then
    lowest time error), its replay and its reproduction. The fitted events say so in their basis.
    A round that comes back to an earlier round's events ends the fit: the simulator is deterministic,
    so the rounds from there would repeat earlier ones, none better. `first` is `history`'s replay
    and reproduction when already run."""
    seen = _record_times(observed)
    best: tuple[GroupHistory, ReplayResult, Reproduction] | None = None
    current = history
    tried: set[tuple[LifecycleEvent, ...]] = set()
    for _ in range(rounds + 1):
        if current.events in tried:
            break
        tried.add(current.events)
        result, rep = first if first is not None else _tried(current, observed)
        first = None
        if best is None or _closer(rep, best[2]):
            best = (current, result, rep)
        got = _record_times(result.rows)
        shifted: list[LifecycleEvent] = []
        moved = False
        for e in current.events:
            gen = e.generation_id
            if e.basis in EXACT_BASES or gen is None or gen not in seen or gen not in got:
                shifted.append(e)
                continue
            delta = seen[gen][0] - got[gen][0]
            moved = moved or delta != 0
            basis = e.basis if e.basis.endswith("fitted") else f"{e.basis}, fitted"
            shifted.append(replace(e, at_ms=e.at_ms + delta, basis=basis))
        if not moved:
            break
        current = replace(current, events=_in_order(shifted, history.events), start_ms=min(
            history.start_ms, *(e.at_ms for e in shifted)))
    assert best is not None
    return best


def _tried(history: GroupHistory, observed: Sequence[AuditRow]) -> tuple[ReplayResult, Reproduction]:
    """The actual configuration's replay of `history` and how it reproduces the `observed` rows."""
    result = replay(history)
    return result, reproduction(observed, result.rows)


def _closer(a: Reproduction, b: Reproduction) -> bool:
    """`a` reproduces the log better than `b`: a higher score, then a lower mean time error."""
    return (a.score, -(a.mean_time_error_ms or 0.0)) > (b.score, -(b.mean_time_error_ms or 0.0))


HEARTBEAT_CANDIDATES_MS = (3000, 2000, 1000, 500)
"""heartbeat.interval.ms values `fit` tries, after the assumed one, when that one does not reproduce the log."""


def fit(derive: Callable[[Assumptions], GroupHistory], observed: Sequence[AuditRow],
        assumptions: Assumptions | None = None) -> tuple[GroupHistory, ReplayResult, Reproduction]:
    """The history `derive` reads under `assumptions`, calibrated (`calibrate`). heartbeat.interval.ms
    is not in the log, and it sets how soon the members hear of a rebalance and rejoin: when the
    assumed value does not reproduce every generation, each of `HEARTBEAT_CANDIDATES_MS` is replayed
    once as read, and the one that reproduces best is calibrated in turn when it reproduces better
    than the assumed value did as read; the better of the two calibrations is kept (highest score,
    then lowest time error). A fitted value is said in the history's `notes`, and every
    configuration is then replayed with it."""
    base = assumptions or Assumptions()
    history = derive(base)
    result, as_read = _tried(history, observed)
    best = calibrate(history, observed, first=(result, as_read))
    if best[2].score == 1.0:
        return best
    screened: tuple[GroupHistory, ReplayResult, Reproduction] | None = None
    for hb in HEARTBEAT_CANDIDATES_MS:
        if hb == base.heartbeat_interval_ms:
            continue
        candidate = derive(replace(base, heartbeat_interval_ms=hb))
        got, rep = _tried(candidate, observed)
        if screened is None or _closer(rep, screened[2]):
            screened = (candidate, got, rep)
    if screened is not None and _closer(screened[2], as_read):
        got_fit = calibrate(screened[0], observed, first=(screened[1], screened[2]))
        if _closer(got_fit[2], best[2]):
            best = got_fit
    history, result, rep = best
    hb = history.assumptions.heartbeat_interval_ms
    if hb != base.heartbeat_interval_ms:
        note = (f"heartbeat.interval.ms {hb} fitted: with the assumed {base.heartbeat_interval_ms} the replay "
                f"did not reproduce the log's rejoin times")
        history = replace(history, notes=(*history.notes, note))
        result.history = history
    return history, result, rep


def _in_order(events: list[LifecycleEvent], original: Sequence[LifecycleEvent]) -> tuple[LifecycleEvent, ...]:
    """`events` (shifted copies of `original`, same positions) with each consumer's events kept in their
    original order (a later one at least 1 ms after the one before), sorted by time."""
    last: dict[str, int] = {}
    out = []
    for e in events:
        prev = last.get(e.consumer)
        if prev is not None and e.at_ms <= prev:
            e = replace(e, at_ms=prev + 1)
        last[e.consumer] = e.at_ms
        out.append(e)
    return tuple(sorted(out, key=lambda e: e.at_ms))
