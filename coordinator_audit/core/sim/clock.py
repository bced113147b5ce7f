"""Virtual time: a clock that only moves when the event queue says so, and the queue itself.

Events at the same instant run in the order they were scheduled (a sequence number breaks ties),
so a run is a pure function of the scenario and its seed.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

from coordinator_audit.core.errors import ScenarioError


@dataclass(slots=True, eq=False)
class _Entry:
    at: int
    seq: int
    action: Callable[[int], None]
    label: str = ""
    cancelled: bool = False


class EventQueue:
    """A deterministic discrete-event queue over virtual milliseconds."""

    def __init__(self, start_ms: int = 0) -> None:
        self._heap: list[tuple[int, int, _Entry]] = []
        """(at, seq, entry): ordered by time, then scheduling order."""
        self._seq = 0
        self.now = start_ms

    def schedule(self, at: int, action: Callable[[int], None], label: str = "") -> _Entry:
        """Runs `action(now)` at virtual time `at` (never in the past)."""
        if at < self.now:
            raise ScenarioError(f"event {label!r} scheduled at {at}, before the current time {self.now}")
        self._seq += 1
        entry = _Entry(at, self._seq, action, label)
        heapq.heappush(self._heap, (at, self._seq, entry))
        return entry

    def after(self, delay_ms: int, action: Callable[[int], None], label: str = "") -> _Entry:
        return self.schedule(self.now + max(0, delay_ms), action, label)

    @staticmethod
    def cancel(entry: _Entry | None) -> None:
        if entry is not None:
            entry.cancelled = True

    def peek_time(self) -> int | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def run_until(self, end_ms: int, *, max_events: int = 2_000_000) -> int:
        """Runs every event due at or before `end_ms`; returns how many ran. The clock ends at `end_ms`."""
        ran = 0
        while True:
            t = self.peek_time()
            if t is None or t > end_ms:
                break
            entry = heapq.heappop(self._heap)[2]
            self.now = entry.at
            entry.action(entry.at)
            ran += 1
            if ran > max_events:
                raise ScenarioError(f"more than {max_events} events before t={end_ms}: a loop in the simulation?")
        self.now = max(self.now, end_ms)
        return ran

    def pending(self) -> list[_Entry]:
        """The events still to run (in no particular order)."""
        return [e for _, _, e in self._heap if not e.cancelled]

    def __len__(self) -> int:
        return sum(1 for _, _, e in self._heap if not e.cancelled)
