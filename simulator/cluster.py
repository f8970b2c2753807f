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


@dataclass(frozen=True)
class Admission:
    """vLLM's API-server admission limits (``AsyncLLM.check_admission``, vLLM 0.29+): a request
    arriving at a server is refused with HTTP 503 when the server's unfinished requests (waiting +
    running over its DP ranks) would exceed ``max_num_queued_reqs``, or when the prompt tokens of
    its requests still in prefill (no token out yet: vLLM counts the whole prompt) reach
    ``max_num_queued_tokens``."""

    max_num_queued_reqs: int | None = None
    max_num_queued_tokens: int | None = None

    def refusal(self, schedulers: list) -> str | None:
        """Why a server of these schedulers refuses one more request now, or None."""
        if self.max_num_queued_reqs is not None:
            n = sum(s.num_unfinished() for s in schedulers)
            if n + 1 > self.max_num_queued_reqs:
                return (f"HTTP 503: the server holds {n} unfinished requests "
                        f"(--max-num-queued-reqs {self.max_num_queued_reqs})")
        if self.max_num_queued_tokens is not None:
            tokens = sum(r.prompt_len for s in schedulers for r in s.requests.values() if r.num_output_tokens == 0)
            if tokens >= self.max_num_queued_tokens:
                return (f"HTTP 503: the server's requests in prefill hold {tokens} prompt tokens "
                        f"(--max-num-queued-tokens {self.max_num_queued_tokens})")
        return None


def _schedulers(replica: Replica) -> list:
    """The schedulers of one replica (a lockstep DP replica's ranks, else its one scheduler)."""
    return list(getattr(replica.scheduler, "ranks", [replica.scheduler]))


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
    admission: Admission | None = None            # the servers' API-server limits (None: none)
    router: RoundRobinRouter | LeastLoadedRouter | KvAwareRouter = field(init=False)
    _groups: list[EngineGroup] = field(init=False, default_factory=list)
    _session_server: dict[str, int] = field(init=False, default_factory=dict)   # session -> its server
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

    def submit(self, spec: RequestSpec) -> Request | str:
        """Route ``spec`` to a replica (and, for a server of DP engines, to a rank by vLLM's DP load
        balancer) and hand it over; return the engine's request state, or why the server refused
        it (``admission``). A round of a multi-round session goes to the server its session's first
        round went to (session affinity: its earlier rounds' blocks are cached there); within a
        server of DP engines vLLM's DP load balancer still picks the rank."""
        sid = spec.session_id
        g = self._session_server.get(sid) if sid else None
        if g is None:
            g = self.router.pick(self.replicas if self.dp_ranks == 1 else self._groups)
            if sid:
                self._session_server[sid] = g
        if self.dp_ranks == 1:
            server, balancer = [self.replicas[g]], None
        else:
            server, balancer = self._groups[g].engines, self._balancers[g]
        if self.admission:      # the server refuses before its DP load balancer picks a rank
            refusal = self.admission.refusal([s for e in server for s in _schedulers(e)])
            if refusal:
                return refusal
        return server[balancer.pick() if balancer else 0].add_request(spec)
