"""vLLM 0.33 v1 `Scheduler` / `AsyncScheduler` mirror (vllm/v1/core/sched/{scheduler,async_scheduler}.py).

Scope: generative decoder, one full-attention KV group, no speculative decoding, no KV connector,
no structured output, no LoRA, no EOS (outputs end on max_tokens / max_model_len).

Driving protocol (the caller owns time):

  sync (`async_scheduling=False`, vLLM `EngineCore.step`):
      while s.has_requests(): out = s.schedule(); <run forward of out>; s.update_from_output(out)

  async (default, vLLM `EngineCore.step_with_batch_queue` with a batch queue of depth 2):
      queue = deque()
      loop:
          if s.has_requests():
              out = s.schedule(); launch(out); queue.appendleft(out)
              if len(queue) < 2 and (out.total_num_scheduled_tokens > 0 or s.has_requests()):
                  continue                       # do not wait for the GPU yet
          elif not queue: break
          s.update_from_output(queue.pop())      # blocks until the oldest step finished

      CPU  sched1 sched2 ......... upd1 sched3 ......... upd2 sched4 ...
      GPU         [ step 1       ][ step 2            ][ step 3           ]
                               ^ step 1 ends: its tokens are processed while step 2 runs

  Step N+1 is scheduled before step N's output is processed. A request that was scheduled in
  step N (not a partial prefill) carries one output *placeholder*, so it is scheduled again in
  N+1 with one token without waiting; its finish is seen one step late, but a request sure to
  reach max_tokens is not given the extra step. First tokens still come from the step that
  completes the prompt. `scheduler_trace.run_scheduler_only` implements both loops.
"""

from __future__ import annotations

from collections import deque

from simulator.kv_cache.manager import KVCacheManager
from simulator.request import Request, RequestSpec, RequestStatus
from simulator.request_queue import make_request_queue
from simulator.scheduler_config import SchedulerConfig, SchedulerOutput, UpdateResult


class _StepState:
    """Scratch state of one schedule() call."""

    __slots__ = ("token_budget", "num_sched", "ctx", "new_ids", "resumed_ids", "preempted")

    def __init__(self, token_budget: int) -> None:
        self.token_budget = token_budget
        self.num_sched: dict[str, int] = {}  # request_id -> tokens, in scheduling order
        self.ctx: dict[str, int] = {}  # request_id -> num_computed_tokens before the step
        self.new_ids: list[str] = []
        self.resumed_ids: list[str] = []
        self.preempted: list[Request] = []

    def add(self, r: Request, n: int, context_len: int) -> None:
        self.num_sched[r.request_id] = n
        self.ctx[r.request_id] = context_len
        self.token_budget -= n


class Scheduler:
    """Token-budget scheduler over running (admission order) and waiting requests."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager) -> None:
        if kv.block_size != config.block_size:
            raise ValueError(f"kv block_size={kv.block_size}; must equal config.block_size={config.block_size}")
        if kv.max_model_len != config.max_model_len:
            raise ValueError(f"kv max_model_len={kv.max_model_len}; must equal {config.max_model_len}")
        self.config = config
        self.kv = kv
        self.requests: dict[str, Request] = {}
        self.running: list[Request] = []
        self.waiting = make_request_queue(config.policy)
        self._finished_req_ids: set[str] = set()
        self._step_id = 0
        self._priority = config.policy == "priority"
        self._debug = config.debug_checks

    # ------------------------------------------------------------------ requests
    def add_request(self, request: RequestSpec | Request) -> Request:
        """Queue a request (a `RequestSpec` is turned into a fresh `Request`)."""
        if isinstance(request, RequestSpec):
            request = Request.from_spec(request, self.config.block_size)
        if request.request_id in self.requests:
            raise ValueError(f"request_id={request.request_id!r} is already in the scheduler")
        if request.prompt_len >= self.config.max_model_len:
            raise ValueError(
                f"prompt_len={request.prompt_len} of {request.request_id!r}; must be < "
                f"max_model_len={self.config.max_model_len}"
            )
        self.requests[request.request_id] = request
        self.waiting.add_request(request)
        return request

    def has_unfinished_requests(self) -> bool:
        return bool(self.running) or bool(self.waiting)

    def has_requests(self) -> bool:
        """vLLM `has_requests`: unfinished requests, or finishes not yet reported by a schedule()."""
        return bool(self.running) or bool(self.waiting) or bool(self._finished_req_ids)

    def get_request_counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting)

    # ------------------------------------------------------------------ schedule
    def schedule(self) -> SchedulerOutput:
        """Plan one step: running requests first (list order), then admissions if nobody was preempted."""
        self._step_id += 1
        st = _StepState(self.config.max_num_batched_tokens)
        n_eligible = len(self.running) + len(self.waiting)
        thr = self.config.long_prefill_token_threshold if n_eligible > 1 else 0
        self._schedule_running(st, thr)
        if not st.preempted:
            self._schedule_waiting(st, thr)
        out = self._update_after_schedule(st)
        if self._debug:
            self.check_invariants(out)
        return out

    def _schedule_running(self, st: _StepState, thr: int) -> None:
        kv, max_len, running = self.kv, self.config.max_model_len, self.running
        i = 0
        while i < len(running) and st.token_budget > 0:
            r = running[i]
            if (
                r.num_output_placeholders > 0
                and r.num_computed_tokens + 2 - r.num_output_placeholders >= r.prompt_len + r.max_tokens
            ):
                i += 1  # async: the in-flight step already reaches max_tokens
                continue
            n = r.num_tokens + r.num_output_placeholders - r.num_computed_tokens
            if 0 < thr < n:
                n = thr
            n = min(n, st.token_budget, max_len - r.num_computed_tokens - 1)
            if n == 0:
                i += 1
                continue
            while True:
                blocks = kv.allocate_slots(r, n)
                if blocks is not None:
                    break
                if self._priority:
                    victim = max(running, key=lambda q: (q.priority, q.arrival_s))
                    vi = running.index(victim)
                    del running[vi]
                    if vi < i:
                        i -= 1
                    if victim.request_id in st.num_sched:  # already scheduled this step: undo
                        st.token_budget += st.num_sched.pop(victim.request_id)
                        del st.ctx[victim.request_id]
                else:
                    victim = running.pop()
                self._preempt(victim)
                st.preempted.append(victim)
                if victim is r:
                    break
            if blocks is None:
                if self._priority and r.status == RequestStatus.PREEMPTED:
                    continue  # r preempted itself; later (higher-priority) requests may still fit
                break
            st.add(r, n, r.num_computed_tokens)
            i += 1

    def _schedule_waiting(self, st: _StepState, thr: int) -> None:
        cfg, kv, running, waiting = self.config, self.kv, self.running, self.waiting
        skipped: deque[Request] = deque()
        while st.token_budget > 0 and waiting:
            if len(running) >= cfg.max_num_seqs:
                break
            r = waiting.peek_request()
            if r.num_stale_output_tokens and not r.drop_stale_output:
                skipped.appendleft(waiting.pop_request())  # in-flight output of a preempted step
                continue
            hit_blocks, hit = kv.get_computed_blocks(r)
            n = r.num_tokens - hit
            if 0 < thr < n:
                n = thr
            if not cfg.enable_chunked_prefill and n > st.token_budget:
                break
            n = min(n, st.token_budget)
            blocks = kv.allocate_slots(
                r, n, hit, hit_blocks, full_sequence_must_fit=True, has_scheduled_reqs=bool(running)
            )
            if blocks is None:
                break  # head-of-line blocking
            kv.record_prefix_cache_stats(r, hit)
            waiting.pop_request()
            running.append(r)
            (st.new_ids if r.status == RequestStatus.WAITING else st.resumed_ids).append(r.request_id)
            if r.num_preemptions == 0:
                r.num_cached_tokens = hit
            st.add(r, n, hit)
            r.status = RequestStatus.RUNNING
            r.num_computed_tokens = hit
        if skipped:
            waiting.prepend_requests(skipped)

    def _preempt(self, r: Request) -> None:
        self.kv.free(r)
        r.status = RequestStatus.PREEMPTED
        r.num_computed_tokens = 0
        r.drop_stale_output = r.drop_stale_output and r.num_stale_output_tokens > 0
        r.num_stale_output_tokens = r.num_in_flight_tokens
        r.num_output_placeholders = 0
        r.num_preemptions += 1
        self.waiting.prepend_request(r)

    def _update_after_schedule(self, st: _StepState) -> SchedulerOutput:
        """Advance num_computed_tokens optimistically; async: one placeholder per sampling request."""
        requests = self.requests
        is_async = self.config.async_scheduling
        samples = []
        for rid, n in st.num_sched.items():
            r = requests[rid]
            r.num_computed_tokens += n
            r.num_in_flight_tokens += n
            r.is_prefill_chunk = r.num_computed_tokens < r.num_tokens + r.num_output_placeholders
            samples.append(not r.is_prefill_chunk)
            if is_async and not r.is_prefill_chunk:
                r.num_output_placeholders += 1
        self._finished_req_ids = set()
        return SchedulerOutput(
            step_id=self._step_id,
            request_ids=tuple(st.num_sched),
            num_scheduled_tokens=tuple(st.num_sched.values()),
            context_lens=tuple(st.ctx.values()),
            samples=tuple(samples),
            new_request_ids=tuple(st.new_ids),
            resumed_request_ids=tuple(st.resumed_ids),
            preempted_request_ids=tuple(r.request_id for r in st.preempted),
            total_num_scheduled_tokens=sum(st.num_sched.values()),
        )

    # ------------------------------------------------------------------ update
    def update_from_output(self, output: SchedulerOutput) -> UpdateResult:
        """Process a finished step: one sampled token per request whose step sampled.

        Stops on max_tokens or max_model_len (FINISHED_LENGTH_CAPPED); finished requests are freed.
        """
        tokens: list[str] = []
        firsts: list[str] = []
        finished: list[str] = []
        stopped_running: set[Request] = set()
        stopped_waiting: set[Request] = set()
        kv, max_len = self.kv, self.config.max_model_len
        for rid, n, samples in zip(output.request_ids, output.num_scheduled_tokens, output.samples):
            r = self.requests.get(rid)
            stale = False
            if r is not None:
                r.num_in_flight_tokens -= n
                if r.num_stale_output_tokens > 0:
                    stale = True
                    r.num_stale_output_tokens -= n
            if r is None or r.is_finished or (stale and r.drop_stale_output) or not samples:
                continue
            had_placeholders = r.num_output_placeholders > 0
            status_before = r.status
            r.append_output_token()
            stopped = r.num_tokens >= max_len or r.num_output_tokens >= r.max_tokens
            if stopped:
                r.status = RequestStatus.FINISHED_LENGTH_CAPPED
            if not stale and r.num_output_placeholders > 0:
                r.num_output_placeholders -= 1
            if not stale and status_before == RequestStatus.RUNNING and had_placeholders:
                kv.cache_blocks(r, r.num_computed_tokens - r.num_in_flight_tokens)
            tokens.append(rid)
            if r.num_output_tokens == 1:
                firsts.append(rid)
            if stopped:
                self._finished_req_ids.add(rid)
                kv.free(r)
                del self.requests[rid]
                finished.append(rid)
                (stopped_running if status_before == RequestStatus.RUNNING else stopped_waiting).add(r)
        if stopped_running:
            self.running = [r for r in self.running if r not in stopped_running]
        if stopped_waiting:
            self.waiting.remove_requests(stopped_waiting)
        if self._debug:
            self.kv.check_invariants()
        return UpdateResult(tuple(tokens), tuple(firsts), tuple(finished))

    # ------------------------------------------------------------------ debug
    def check_invariants(self, out: SchedulerOutput | None = None) -> None:
        """Raise AssertionError if blocks or tokens are not conserved."""
        self.kv.check_invariants()
        cfg = self.config
        if out is not None and out.total_num_scheduled_tokens > cfg.max_num_batched_tokens:
            raise AssertionError(f"step {out.step_id} scheduled {out.total_num_scheduled_tokens} tokens")
        if len(self.running) > cfg.max_num_seqs:
            raise AssertionError(f"{len(self.running)} running > max_num_seqs={cfg.max_num_seqs}")
        for r in self.running:
            if r.num_computed_tokens > r.num_tokens + r.num_output_placeholders:
                raise AssertionError(f"{r}: computed beyond known tokens")
            if r.num_computed_tokens > cfg.max_model_len:
                raise AssertionError(f"{r}: computed beyond max_model_len")
            if r.status != RequestStatus.RUNNING:
                raise AssertionError(f"{r} in running list")
        for r in self.waiting:
            if r.request_id in self.kv.req_to_blocks and self.kv.req_to_blocks[r.request_id]:
                raise AssertionError(f"waiting {r} holds blocks")
