"""Timers as data: keyed entries with deadlines, fired by the caller advancing time (CoordinatorTimer).

Scheduling a key that already exists replaces it (Java's CoordinatorTimer#schedule; the Scala
purgatory's complete-then-watch has the same effect). Timers due at the same deadline fire in the order
they were (re)scheduled: Kafka's timing wheel runs same-tick tasks in no specified order, and FIFO is
the order a single-threaded coordinator would most plausibly observe; it is also deterministic.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TypeAlias

TimerParam: TypeAlias = str | int
"""One argument of a timer's expiry handler: a group or member id, a delay, a generation or a flag
(a bool, which is an int)."""


@dataclass(frozen=True, slots=True)
class Timer:
    """One scheduled timer: `kind` selects the expiry handler, `params` are its arguments."""

    key: tuple[str, ...]
    kind: str
    deadline: int
    seq: int
    params: tuple[TimerParam, ...] = ()


def heartbeat_key(group_id: str, member_id: str) -> tuple[str, ...]:
    """Follows GroupMetadataManager#classicGroupHeartbeatKey (session, new-member and pending timers)."""
    return ("heartbeat", group_id, member_id)


def join_key(group_id: str) -> tuple[str, ...]:
    """Follows GroupMetadataManager#classicGroupJoinKey (join and initial-delay timers)."""
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, ...]:
    """Follows GroupMetadataManager#classicGroupSyncKey (pending-sync timer)."""
    return ("sync", group_id)


EXPIRATION_KEY: tuple[str, ...] = ("expiration",)


class TimerQueue:
    """Keyed timers ordered by (deadline, scheduling sequence)."""

    __slots__ = ("_heap", "_seq", "_timers")

    def __init__(self) -> None:
        self._timers: dict[tuple[str, ...], Timer] = {}
        self._heap: list[tuple[int, int, tuple[str, ...]]] = []
        self._seq = 0

    def schedule(self, key: tuple[str, ...], kind: str, deadline: int, params: tuple[TimerParam, ...] = ()) -> Timer:
        """Schedules (or replaces) the timer under `key`."""
        self._seq += 1
        timer = Timer(key, kind, deadline, self._seq, params)
        self._timers[key] = timer
        heapq.heappush(self._heap, (deadline, self._seq, key))
        return timer

    def cancel(self, key: tuple[str, ...]) -> None:
        """Cancels the timer under `key`, if any."""
        self._timers.pop(key, None)

    def get(self, key: tuple[str, ...]) -> Timer | None:
        return self._timers.get(key)

    def pop_due(self, now_ms: int) -> Timer | None:
        """Removes and returns the earliest timer due at or before `now_ms`."""
        deadline = self.next_deadline()
        if deadline is None or deadline > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)  # the live top: next_deadline dropped the stale ones
        return self._timers.pop(key)

    def next_deadline(self) -> int | None:
        """The earliest pending deadline, or None; drops the heap's stale entries (cancelled or
        rescheduled timers) on the way, so the top of the heap is then the earliest live timer."""
        while self._heap:
            deadline, seq, key = self._heap[0]
            current = self._timers.get(key)
            if current is None or current.seq != seq:
                heapq.heappop(self._heap)
                continue
            return deadline
        return None

    def all(self) -> list[Timer]:
        """Every pending timer, in firing order."""
        return sorted(self._timers.values(), key=lambda t: (t.deadline, t.seq))

    def clear(self) -> None:
        self._timers.clear()
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._timers)
