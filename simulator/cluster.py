"""Control plane: a serving spec compiles into clusters of roles, each holding replicas.

Roles follow DESIGN.md: ``C`` co-located (prefill and decode in one engine),
``P``/``D`` prefill/decode disaggregated, ``A``/``F`` attention/FFN
disaggregated. The co-located architecture compiles into one cluster of role
``C`` with ``num_replicas x data_parallel_size`` engines behind one router
(``simulator.simulation``); prefill/decode disaggregation into a ``P`` and a
``D`` cluster joined by the explicit KV-transfer event
(``simulator.control_plane``, ``simulator.pd_proxy``).

A dense model's DP ranks are independent engines, but one ``vllm serve
--data-parallel-size N`` is one server: its API server sends each request to a
rank by vLLM's DP load-balancer score (``DPLBAsyncMPClient``, for any model
with DP > 1). A cluster built with ``dp_ranks = N`` routes in two levels, as
that deployment does: ``--router`` picks a replica (a server of N consecutive
engines), ``simulator.dp_group.DpLoadBalancer`` the rank within it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from simulator.dp_group import DpLoadBalancer
from simulator.replica import Replica
from simulator.request import Request, RequestSpec
from simulator.router import KvAwareRouter, LeastLoadedRouter, RoundRobinRouter, make_router
from simulator.vllm_version import SEMANTICS


class Role(enum.Enum):
    COLOCATED = "C"
    PREFILL = "P"
    DECODE = "D"
    ATTENTION = "A"
    FFN = "F"


class EngineGroup:
    """The independent DP engines of one server, as a router sees it (summed loads)."""

    def __init__(self, engines: list[Replica]) -> None:
        self.engines = engines

    def num_unfinished(self) -> int:
        return sum(e.num_unfinished() for e in self.engines)

    def num_free_kv_blocks(self) -> int:
        return sum(e.num_free_kv_blocks() for e in self.engines)


@dataclass
class Cluster:
    """Replicas of one role behind a router; with ``dp_ranks`` > 1, each run of ``dp_ranks``
    consecutive replicas is one server's independent DP engines (module docstring)."""

    role: Role
    replicas: list[Replica]
    router_name: str
    gpus_per_replica: int
    dp_ranks: int = 1
    vllm_version: tuple[int, int] = SEMANTICS     # the release whose DP load balancer picks the rank
    router: RoundRobinRouter | LeastLoadedRouter | KvAwareRouter = field(init=False)
    _groups: list[EngineGroup] = field(init=False, default_factory=list)
    _balancers: list[DpLoadBalancer] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError(f"cluster of role {self.role.value} has no replicas; give it at least one")
        d = self.dp_ranks
        if d < 1 or len(self.replicas) % d:
            raise ValueError(f"cluster of role {self.role.value}: {len(self.replicas)} engines do not form "
                             f"servers of dp_ranks={d}; give a divisor of the engine count")
        if d > 1:
            self._groups = [EngineGroup(self.replicas[i:i + d]) for i in range(0, len(self.replicas), d)]
            self._balancers = [DpLoadBalancer([e.scheduler for e in g.engines], self.vllm_version)
                               for g in self._groups]
        self.router = make_router(self.router_name, len(self.replicas) // d)

    @property
    def num_gpus(self) -> int:
        return len(self.replicas) * self.gpus_per_replica

    def submit(self, spec: RequestSpec) -> Request:
        """Route ``spec`` to a replica (and, for a server of DP engines, to a rank by vLLM's DP load
        balancer) and hand it over; return the engine's request state."""
        if self.dp_ranks == 1:
            return self.replicas[self.router.pick(self.replicas)].add_request(spec)
        g = self.router.pick(self._groups)
        return self._groups[g].engines[self._balancers[g].pick()].add_request(spec)
