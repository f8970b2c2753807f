"""Request routers that pick a replica (engine) for each arriving request.

* ``round_robin``: replica ``i mod N`` for the i-th routed request.
* ``least_loaded``: the replica with the fewest unfinished requests (waiting +
  running, as vLLM's DP load balancer counts them); ties go to the lowest
  index after the last pick, so equal replicas are used in rotation.
* ``kv_aware`` (P/D decode cluster only): the replica with the most free KV
  blocks at routing time; ties rotate as for ``least_loaded``.
"""

from __future__ import annotations

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

    def pick(self, replicas: Sequence[Loaded]) -> int:
        """The least loaded replica, the first in rotation order from the last pick's successor."""
        loads = [r.num_unfinished() for r in replicas[:self._n]]
        best = _first_from(loads, min(loads), self._start)
        self._start = (best + 1) % self._n
        return best


class KvAwareRouter:
    def __init__(self, num_replicas: int) -> None:
        self._n = num_replicas
        self._start = 0

    def pick(self, replicas: Sequence) -> int:
        """The replica with the most free KV blocks, the first in rotation order on ties."""
        free = [r.num_free_kv_blocks() for r in replicas[:self._n]]
        best = _first_from(free, max(free), self._start)
        self._start = (best + 1) % self._n
        return best


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
