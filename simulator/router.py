"""Request routers that pick a replica (engine) for each arriving request.

* ``round_robin``: replica ``i mod N`` for the i-th routed request.
* ``least_loaded``: the replica with the fewest unfinished requests (waiting +
  running, as vLLM's DP load balancer counts them); ties go to the lowest
  index after the last pick, so equal replicas are used in rotation. It polls
  every replica per pick, unless its owner sees every finish and has it
  ``follow`` the loads (one more per pick, fewer per ``finished``).
* ``kv_aware`` (P/D decode cluster only): the replica with the most free KV
  blocks at routing time; ties rotate as for ``least_loaded``. The P/D proxy has
  it read one-engine replicas' free-block counts from their pools directly.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Protocol, Sequence


class Loaded(Protocol):
    def num_unfinished(self) -> int:
        """Requests this replica holds that have not finished."""


class RoundRobinRouter:
    def __init__(self, num_replicas: int) -> None:
        self._n = num_replicas
        self._next = 0

    def pick(self, replicas: Sequence[Loaded]) -> int:
        index = self._next
        self._next = (index + 1) % self._n
        return index


class LeastLoadedRouter:
    def __init__(self, num_replicas: int) -> None:
        self._n = num_replicas
        self._start = 0
        self._loads: list[int] | None = None    # followed loads (``follow``); None: poll
        self._replicas: Sequence[Loaded] = ()   # followed replicas, polled to check (``verify``)
        self._verify = False

    def follow(self, replicas: Sequence[Loaded], verify: bool = False) -> None:
        """Keep the loads instead of polling: from now on every pick hands the picked replica one
        request and the owner reports every finish (``finished``). ``verify``: poll anyway and
        raise if the kept loads differ (debug runs)."""
        self._replicas = replicas[:self._n]
        self._loads = [r.num_unfinished() for r in self._replicas]
        self._verify = verify

    def took(self, index: int) -> None:
        """Replica ``index`` was handed one request without a pick (session affinity)."""
        if self._loads is not None:
            self._loads[index] += 1

    def finished(self, index: int, count: int) -> None:
        """``count`` requests of replica ``index`` finished (nothing to do when polling)."""
        if self._loads is not None:
            self._loads[index] -= count

    def pick(self, replicas: Sequence[Loaded]) -> int:
        """The least loaded replica, the first in rotation order from the last pick's successor."""
        loads = self._loads
        if loads is None:
            loads = [r.num_unfinished() for r in replicas[:self._n]]
        elif self._verify:
            polled = [r.num_unfinished() for r in self._replicas]
            if polled != loads:
                raise AssertionError(f"least_loaded router: kept loads {loads} != polled {polled}")
        best = _first_from(loads, min(loads), self._start)
        self._start = (best + 1) % self._n
        if self._loads is not None:
            loads[best] += 1
        return best


class KvAwareRouter:
    def __init__(self, num_replicas: int) -> None:
        self._n = num_replicas
        self._start = 0
        self._queues: list | None = None        # free queues read directly (``read_free_blocks``)
        self._verify = False

    def read_free_blocks(self, queues: Sequence, verify: bool = False) -> None:
        """Read replica i's free blocks as ``queues[i].num_free_blocks`` (its KV pool's free queue,
        the count ``num_free_kv_blocks()`` returns for a one-engine replica) instead of calling
        every replica per pick. ``verify``: call them anyway and raise if they differ (debug)."""
        self._queues = list(queues[:self._n])
        self._verify = verify

    def pick(self, replicas: Sequence) -> int:
        """The replica with the most free KV blocks, the first in rotation order on ties."""
        if self._queues is None:
            free = [r.num_free_kv_blocks() for r in replicas[:self._n]]
        else:
            free = list(map(_num_free_blocks, self._queues))
            if self._verify:
                polled = [r.num_free_kv_blocks() for r in replicas[:self._n]]
                if polled != free:
                    raise AssertionError(f"kv_aware router: read free blocks {free} != polled {polled}")
        best = _first_from(free, max(free), self._start)
        self._start = (best + 1) % self._n
        return best


_num_free_blocks = attrgetter("num_free_blocks")


def _first_from(values: list[int], value: int, start: int) -> int:
    """Index of the first ``value`` in rotation order from ``start`` (``value`` is in ``values``)."""
    try:
        return values.index(value, start)
    except ValueError:
        return values.index(value)


def make_router(name: str, num_replicas: int) -> RoundRobinRouter | LeastLoadedRouter | KvAwareRouter:
    if name == "round_robin":
        return RoundRobinRouter(num_replicas)
    if name == "least_loaded":
        return LeastLoadedRouter(num_replicas)
    if name == "kv_aware":
        return KvAwareRouter(num_replicas)
    raise ValueError(f"router {name!r} is not one of round_robin, least_loaded, kv_aware")
