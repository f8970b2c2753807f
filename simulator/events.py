"""Discrete-event kernel: a heap of ``(time_s, priority, seq, callback)``.

SimPy's core idea in a few lines. Events at the same time run in ``priority``
order (lower first), then in the order they were scheduled (``seq``), so a run
is deterministic for a given input. Randomness never lives here: callers pass
seeded generators to whatever needs them.
"""

from __future__ import annotations

import heapq
from typing import Callable

# Priorities for events that fall on the same instant. A step that completes at
# time t is processed before requests that arrive at t, as in a real engine
# where the output of the running step is handled before the next schedule().
PRIO_STEP_DONE = 0
PRIO_TRANSFER = 1
PRIO_ARRIVAL = 2
PRIO_KICK = 3


class EventLoop:
    """A heap-ordered event loop. Time is in seconds (``now_s``)."""

    __slots__ = ("now_s", "_heap", "_seq", "num_events")

    def __init__(self) -> None:
        self.now_s = 0.0
        self._heap: list[tuple[float, int, int, Callable[[], None]]] = []
        self._seq = 0
        self.num_events = 0

    def at(self, time_s: float, callback: Callable[[], None], priority: int = PRIO_KICK) -> None:
        """Run ``callback()`` at absolute time ``time_s`` (>= now)."""
        if time_s < self.now_s:
            raise ValueError(f"event time {time_s!r} s is before the current time {self.now_s!r} s")
        self._seq += 1
        heapq.heappush(self._heap, (time_s, priority, self._seq, callback))

    def pending(self) -> int:
        """Number of events not yet run."""
        return len(self._heap)

    def run(self, until_s: float | None = None) -> None:
        """Process events in order until the heap is empty or the next one is after ``until_s``."""
        heap = self._heap
        while heap:
            if until_s is not None and heap[0][0] > until_s:
                self.now_s = until_s
                return
            time_s, _, _, callback = heapq.heappop(heap)
            self.now_s = time_s
            self.num_events += 1
            callback()
