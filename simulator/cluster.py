"""Control plane: a serving spec compiles into clusters of roles, each holding replicas.

Roles follow DESIGN.md: ``C`` co-located (prefill and decode in one engine),
``P``/``D`` prefill/decode disaggregated, ``A``/``F`` attention/FFN
disaggregated. The co-located architecture compiles into one cluster of role
``C`` with ``num_replicas x data_parallel_size`` engines behind one router
(``simulator.simulation``); prefill/decode disaggregation into a ``P`` and a
``D`` cluster joined by the explicit KV-transfer event
(``simulator.control_plane``, ``simulator.pd_proxy``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from simulator.replica import Replica
from simulator.request import Request, RequestSpec
from simulator.router import KvAwareRouter, LeastLoadedRouter, RoundRobinRouter, make_router


class Role(enum.Enum):
    COLOCATED = "C"
    PREFILL = "P"
    DECODE = "D"
    ATTENTION = "A"
    FFN = "F"


@dataclass
class Cluster:
    """Replicas of one role behind a router."""

    role: Role
    replicas: list[Replica]
    router_name: str
    gpus_per_replica: int
    router: RoundRobinRouter | LeastLoadedRouter | KvAwareRouter = field(init=False)

    def __post_init__(self) -> None:
        if not self.replicas:
            raise ValueError(f"cluster of role {self.role.value} has no replicas; give it at least one")
        self.router = make_router(self.router_name, len(self.replicas))

    @property
    def num_gpus(self) -> int:
        return len(self.replicas) * self.gpus_per_replica

    def submit(self, spec: RequestSpec) -> Request:
        """Route ``spec`` to a replica and hand it over; return the replica's request state."""
        return self.replicas[self.router.pick(self.replicas)].add_request(spec)
