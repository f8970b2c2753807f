"""Waiting queues of the scheduler, mirroring vLLM 0.33 `vllm/v1/core/sched/request_queue.py`.

FCFS: a deque; arrivals appended, preempted requests prepended (served first on resume).
PRIORITY: a binary heap ordered by `Request.__lt__` = (priority, arrival_s, request_id); a
preempted request is simply pushed again (a heap has no front).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Iterator

from simulator.request import Request


class FCFSRequestQueue(deque):
    """A deque of requests (len/bool/iter are the deque's own: the scheduler asks per step)."""

    add_request = deque.append
    pop_request = deque.popleft
    prepend_request = deque.appendleft

    def peek_request(self) -> Request:
        if not self:
            raise IndexError("peek from an empty queue")
        return self[0]

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        """Like deque.extendleft: the requests end up in reverse order of iteration."""
        self.extendleft(requests)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = set(requests)
        keep = [r for r in self if r not in drop]
        self.clear()
        self.extend(keep)


class PriorityRequestQueue:
    def __init__(self) -> None:
        self._heap: list[Request] = []

    def add_request(self, request: Request) -> None:
        heapq.heappush(self._heap, request)

    def pop_request(self) -> Request:
        if not self._heap:
            raise IndexError("pop from empty heap")
        return heapq.heappop(self._heap)

    def peek_request(self) -> Request:
        if not self._heap:
            raise IndexError("peek from empty heap")
        return self._heap[0]

    def prepend_request(self, request: Request) -> None:
        self.add_request(request)

    def prepend_requests(self, requests: Iterable[Request]) -> None:
        for r in requests:
            self.add_request(r)

    def remove_requests(self, requests: Iterable[Request]) -> None:
        drop = set(requests)
        self._heap = [r for r in self._heap if r not in drop]
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def __iter__(self) -> Iterator[Request]:
        heap = self._heap[:]
        while heap:
            yield heapq.heappop(heap)


def make_request_queue(policy: str) -> FCFSRequestQueue | PriorityRequestQueue:
    if policy == "fcfs":
        return FCFSRequestQueue()
    if policy == "priority":
        return PriorityRequestQueue()
    raise ValueError(f"policy={policy!r}; valid: 'fcfs', 'priority'")
