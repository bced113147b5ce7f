"""Why a generation happened, read from two successive persisted group states.

The log keeps one GroupMetadata record per completed generation (spec §6.1 W1), an Empty record
when a join phase ends with nobody (W2), a same-generation record for a static replacement (W3),
J's gen-0 record for a new group (W5) and a tombstone. Join requests themselves leave no trace, so
a cause is inferred from what changed between the previous record and this one:

* `group_created`: the previous state is the group before its first generation (gen 0, no protocol
  type: no record yet, J's W5, or after a tombstone) and this one has members.
* `member_joined` / `member_left_or_expired`: a member identity (instance id when static, else
  member id) appears / disappears. After an Empty generation every member counts as joined.
* `static_member_rejoined_new_generation`: a static identity is kept but under a new member id in
  a new generation (a static rejoin that did rebalance: during a rebalance, or a protocol change),
  or a static instance seen earlier in the history comes back after being absent (expired/left).
* `assignor_changed`: the selected protocol (or protocol type) differs.
* `subscription_changed`: a kept member's subscribed topics differ (for opaque protocol types:
  its metadata bytes, when the protocol is unchanged).
* `cooperative_follow_up`: in the previous generation a member that is still here was not given
  back partitions it reported owning at join (COOPERATIVE revocation): it had to rejoin at once.
* `aborted_generations`: generation ids were skipped (join phases whose sync never completed).
* `metadata_or_leader_rejoin`: none of the above; same members, subscriptions and assignor (a
  leader's or member's rejoin on metadata change, or an unexplained rejoin).
* `group_emptied`: this record has no members (W2).
* `history_start`: the audited history starts mid-life (first record at gen > 1, or a generation
  that went backwards without a tombstone): nothing is claimed about earlier generations.
* `history_gap` (set by the auditor, not here): records of the group's `__consumer_offsets`
  partition were never read between the previous record and this one (a run's input did not
  continue where the previous run stopped); primary on a new generation, since what happened in
  between is unknown, beside the other causes otherwise.
* `group_deleted`: a tombstone (its generation_id is the last generation of the deleted group).
* J's W5 record (gen 0, no members, protocol type "") gets a generation row but no cause: it makes a
  new group durable; the first real generation after it is `group_created`.
* Same generation: `static_member_replaced` per replaced instance (W3, no rebalance), and
  `same_generation_rewrite` for any other difference (not a Kafka write moment; reported, not guessed).

Each generation gets exactly one primary cause, the first of `CAUSE_PRIORITY` present.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from coordinator_core.audit.snapshot import GroupSnapshot, MemberView

__all__ = ["CAUSES", "CAUSE_PRIORITY", "Cause", "new_generation_causes", "same_generation_changes"]

CAUSE_PRIORITY: tuple[str, ...] = (
    "history_gap",
    "history_start",
    "group_deleted",
    "group_created",
    "group_emptied",
    "member_joined",
    "static_member_rejoined_new_generation",
    "member_left_or_expired",
    "assignor_changed",
    "subscription_changed",
    "cooperative_follow_up",
    "aborted_generations",
    "metadata_or_leader_rejoin",
    "static_member_replaced",
    "same_generation_rewrite",
)
CAUSES = frozenset(CAUSE_PRIORITY)
_RANK = {c: i for i, c in enumerate(CAUSE_PRIORITY)}


class Cause(NamedTuple):
    cause: str
    member_id: str | None = None
    group_instance_id: str | None = None
    detail: str = ""


def ordered(causes: list[Cause]) -> list[Cause]:
    """Causes sorted by priority (stable), so the first one is the primary cause."""
    return sorted(causes, key=lambda c: _RANK[c.cause])


def _names(members: list[MemberView] | tuple[MemberView, ...], limit: int = 10) -> str:
    shown = ", ".join(m.label for m in members[:limit])
    return shown + (f", ... ({len(members) - limit} more)" if len(members) > limit else "")


def _tps(tps: object, limit: int = 20) -> str:
    items = sorted(tps)  # type: ignore[call-overload]
    shown = ", ".join(f"{t}-{p}" for t, p in items[:limit])
    return "[" + shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "") + "]"


def new_generation_causes(prev: GroupSnapshot, new: GroupSnapshot, *, missing: int,
                          known_instances: Mapping[str, str] | None = None) -> list[Cause]:
    """The causes of generation `new`, whose previous persisted state is `prev` (a real record, or
    `GroupSnapshot.initial()` when the history is known to start at the group's creation).

    `known_instances` maps static instance ids seen earlier in the audited history to their last
    member id: such an instance absent from `prev` that is back in `new` rejoined (it had expired or
    left) rather than joined for the first time."""
    out: list[Cause] = []
    if new.is_empty:
        gone = f"; gone since generation {prev.generation}: {_names(prev.members)}" if prev.members else ""
        out.append(Cause("group_emptied", detail=f"the join phase ended with no member{gone}"))
    elif prev.is_empty and prev.generation == 0 and prev.protocol_type is None:
        out.append(Cause("group_created", new.leader, None,
                         f"first generation with {len(new.members)} member(s): {_names(new.members)}"))
    elif prev.is_empty:
        for m in new.members:
            out.append(Cause("member_joined", m.member_id, m.group_instance_id,
                             f"joined the Empty group (generation {prev.generation})"))
    else:
        out.extend(_membership_changes(prev, new, known_instances or {}))
    if missing > 0:
        first, last = new.generation - missing, new.generation - 1
        ids = str(first) if missing == 1 else f"{first}..{last}"
        out.append(Cause("aborted_generations",
                         detail=f"{missing} generation(s) ({ids}) completed a join phase but never a sync"))
    if not out:
        out.append(Cause("metadata_or_leader_rejoin",
                         detail="same members, subscriptions and assignor as the previous generation"))
    return ordered(out)


def _membership_changes(prev: GroupSnapshot, new: GroupSnapshot, known_instances: Mapping[str, str]) -> list[Cause]:
    out: list[Cause] = []
    before, after = prev.by_identity(), new.by_identity()
    protocol_changed = prev.protocol != new.protocol or prev.protocol_type != new.protocol_type
    opaque = new.protocol_type != "consumer" and not protocol_changed
    changed_subscriptions: list[Cause] = []
    for ident, m in after.items():
        old = before.get(ident)
        if old is None:
            earlier = known_instances.get(m.group_instance_id) if m.group_instance_id is not None else None
            if earlier is not None:
                out.append(Cause("static_member_rejoined_new_generation", m.member_id, m.group_instance_id,
                                 f"instance was a member before generation {prev.generation} (as {earlier}); "
                                 f"back as {m.member_id}"))
            else:
                out.append(Cause("member_joined", m.member_id, m.group_instance_id, "new member"))
            continue
        if old.member_id != m.member_id:
            out.append(Cause("static_member_rejoined_new_generation", m.member_id, m.group_instance_id,
                             f"member id {old.member_id} -> {m.member_id}"))
        if old.topics is not None and m.topics is not None:
            if old.topics != m.topics:
                added, removed = m.topics - old.topics, old.topics - m.topics
                changed_subscriptions.append(Cause("subscription_changed", m.member_id, m.group_instance_id,
                                                   f"topics +{sorted(added)} -{sorted(removed)}"))
        elif opaque and old.subscription_raw != m.subscription_raw:
            changed_subscriptions.append(Cause("subscription_changed", m.member_id, m.group_instance_id,
                                               f"{new.protocol_type} member metadata changed"))
    if len(before) != len(after) or before.keys() != after.keys():
        for ident, m in before.items():
            if ident not in after:
                out.append(Cause("member_left_or_expired", m.member_id, m.group_instance_id,
                                 f"member of generation {prev.generation}, absent from generation {new.generation}"))
    if protocol_changed:
        out.append(Cause("assignor_changed", detail=f"protocol {prev.protocol_type}/{prev.protocol} -> "
                                                    f"{new.protocol_type}/{new.protocol}"))
    out.extend(changed_subscriptions)
    revoked = prev.revocations()
    if revoked:
        still_here = {m.member_id: m for m in prev.members if m.identity in after}
        followers = [(still_here[mid], tps) for mid, tps in revoked.items() if mid in still_here]
        if followers:
            detail = "; ".join(f"{m.label} revoked {_tps(tps)} in generation {prev.generation}"
                               for m, tps in followers)
            out.append(Cause("cooperative_follow_up", detail=detail))
    return out


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
