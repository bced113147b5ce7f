"""Why a generation happened, read from two successive persisted group states and the commits between.

The log keeps one GroupMetadata record per completed generation (written at the leader's SyncGroup,
`GroupMetadataManager#classicGroupSync`), an Empty record when a join phase ends with
nobody, a same-generation record for a static replacement (KIP-345), and a tombstone on deletion.
The Java coordinator (Kafka 4.x, `GroupMetadataManager#classicGroupJoin`) also writes an Empty
generation-0 record with protocol type "" when a JoinGroup creates the group; the Scala coordinator
(<= 3.x) does not. Join and leave requests leave no trace of their own, so a cause is inferred
from what changed between the previous record and this one, and its order from the commits in
between: a consumer with auto-commit commits its partitions when it closes (`ConsumerCoordinator#close`,
before its LeaveGroup) and before it rejoins (`ConsumerCoordinator#onJoinPrepare`), so the last
commit of a member's partitions dates its leave or its rejoin.

Every cause present is reported (one row each); exactly one is primary: the event the coordinator
handled first, decided in this order (the decision table of docs/tables.md):

0. `history_gap` (decided by the auditor, not here): offsets of the group's `__consumer_offsets`
   partition were never read between the previous record and this one (a run's input did not
   continue where the previous run stopped, or has holes: compaction, retention); what happened in
   between is unknown, so it is primary on a new generation, the causes the two records suggest
   kept beside it.
1. `history_start`: the audited history starts mid-life (first record at generation > 1, or a
   generation that went backwards without a tombstone).
2. `group_created`: the Java coordinator's generation-0 creation record; or, with no creation
   record (Scala, or the record is outside the log), the first generation of the group's life.
   Member: the leader of a first generation (Kafka makes the first member added the leader).
3. `group_emptied`: the record has no members. Member: the last to leave (latest last commit).
4. `cooperative_follow_up`: a member still here was revoked partitions in the previous
   generation (KIP-429): it rejoins as soon as it has its assignment. Member: the leader if it
   was revoking, else the first revoking member.
5. `member_left_or_expired`, when a leave came before the rebalance: the leaver's last commit is
   before the kept members' first rejoin commit and either close to it (an explicit LeaveGroup,
   which the others learn of within a heartbeat) or at least a session timeout earlier (a session
   expiry). A leaver still committing after the rebalance started, or whose session could not
   have expired yet, left inside the join phase. Member: the earliest eligible leaver.
6. `member_joined` / `static_member_rejoined_new_generation`: a member identity (instance id when
   static, else member id) appears, or a static instance is back under a new member id. Member:
   the leader if it is a joiner (a group joined from Empty), else the first joiner in the
   record's member order. The primary's detail lists every joiner.
7. `assignor_changed`: the selected protocol (or protocol type) differs.
8. `subscription_changed`: a kept member's subscribed topics differ (opaque protocol types: its
   metadata bytes). Member: the changed member that rejoined first (earliest commit).
9. `metadata_or_leader_rejoin`: none of the above explains the round (same members, subscriptions
   and assignor, or only leaves inside the join phase): a member rejoined on its own. Member: the
   kept member that committed first (it rejoined first), else the leader.
10. `aborted_generations`: generation ids were skipped (join phases whose sync never completed);
    primary only when nothing else changed.

Not generations of their own (never primary next to a generation's cause):
* `group_deleted`: a tombstone; its generation_id is the deleted group's last generation. Primary
  only when the audited history starts with it.
* Same generation: `static_member_replaced` per replaced instance (no rebalance), and
  `same_generation_rewrite` for any other difference (not a Kafka write moment; reported, not guessed).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from coordinator_audit.core.audit.rows import iso_ms
from coordinator_audit.core.audit.snapshot import GroupSnapshot, MemberView, TopicPartition

__all__ = ["CAUSES", "CAUSE_PRIORITY", "Activity", "Cause", "new_generation_causes", "primary_problems",
           "same_generation_changes", "subscription_change", "subscription_change_detail"]

CAUSE_PRIORITY: tuple[str, ...] = (
    "history_gap",
    "history_start",
    "group_created",
    "group_emptied",
    "cooperative_follow_up",
    "member_left_or_expired",
    "static_member_rejoined_new_generation",
    "member_joined",
    "assignor_changed",
    "subscription_changed",
    "metadata_or_leader_rejoin",
    "aborted_generations",
    "group_deleted",
    "static_member_replaced",
    "same_generation_rewrite",
)
"""Every cause, in the order of the decision table (secondary rows follow it too)."""
CAUSES = frozenset(CAUSE_PRIORITY)
_RANK = {c: i for i, c in enumerate(CAUSE_PRIORITY)}

Activity = Mapping[str, tuple[int, int]]
"""member id -> (commit timestamp, log offset) of the last commit of a partition the member was
assigned, since the previous generation's record."""

_EXPLICIT_LEAVE_SLACK_MS = 1000
"""Network and processing time allowed on top of a heartbeat interval (see `_leave_came_first`)."""


class Cause(NamedTuple):
    cause: str
    member_id: str | None = None
    group_instance_id: str | None = None
    detail: str = ""
    evidence: str = ""
    """Log positions beyond the generation's own record (commits the decision rests on)."""


def ordered(causes: list[Cause]) -> list[Cause]:
    """Causes sorted by the decision table's order (stable)."""
    return sorted(causes, key=lambda c: _RANK[c.cause])


def _names(members: list[MemberView] | tuple[MemberView, ...], limit: int = 10) -> str:
    shown = ", ".join(m.label for m in members[:limit])
    return shown + (f", ... ({len(members) - limit} more)" if len(members) > limit else "")


def _tps(tps: Iterable[TopicPartition], limit: int = 20) -> str:
    items = sorted(tps)
    shown = ", ".join(f"{t}-{p}" for t, p in items[:limit])
    return "[" + shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "") + "]"


def _commit(activity: Activity, member_id: str) -> str:
    at = activity.get(member_id)
    return f"last commit at offset {at[1]} ({iso_ms(at[0])})" if at is not None else "no commit"


def new_generation_causes(prev: GroupSnapshot, new: GroupSnapshot, *, missing: int, created: bool = False,
                          known_instances: Mapping[str, str] | None = None,
                          activity: Activity | None = None) -> list[Cause]:
    """The causes of generation `new`, primary first, whose previous persisted state is `prev` (a
    real record, or `GroupSnapshot.initial()` when the history is known to start at the group's
    creation without a creation record).

    `created`: `prev` is the group before any generation (no record, or a tombstone), so `new` is
    the first generation of the group's life. `known_instances` maps static instance ids seen
    earlier in the audited history to their last member id: such an instance absent from `prev`
    that is back in `new` rejoined (it had expired or left) rather than joined for the first time.
    `activity`: the members' last commits since `prev` (see `Activity`)."""
    act = activity or {}
    primary: Cause | None = None
    out: list[Cause] = []
    if new.is_empty:
        primary = _emptied(prev, new, act)
    elif created:
        primary = Cause("group_created", new.leader, _instance(new, new.leader),
                        f"first generation of the group, no creation record before it; leader (first member "
                        f"added) {new.leader}; {len(new.members)} member(s): {_names(new.members)}")
    elif prev.is_empty:
        joiners = list(new.members)
        for m in joiners:
            out.append(Cause("member_joined", m.member_id, m.group_instance_id,
                             f"joined the Empty group (generation {prev.generation})"))
        primary = _first_joiner(out, new)
    else:
        primary, found = _membership_changes(prev, new, known_instances or {}, act)
        out.extend(found)
    if missing > 0:
        first, last = new.generation - missing, new.generation - 1
        ids = str(first) if missing == 1 else f"{first}..{last}"
        out.append(Cause("aborted_generations",
                         detail=f"{missing} generation(s) ({ids}) completed a join phase but never a sync"))
    if primary is None:
        primary = next(iter(ordered(out)), None) or Cause(
            "metadata_or_leader_rejoin", *_first_rejoiner(prev, new, act),
            detail="same members, subscriptions and assignor as the previous generation")
    rest = [c for c in ordered(out) if (c.cause, c.member_id) != (primary.cause, primary.member_id)]
    return [primary, *rest]


_TOPICS_CHANGED = re.compile(r"^topics \+(\[[^\]]*\]) -(\[[^\]]*\])$")


def subscription_change_detail(added: Iterable[str], removed: Iterable[str]) -> str:
    """The detail of a `subscription_changed` cause whose topics are known: "topics +[added] -[removed]"."""
    return f"topics +{sorted(added)} -{sorted(removed)}"


def subscription_change(detail: str) -> tuple[frozenset[str], frozenset[str]] | None:
    """(topics added, topics removed) from a `subscription_changed` cause's detail
    (`subscription_change_detail`); None for a change whose topics are not known."""
    m = _TOPICS_CHANGED.match(detail)
    if m is None:
        return None
    return frozenset(ast.literal_eval(m[1])), frozenset(ast.literal_eval(m[2]))


def _instance(snap: GroupSnapshot, member_id: str | None) -> str | None:
    for m in snap.members:
        if m.member_id == member_id:
            return m.group_instance_id
    return None


def _emptied(prev: GroupSnapshot, new: GroupSnapshot, act: Activity) -> Cause:
    gone = list(prev.members)
    detail = "the join phase ended with no member"
    if not gone:
        return Cause("group_emptied", detail=detail)
    last: MemberView | None = gone[0] if len(gone) == 1 else None
    committed = [m for m in gone if m.member_id in act]
    if len(gone) > 1 and committed:
        last = max(committed, key=lambda m: act[m.member_id])
    detail += f"; gone since generation {prev.generation}: {_names(gone)}"
    if last is not None:
        why = f"the last to leave ({_commit(act, last.member_id)})" if len(gone) > 1 else "the last member"
        detail += f"; {last.label} was {why}"
    evidence = f"commit at offset {act[last.member_id][1]}" if last is not None and last.member_id in act else ""
    return Cause("group_emptied", last.member_id if last else None, last.group_instance_id if last else None,
                 detail, evidence)


def _first_joiner(joined: list[Cause], new: GroupSnapshot, prev: GroupSnapshot | None = None,
                  act: Activity | None = None) -> Cause | None:
    """The joiner that started the round. Into an Empty group: the leader (Kafka makes the first
    member added to an empty member map the leader, `ClassicGroup#add`). Otherwise the joiner that
    could join earliest: a restarted process (same client id and host as a member of the previous
    generation) joins only after its predecessor's last sign of life (its last commit, else the
    previous join completion), a new process at any time; ties keep the record's member order."""
    candidates = [c for c in joined if c.cause in ("member_joined", "static_member_rejoined_new_generation")]
    if not candidates:
        return None
    if prev is None or prev.is_empty:
        first = next((c for c in candidates if c.member_id == new.leader), candidates[0])
    else:
        act = act or {}
        alive_at = prev.state_timestamp if prev.state_timestamp is not None else 0
        by_id = {m.member_id: m for m in new.members}
        signs: dict[tuple[str, str], int] = {}
        for m in prev.members:
            at = max(act[m.member_id][0], alive_at) if m.member_id in act else alive_at
            key = (m.client_id, m.client_host)
            signs[key] = max(signs.get(key, at), at)

        def earliest(c: Cause) -> int:
            m = by_id.get(c.member_id or "")
            return signs.get((m.client_id, m.client_host), alive_at) if m is not None else alive_at

        first = min(candidates, key=earliest)
    if len(candidates) > 1:
        listed = ", ".join(c.member_id or "?" for c in candidates)
        first = first._replace(detail=f"{first.detail}; {len(candidates)} joined in this round: {listed}")
    return first


def _first_rejoiner(prev: GroupSnapshot, new: GroupSnapshot, act: Activity) -> tuple[str | None, str | None]:
    """The kept member that rejoined first (earliest last commit: it committed before rejoining),
    else the leader."""
    after = new.by_identity()
    kept = [(m, after[m.identity]) for m in prev.members if m.identity in after and m.member_id in act]
    if kept:
        _, now = min(kept, key=lambda pair: act[pair[0].member_id])
        return now.member_id, now.group_instance_id
    return new.leader, _instance(new, new.leader)


def _leave_came_first(m: MemberView, act: Activity, first_rejoin: tuple[int, int] | None,
                      alive_at: int, joined_at: int | None) -> bool:
    """Whether member `m`'s leave (or expiry) can have started the round, given the kept members'
    first rejoin commit. An explicit LeaveGroup follows the leaver's last commit at once (a closing
    consumer commits first, `ConsumerCoordinator#close`) and the others hear of it within a
    heartbeat (at most a third of the session timeout, Kafka's heartbeat.interval.ms guidance); a
    session expiry comes a session timeout after the last sign of life, and a poll timeout's
    LeaveGroup a rebalance timeout (max.poll.interval.ms) after the last poll: the shorter of the
    two after its last commit, or `alive_at`, the previous generation's join completion, where Kafka
    restarts every member's session timer (`GroupMetadataManager#completeClassicGroupJoin`). A
    member that had partitions and left without a commit while the others committed did not close
    cleanly: it expired. And a join phase that ended (`joined_at`, the new record's
    currentStateTimestamp) a session timeout or more after the leaver's last commit, or more than a
    heartbeat after the others' first rejoin (after an expiry they all rejoin within a heartbeat),
    waited for it: it was removed at the end, not at the start."""
    if first_rejoin is None:
        return True
    # removed without closing: its session expired, or (a Java consumer stuck in processing) its
    # heartbeat thread sent LeaveGroup once max.poll.interval.ms passed without a poll
    # (`AbstractCoordinator.HeartbeatThread#run`, KIP-62); the consumer joins with that interval as
    # its rebalance timeout (`ConsumerCoordinator`), so whichever of the two is shorter bounds it
    timeout = min(m.session_timeout, m.rebalance_timeout) if m.rebalance_timeout > 0 else m.session_timeout
    mine = act.get(m.member_id)
    if mine is None:
        if not m.assigned_set:
            return True  # nothing to commit: a clean close leaves no trace
        return alive_at + timeout <= first_rejoin[0] + _EXPLICIT_LEAVE_SLACK_MS
    if mine[0] >= first_rejoin[0]:
        return False  # still committing when the others started rejoining
    gap = first_rejoin[0] - mine[0]
    heartbeat = m.session_timeout // 3 + _EXPLICIT_LEAVE_SLACK_MS
    explicit = (gap <= heartbeat
                and (joined_at is None or joined_at - mine[0] < m.session_timeout))
    expired = (max(mine[0], alive_at) + timeout <= first_rejoin[0] + _EXPLICIT_LEAVE_SLACK_MS
               and (joined_at is None or joined_at - first_rejoin[0] <= heartbeat))
    return explicit or expired


def _membership_changes(prev: GroupSnapshot, new: GroupSnapshot, known_instances: Mapping[str, str],
                        act: Activity) -> tuple[Cause | None, list[Cause]]:
    out: list[Cause] = []
    before, after = prev.by_identity(), new.by_identity()
    protocol_changed = prev.protocol != new.protocol or prev.protocol_type != new.protocol_type
    opaque = new.protocol_type != "consumer" and not protocol_changed
    joined: list[Cause] = []
    changed: list[tuple[MemberView, Cause]] = []
    for ident, m in after.items():
        old = before.get(ident)
        if old is None:
            earlier = known_instances.get(m.group_instance_id) if m.group_instance_id is not None else None
            if earlier is not None:
                joined.append(Cause("static_member_rejoined_new_generation", m.member_id, m.group_instance_id,
                                    f"instance was a member before generation {prev.generation} (as {earlier}); "
                                    f"back as {m.member_id}"))
            else:
                joined.append(Cause("member_joined", m.member_id, m.group_instance_id, "new member"))
            continue
        if old.member_id != m.member_id:
            joined.append(Cause("static_member_rejoined_new_generation", m.member_id, m.group_instance_id,
                                f"member id {old.member_id} -> {m.member_id}"))
        if old.topics is not None and m.topics is not None:
            if old.topics != m.topics:
                added, removed = m.topics - old.topics, old.topics - m.topics
                changed.append((old, Cause("subscription_changed", m.member_id, m.group_instance_id,
                                           subscription_change_detail(added, removed))))
        elif opaque and old.subscription_raw != m.subscription_raw:
            changed.append((old, Cause("subscription_changed", m.member_id, m.group_instance_id,
                                       f"{new.protocol_type} member metadata changed")))
    kept = [m for m in prev.members if m.identity in after]
    rejoins = [act[m.member_id] for m in kept if m.member_id in act]
    first_rejoin = min(rejoins) if rejoins else None
    leavers = [m for ident, m in before.items() if ident not in after]
    first_leaver: Cause | None = None
    alive_at = prev.state_timestamp if prev.state_timestamp is not None else 0
    eligible = [m for m in leavers if _leave_came_first(m, act, first_rejoin, alive_at, new.state_timestamp)]
    if not kept:
        # the last member leaving ends a join phase at once with an Empty generation
        # (`GroupMetadataManager#maybeCompleteJoinPhase`): with nobody staying, a leave can only have
        # started the round if another leaver was still there, waited for until it expired; prefer
        # the leavers whose leave looks explicit (the round ended within a session of their last commit)
        explicit = [m for m in eligible if m.member_id in act and new.state_timestamp is not None
                    and new.state_timestamp - act[m.member_id][0] < m.session_timeout]
        eligible = (explicit or eligible) if len(leavers) > 1 else []
    eligible.sort(key=lambda m: (m.member_id not in act, act.get(m.member_id, (0, 0))))
    for m in leavers:
        inside = m not in eligible
        c = Cause("member_left_or_expired", m.member_id, m.group_instance_id,
                  f"member of generation {prev.generation}, absent from generation {new.generation} "
                  f"({_commit(act, m.member_id)}"
                  + ("; left inside the join phase" if inside else "") + ")",
                  f"commit at offset {act[m.member_id][1]}" if m.member_id in act else "")
        out.append(c)
        if eligible and m is eligible[0]:
            first_leaver = c
    out.extend(joined)
    if protocol_changed:
        out.append(Cause("assignor_changed", detail=f"protocol {prev.protocol_type}/{prev.protocol} -> "
                                                    f"{new.protocol_type}/{new.protocol}"))
    changed.sort(key=lambda pair: (pair[0].member_id not in act, act.get(pair[0].member_id, (0, 0))))
    out.extend(c for _, c in changed)
    follow_up: Cause | None = None
    revoked = prev.revocations()
    if revoked:
        still_here = {m.member_id: m for m in kept}
        followers = [(still_here[mid], tps) for mid, tps in revoked.items() if mid in still_here]
        if followers:
            detail = "; ".join(f"{m.label} revoked {_tps(tps)} in generation {prev.generation}"
                               for m, tps in followers)
            who = next((m for m, _ in followers if m.member_id == prev.leader), followers[0][0])
            now = after[who.identity]
            follow_up = Cause("cooperative_follow_up", now.member_id, now.group_instance_id, detail)
            out.append(follow_up)
    primary = follow_up or first_leaver or _first_joiner(joined, new, prev, act)
    if primary is None and protocol_changed:
        primary = next(c for c in out if c.cause == "assignor_changed")
    if primary is None and changed:
        primary = changed[0][1]
    if primary is None and leavers:
        member_id, instance = _first_rejoiner(prev, new, act)
        primary = Cause("metadata_or_leader_rejoin", member_id, instance,
                        "the round began with this member's rejoin (first commit among the kept members); "
                        "the members that left did so inside the join phase",
                        f"commit at offset {first_rejoin[1]}" if first_rejoin is not None else "")
        out.append(primary)
    return primary, out


class Replacement(NamedTuple):
    old: MemberView
    new: MemberView


def same_generation_changes(prev: GroupSnapshot, new: GroupSnapshot) -> tuple[list[Cause], list[Replacement]]:
    """Causes of a record that keeps the generation: static replacements (W3) and anything else
    that changed; returns (causes, replacements). An identical record yields nothing."""
    before, after = prev.by_identity(), new.by_identity()
    replacements = [Replacement(before[i], m) for i, m in after.items()
                    if i[0] == "instance" and i in before and before[i].member_id != m.member_id]
    causes = [Cause("static_member_replaced", r.new.member_id, r.new.group_instance_id,
                    f"member id {r.old.member_id} -> {r.new.member_id}, same generation")
              for r in replacements]
    other: list[str] = []
    if set(before) != set(after):
        joined = [after[i].label for i in after if i not in before]
        left = [before[i].label for i in before if i not in after]
        other.append(f"members +{joined} -{left}")
    if (prev.protocol, prev.protocol_type) != (new.protocol, new.protocol_type):
        other.append(f"protocol {prev.protocol} -> {new.protocol}")
    replaced_leader = {r.old.member_id: r.new.member_id for r in replacements}
    if new.leader != replaced_leader.get(prev.leader or "", prev.leader):
        other.append(f"leader {prev.leader} -> {new.leader}")
    replaced = {r.new.member_id for r in replacements}
    for i, m in after.items():
        old = before.get(i)
        if old is None or m.member_id in replaced:
            continue
        if old.assignment_raw != m.assignment_raw or old.subscription_raw != m.subscription_raw:
            other.append(f"member {m.label} metadata or assignment changed")
    if other:
        causes.append(Cause("same_generation_rewrite", detail="; ".join(other)))
    return causes, replacements


class _CauseLike(Protocol):
    """What `primary_problems` reads of a cause row (a `RebalanceCauseRow`, or a Spark row read back)."""

    @property
    def group_id(self) -> str: ...
    @property
    def source_partition(self) -> int: ...
    @property
    def source_offset(self) -> int: ...
    @property
    def is_primary(self) -> bool: ...
    @property
    def cause(self) -> str: ...


class _GenerationLike(Protocol):
    """What `primary_problems` reads of a generation row."""

    @property
    def group_id(self) -> str: ...
    @property
    def generation_id(self) -> int: ...
    @property
    def source_partition(self) -> int: ...
    @property
    def source_offset(self) -> int: ...


def primary_problems(causes: Iterable[_CauseLike], generations: Iterable[_GenerationLike]) -> list[str]:
    """Checks the `rebalance_causes` promise on rows of both tables (audit rows, or Spark rows read
    back): every generation row has exactly one primary cause among the cause rows of its own record
    (same group and source partition/offset), and every other primary row is a tombstone that starts
    the audited history. Returns the problems found (empty: the invariant holds)."""
    by_record: dict[tuple[str, int, int], list[_CauseLike]] = {}
    for c in causes:
        by_record.setdefault((c.group_id, c.source_partition, c.source_offset), []).append(c)
    problems: list[str] = []
    opened: set[tuple[str, int, int]] = set()
    for g in generations:
        key = (g.group_id, g.source_partition, g.source_offset)
        opened.add(key)
        n = sum(1 for c in by_record.get(key, ()) if c.is_primary)
        if n != 1:
            problems.append(f"group {g.group_id!r} generation {g.generation_id} (partition {key[1]} offset {key[2]}): "
                            f"{n} primary causes")
    for key, rows in by_record.items():
        if key in opened:
            continue
        for c in rows:
            if c.is_primary and c.cause != "group_deleted":
                problems.append(f"group {c.group_id!r} partition {key[1]} offset {key[2]}: primary {c.cause} on a "
                                f"record that opens no generation")
    return problems
