"""Deliberately broken leader assignors, for planting protocol violations in simulated logs.

Each wrapper keeps the wrapped assignor's name and protocols (so the group selects it as usual), runs
the real assignment, then breaks it once, and reports what it did through `report(kind, detail)`.
One-shot by default: a real bug would repeat, but one planted violation per scenario keeps the
ground truth readable and stops the victim's rejoin from looping forever.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from coordinator_audit.core.client.assignors.base import (
    ConsumerPartitionAssignor,
    GroupInput,
    MemberAssignment,
    MemberSubscription,
    TopicPartition,
)

Report = Callable[[str, dict[str, Any]], None]


class BuggyAssignor(ConsumerPartitionAssignor):
    """Wraps a real assignor; `bug` is one of the scenario format's ASSIGNOR_BUGS."""

    name = "buggy"  # replaced per instance

    def __init__(self, inner: ConsumerPartitionAssignor, bug: str, *, report: Report,
                 all_topics: Callable[[], Mapping[str, int]], one_shot: bool = True) -> None:
        self.inner = inner
        self.bug = bug
        self.name = inner.name  # type: ignore[misc]
        self.supported_protocols = inner.supported_protocols  # type: ignore[misc]
        self._report = report
        self._all_topics = all_topics
        self._armed = True
        self._one_shot = one_shot

    def _assign_partitions(self, group: GroupInput) -> dict[str, list[TopicPartition]]:  # pragma: no cover
        raise NotImplementedError("BuggyAssignor overrides assign()")

    def subscription_user_data(self, topics: Iterable[str], current_assignment: Sequence[Any] | None = None,
                               generation: int | None = None) -> bytes | None:
        return self.inner.subscription_user_data(topics, current_assignment, generation)

    def on_assignment(self, assignment: MemberAssignment | Sequence[Any], generation: int) -> None:
        self.inner.on_assignment(assignment, generation)

    def assign(self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription],
               *, partition_racks: Any = None) -> dict[str, MemberAssignment]:
        if not self._armed:
            return self.inner.assign(partitions_per_topic, subscriptions, partition_racks=partition_racks)
        if self.bug == "ignore_static_order":
            # orders members by something unstable (here: a rotation per call) instead of their
            # group.instance.id, so a static member's partitions move at the next rebalance
            self._calls = getattr(self, "_calls", 0) + 1
            ranked = sorted(subscriptions, key=lambda m: (subscriptions[m].group_instance_id or "", m))
            n = len(ranked)
            shift = (self._calls - 1) % n if n else 0
            renamed = {m: replace(subscriptions[m], group_instance_id=f"{(i + shift) % n:06d}")
                       for i, m in enumerate(ranked)}
            result = self.inner.assign(partitions_per_topic, renamed, partition_racks=partition_racks)
            if shift:
                self._report("ignore_static_order", {"members": ranked, "rotation": shift})
            return result
        result = self.inner.assign(partitions_per_topic, subscriptions, partition_racks=partition_racks)
        broken = getattr(self, f"_{self.bug}")(result, subscriptions)
        if broken is not None and self._one_shot:
            self._armed = False
        return broken if broken is not None else result

    def _duplicate_assignment(self, result: dict[str, MemberAssignment], subs: Mapping[str, MemberSubscription]
                              ) -> dict[str, MemberAssignment] | None:
        members = sorted(result)
        for a in members:
            for tp in result[a].partitions:
                for b in members:
                    if b != a and tp.topic in subs[b].topics and tp not in result[b].partitions:
                        out = dict(result)
                        out[b] = MemberAssignment((*result[b].partitions, tp), result[b].user_data)
                        self._report("duplicate_assignment", {"topic": tp.topic, "partition": tp.partition,
                                                              "member_ids": sorted([a, b])})
                        return out
        return None

    def _unsafe_cooperative_move(self, result: dict[str, MemberAssignment], subs: Mapping[str, MemberSubscription]
                                 ) -> dict[str, MemberAssignment] | None:
        members = sorted(result)
        for a in members:
            owned = [tp for tp in subs[a].owned_partitions if tp in result[a].partitions]
            for tp in owned:
                for b in members:
                    if b != a and tp.topic in subs[b].topics:
                        out = dict(result)
                        out[a] = MemberAssignment(tuple(p for p in result[a].partitions if p != tp),
                                                  result[a].user_data)
                        out[b] = MemberAssignment((*result[b].partitions, tp), result[b].user_data)
                        self._report("unsafe_cooperative_move", {"topic": tp.topic, "partition": tp.partition,
                                                                 "from": a, "to": b})
                        return out
        return None

    def _outside_subscription(self, result: dict[str, MemberAssignment], subs: Mapping[str, MemberSubscription]
                              ) -> dict[str, MemberAssignment] | None:
        topics = self._all_topics()
        for m in sorted(result):
            for t in sorted(topics):
                if t not in subs[m].topics and topics[t] > 0:
                    tp = TopicPartition(t, 0)
                    out = dict(result)
                    out[m] = MemberAssignment((*result[m].partitions, tp), result[m].user_data)
                    self._report("assignment_outside_subscription", {"topic": t, "partition": 0,
                                                                     "member_ids": [m]})
                    return out
        return None
