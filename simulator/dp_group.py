"""Data-parallel ranks of an MoE model stepping in lockstep, behind one scheduler interface.

vLLM (``DPEngineCoreProc``, engine-semantics.md §5.1): with an MoE model every
DP rank has its own scheduler, KV cache and requests, but the forwards run in
lockstep because the MoE layers need a collective on every forward. A rank
with nothing to do runs a dummy batch while any rank is busy, and with CUDA
graphs all ranks pad to the busiest rank's token count. So one step of the
group lasts as long as its slowest rank.

``LockstepRanks`` offers the scheduler protocol the replica drives
(``has_requests``, ``schedule``, ``update_from_output``...) over N ranks: a
group step schedules every rank that has requests (idle ranks contribute a
dummy batch, i.e. ``None``) and processes every rank's output when the step
ends. New requests go to the rank with the lowest load score of vLLM's DP load
balancer (``DPLBAsyncMPClient.get_core_engine_for_request``, ``dp_load_score``):
waiting + running plus, when the rank has waiting requests, waiting x 6 x
max(0, KV usage - 0.5) from vLLM 0.27, the scan starting one rank further each
pick; waiting x 4 + running up to 0.26, the scan always starting at rank 0 (read
in the 0.10.2-0.33 wheels' ``vllm/v1/engine/core_client.py``). vLLM scores the
coordinator's snapshot (about every 100 ms) plus the requests it has routed
since; the simulator scores the ranks' exact counts. ``DpLoadBalancer`` is that choice on
its own: a dense model's DP ranks are independent engines (no lockstep), yet the API server
routes to them by the same score (``simulator.cluster``).

Inside a P/D role (``--architecture pdd``, AFD's prefill role) every rank is a
scheduler with the role's KV connector. A decode rank whose only requests wait
for their remote KV schedules no tokens, so it runs a dummy batch in the group's
step (it does not make the group busy); the proxy finds a request's rank with
``rank_of`` to pick the P->D link and to report the finished read to that rank.
Not modelled (as for a single engine, ``simulator.pd_proxy``): when no rank has
tokens vLLM keeps the wave alive with dummy forwards until the pull lands; here
the group idles and the finished pull wakes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.request import Request, RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerOutput, UpdateResult
from simulator.vllm_version import DP_KV_PENALTY, SEMANTICS


def dp_load_score(waiting: int, running: int, kv_usage: float, vllm_version: tuple[int, int]) -> float:
    """vLLM's DP load-balancer score of one rank (the lowest wins): from 0.27 waiting + running,
    plus waiting x 6 x max(0, kv_usage - 0.5) when the rank has waiting requests; up to 0.26
    waiting x 4 + running. ``kv_usage``: the fraction of the rank's KV blocks in use."""
    if vllm_version < DP_KV_PENALTY:
        return waiting * 4 + running
    score = float(waiting + running)
    if waiting:
        score += waiting * 6.0 * max(0.0, kv_usage - 0.5)
    return score


@dataclass(frozen=True, slots=True)
class LockstepOutput:
    """One group step: each rank's plan, ``None`` for a rank that runs a dummy batch."""

    outputs: tuple[SchedulerOutput | None, ...]
    total_num_scheduled_tokens: int
    remote_kv_request_ids: tuple[str, ...] = ()   # P/D consumer ranks: admitted for a KV pull


class DpLoadBalancer:
    """vLLM's DP load balancer over the schedulers of one replica's DP ranks (lockstep or not)."""

    def __init__(self, schedulers: list[Scheduler], vllm_version: tuple[int, int] = SEMANTICS) -> None:
        """``vllm_version``: the release whose score and scan order to follow (``dp_load_score``)."""
        self.ranks = schedulers
        self.vllm_version = vllm_version
        self._rotate = vllm_version >= DP_KV_PENALTY      # the scan start advances each pick from 0.27
        self._start = 0

    def pick(self) -> int:
        """The rank vLLM's DP load balancer sends the next request to (``dp_load_score``; the first
        of the lowest scores in scan order)."""
        n, start, version = len(self.ranks), self._start, self.vllm_version
        best, best_score = start, None
        for i in range(n):
            idx = (start + i) % n
            s = self.ranks[idx]
            running, waiting = s.get_request_counts()
            score = dp_load_score(waiting, running, s.kv.pool.usage() if waiting else 0.0, version)
            if best_score is None or score < best_score:
                best, best_score = idx, score
        if self._rotate:
            self._start = (start + 1) % n
        return best


class LockstepRanks:
    """N DP ranks (each a ``Scheduler`` with its own KV cache) that step together."""

    def __init__(self, schedulers: list[Scheduler], vllm_version: tuple[int, int] = SEMANTICS) -> None:
        """``vllm_version``: the release whose DP load balancer routes new requests (``dp_load_score``)."""
        if len(schedulers) < 2:
            raise ValueError(f"a lockstep DP group needs at least 2 ranks, got {len(schedulers)}")
        self.ranks = schedulers
        self.vllm_version = vllm_version
        self._balancer = DpLoadBalancer(schedulers, vllm_version)

    def pick_rank(self) -> int:
        """The rank vLLM's DP load balancer sends the next request to (``DpLoadBalancer.pick``)."""
        return self._balancer.pick()

    def add_request(self, spec: RequestSpec, **kv_params: bool) -> Request:
        """Queue ``spec`` on the rank the DP load balancer picks (``pick_rank``); ``kv_params``: P/D
        flags of ``Scheduler.add_request``."""
        return self.ranks[self.pick_rank()].add_request(spec, **kv_params)

    def rank_of(self, request_id: str) -> int:
        """The rank holding unfinished ``request_id`` (P/D: which link and scheduler it uses)."""
        for i, s in enumerate(self.ranks):
            if request_id in s.requests:
                return i
        raise ValueError(f"request {request_id!r} is not unfinished on any DP rank")

    def num_free_kv_blocks(self) -> int:
        """Free KV blocks summed over the ranks (the P/D ``kv_aware`` router's load)."""
        return sum(s.kv.num_free_blocks for s in self.ranks)

    def has_requests(self) -> bool:
        return any(s.has_requests() for s in self.ranks)

    def has_unfinished_requests(self) -> bool:
        return any(s.has_unfinished_requests() for s in self.ranks)

    def num_unfinished(self) -> int:
        return sum(s.num_unfinished() for s in self.ranks)

    def get_request_counts(self) -> tuple[int, int]:
        running = waiting = 0
        for s in self.ranks:
            r, w = s.get_request_counts()
            running += r
            waiting += w
        return running, waiting

    def schedule(self) -> LockstepOutput:
        outs = tuple(s.schedule() if s.has_requests() else None for s in self.ranks)
        remote = tuple(rid for o in outs if o is not None for rid in o.remote_kv_request_ids)
        return LockstepOutput(outs, sum(o.total_num_scheduled_tokens for o in outs if o is not None), remote)

    def update_from_output(self, out: LockstepOutput, now_s: float | None = None) -> UpdateResult:
        tokens: list[str] = []
        token_reqs: list[Request] = []
        first: list[str] = []
        finished: list[str] = []
        counts: list[int] = []      # speculative decoding: tokens per request (UpdateResult.num_new_tokens)
        for sched, o in zip(self.ranks, out.outputs):
            if o is None:
                continue
            r = sched.update_from_output(o, now_s)
            tokens += r.token_request_ids
            token_reqs += r.token_requests
            first += r.first_token_request_ids
            finished += r.finished_request_ids
            counts += r.num_new_tokens
        return UpdateResult(tuple(tokens), tuple(first), tuple(finished), tuple(token_reqs), tuple(counts))
