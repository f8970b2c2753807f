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
ends. New requests go to the rank with the fewest unfinished requests
(waiting + running), ties rotating, as vLLM's DP load balancer scores them.
Dense models do not use this: their DP ranks are independent engines.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.request import Request, RequestSpec
from simulator.router import LeastLoadedRouter
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerOutput, UpdateResult


@dataclass(frozen=True, slots=True)
class LockstepOutput:
    """One group step: each rank's plan, ``None`` for a rank that runs a dummy batch."""

    outputs: tuple[SchedulerOutput | None, ...]
    total_num_scheduled_tokens: int


class _Rank:
    __slots__ = ("scheduler",)

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def num_unfinished(self) -> int:
        running, waiting = self.scheduler.get_request_counts()
        return running + waiting


class LockstepRanks:
    """N DP ranks (each a ``Scheduler`` with its own KV cache) that step together."""

    def __init__(self, schedulers: list[Scheduler]) -> None:
        if len(schedulers) < 2:
            raise ValueError(f"a lockstep DP group needs at least 2 ranks, got {len(schedulers)}")
        self.ranks = schedulers
        self._balance = [_Rank(s) for s in schedulers]
        self._router = LeastLoadedRouter(len(schedulers))

    def add_request(self, spec: RequestSpec) -> Request:
        return self.ranks[self._router.pick(self._balance)].add_request(spec)

    def has_requests(self) -> bool:
        return any(s.has_requests() for s in self.ranks)

    def has_unfinished_requests(self) -> bool:
        return any(s.has_unfinished_requests() for s in self.ranks)

    def get_request_counts(self) -> tuple[int, int]:
        running = waiting = 0
        for s in self.ranks:
            r, w = s.get_request_counts()
            running += r
            waiting += w
        return running, waiting

    def schedule(self) -> LockstepOutput:
        outs = tuple(s.schedule() if s.has_requests() else None for s in self.ranks)
        return LockstepOutput(outs, sum(o.total_num_scheduled_tokens for o in outs if o is not None))

    def update_from_output(self, out: LockstepOutput) -> UpdateResult:
        tokens: list[str] = []
        first: list[str] = []
        finished: list[str] = []
        for sched, o in zip(self.ranks, out.outputs):
            if o is None:
                continue
            r = sched.update_from_output(o)
            tokens += r.token_request_ids
            first += r.first_token_request_ids
            finished += r.finished_request_ids
        return UpdateResult(tuple(tokens), tuple(first), tuple(finished))
