"""Broken protocol guarantees visible in the persisted assignments (offset regressions are found on
the offset-commit path, see `coordinator_audit.core.audit.offsets.OffsetSummary.commit`).

Checks on one record alone (run on every new generation, including the first of a partial history):
* `duplicate_assignment`: a partition is assigned to two or more members of one generation.
* `assignment_outside_subscription`: a member is assigned a partition of a topic it did not
  subscribe to.

Checks that need the previous generation's assignment in hand (never run at a history start, after
an Empty generation, or when some previous assignment did not decode):
* `unsafe_cooperative_move` (KIP-429): partition P is assigned to B while another member A of the
  group reported P in its ownedPartitions at this join *and* A was assigned P in the previous
  generation: P went from A to B in one step instead of being revoked first. Eager members report
  no owned partitions, so eager groups never trip it.
* `stale_ownership_claim` (KIP-341): two or more members claim P at this join (ownedPartitions or
  the sticky assignor's userData); the claimant(s) that did not own P in the previous generation
  are stale and named first in `member_ids`. When none of them owned it, the claims' generations
  (Subscription v2 GenerationId or userData) name the stale ones if they differ; otherwise all
  claimants are listed and the detail says the stale one cannot be told.

`static_replacement_changed_assignment` (KIP-345: a static member that restarts keeps its
assignment), in two places:
* at the W3 record: the replacing member id's assignment bytes differ from the replaced one's;
* at the next generation: an instance replaced during the previous generation gets a different
  set of partitions although nothing justifies a move (same member identities, same subscribed
  topics, same assignor) — e.g. an assignor that orders members by member id instead of instance id.
"""

from __future__ import annotations

from typing import NamedTuple

from coordinator_audit.core.audit.causes import Replacement
from coordinator_audit.core.audit.snapshot import GroupSnapshot, MemberView, TopicPartition

__all__ = [
    "VIOLATION_KINDS",
    "Violation",
    "assignment_violations",
    "ownership_violations",
    "replaced_member_moves",
    "replacement_violations",
]

VIOLATION_KINDS = (
    "duplicate_assignment",
    "unsafe_cooperative_move",
    "stale_ownership_claim",
    "assignment_outside_subscription",
    "static_replacement_changed_assignment",
    "offset_regression",
)


class Violation(NamedTuple):
    kind: str
    topic: str | None
    partition: int | None
    member_ids: tuple[str, ...]
    detail: str


def assignment_violations(new: GroupSnapshot) -> list[Violation]:
    """Duplicate assignments and assignments outside the member's subscription, in one record."""
    out: list[Violation] = []
    if new.has_repeated_assignments():
        total = 0  # distinct (topic, partition) pairs of each member, summed
        union: set[TopicPartition] = set()
        for m in new.members:
            distinct = m.assigned_distinct
            total += len(distinct)
            union.update(distinct)
        if total != len(union):  # a partition of two members
            for (topic, partition), holders in sorted(new.owners().items()):
                if len(holders) > 1:
                    out.append(Violation("duplicate_assignment", topic, partition,
                                         tuple(m.member_id for m in holders),
                                         f"{topic}-{partition} assigned to {len(holders)} members in generation "
                                         f"{new.generation}"))
    for m in new.members:
        if m.topics is None or not m.assigned_groups or m.assigned_topics <= m.topics:
            continue
        for topic, partition in m.assigned_distinct:
            if topic not in m.topics:
                out.append(Violation("assignment_outside_subscription", topic, partition, (m.member_id,),
                                     f"{m.label} is assigned {topic}-{partition} but subscribed to "
                                     f"{sorted(m.topics)}"))
    return out


def ownership_violations(prev: GroupSnapshot, new: GroupSnapshot) -> list[Violation]:
    """Unsafe cooperative moves and stale ownership claims of generation `new`, judged against the
    previous generation `prev` (which must be the real previous record)."""
    if prev.is_empty or new.is_empty or any(m.assigned_groups is None for m in prev.members):
        return []
    claimants = [m for m in new.members if m.claims]
    if not claimants:
        return []
    before = {m.identity: m.assigned_set for m in prev.members}
    out: list[Violation] = []
    holder: dict[TopicPartition, list[MemberView]] | None = None
    for a in claimants:
        if not a.owned or a.owned <= a.assigned_set:
            continue
        kept_from_before = a.owned & before.get(a.identity, _NOTHING)
        moved = kept_from_before - a.assigned_set if kept_from_before else kept_from_before
        if not moved:
            continue
        if holder is None:
            holder = {}
            for m in new.members:
                for tp in dict.fromkeys(m.assigned or ()):
                    holder.setdefault(tp, []).append(m)
        for tp in sorted(moved):
            for b in holder.get(tp, ()):
                out.append(Violation(
                    "unsafe_cooperative_move", tp[0], tp[1], (a.member_id, b.member_id),
                    f"{tp[0]}-{tp[1]} assigned to {b.label} in generation {new.generation} while "
                    f"{a.label}, its owner in generation {prev.generation}, still reported owning it"))
    if len(claimants) < 2:
        return out
    seen: set[TopicPartition] = set()
    contested: set[TopicPartition] = set()
    for a in claimants:  # claimed by two or more members
        ca = a.claims
        if not seen.isdisjoint(ca):
            contested |= seen & ca
        seen |= ca
    for tp in sorted(contested):
        out.extend(_stale_claim(tp, [m for m in claimants if tp in m.claims], before, prev, new))
    return out


_NOTHING: frozenset[TopicPartition] = frozenset()


def _stale_claim(tp: TopicPartition, claimants: list[MemberView], before: dict[tuple[str, str], frozenset[TopicPartition]],
                 prev: GroupSnapshot, new: GroupSnapshot) -> list[Violation]:
    backed = [m for m in claimants if tp in before.get(m.identity, ())]
    stale = [m for m in claimants if tp not in before.get(m.identity, ())]
    where = f"{tp[0]}-{tp[1]} claimed by {len(claimants)} members at the join of generation {new.generation}"
    if backed and stale:
        return [Violation(
            "stale_ownership_claim", tp[0], tp[1], tuple(m.member_id for m in stale + backed),
            f"{where}; stale: {_with_gen(stale)}; owner in generation {prev.generation}: {_with_gen(backed)}")]
    if backed:  # several members owned it before: that was already a duplicate_assignment of prev
        return []
    gens = [m.claim_generation for m in claimants]
    known = [g for g in gens if g is not None]
    if len(known) == len(gens) and len(set(known)) > 1:
        top = max(known)
        stale = [m for m in claimants if m.claim_generation != top]
        fresh = [m for m in claimants if m.claim_generation == top]
        return [Violation(
            "stale_ownership_claim", tp[0], tp[1], tuple(m.member_id for m in stale + fresh),
            f"{where}; none owned it in generation {prev.generation}; stale by generation: "
            f"{_with_gen(stale)}; newest claim: {_with_gen(fresh)}")]
    return [Violation(
        "stale_ownership_claim", tp[0], tp[1], tuple(m.member_id for m in claimants),
        f"{where}; none owned it in generation {prev.generation} and the claims' generations "
        f"({_with_gen(claimants)}) cannot tell the stale claimant")]


def _with_gen(members: list[MemberView]) -> str:
    return ", ".join(f"{m.label} (generation {m.claim_generation if m.claim_generation is not None else '?'})"
                     for m in members)


def replacement_violations(generation: int, replacements: list[Replacement]) -> list[Violation]:
    """KIP-345: a static member's replacement keeps the cached assignment bytes."""
    out: list[Violation] = []
    for old, new in replacements:
        if old.assignment_raw != new.assignment_raw:
            before = _tp_text(old.assigned) if old.assigned is not None else f"{len(old.assignment_raw)} bytes"
            after = _tp_text(new.assigned) if new.assigned is not None else f"{len(new.assignment_raw)} bytes"
            out.append(Violation(
                "static_replacement_changed_assignment", None, None, (old.member_id, new.member_id),
                f"instance {new.group_instance_id}: {old.member_id} -> {new.member_id} in generation "
                f"{generation}, assignment {before} -> {after}"))
    return out


def replaced_member_moves(prev: GroupSnapshot, new: GroupSnapshot, replaced: set[str]) -> list[Violation]:
    """Instances in `replaced` (static replacements during `prev`'s generation) whose partitions
    changed in `new` while membership, subscriptions and assignor stayed the same."""
    if not replaced or new.is_empty or (prev.protocol, prev.protocol_type) != (new.protocol, new.protocol_type):
        return []
    before, after = prev.by_identity(), new.by_identity()
    if before.keys() != after.keys() or any(before[i].topics != m.topics for i, m in after.items()):
        return []
    out: list[Violation] = []
    for ident, m in after.items():
        old = before[ident]
        if ident[0] != "instance" or ident[1] not in replaced or old.assigned is None or m.assigned is None:
            continue
        if set(old.assigned) != set(m.assigned):
            out.append(Violation(
                "static_replacement_changed_assignment", None, None, (m.member_id,),
                f"instance {ident[1]} (replaced in generation {prev.generation}) moved from "
                f"{_tp_text(old.assigned)} to {_tp_text(m.assigned)} in generation {new.generation} with the same "
                f"members, subscriptions and assignor"))
    return out


def _tp_text(tps: tuple[TopicPartition, ...] | None) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in (tps or ())) + "]"
