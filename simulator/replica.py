"""One engine replica: vLLM's ``EngineCore`` busy loop with simulated time.

A replica owns a scheduler (with its KV cache) — or a lockstep group of DP
ranks' schedulers (``simulator.dp_group``) — and a batch engine that prices
steps. It drives the scheduler with exactly the protocol of vLLM 0.33's
``EngineCore`` (see ``simulator.scheduler``), and adds time:

* the GPU runs one step at a time; a step launched while another runs starts
  when that one ends;
* a step's output is processed (tokens appended, requests finished, blocks
  freed) at the instant the step ends; its tokens reach the client then;
* sync: schedule -> run -> process, one step at a time;
* async (default): a batch queue of depth 2, so step N+1 is scheduled while
  step N runs and there is no gap between steps::

      engine  sched1 sched2 (wait) upd1 sched3 (wait) upd2 sched4 ...
      GPU     [ step 1          ][ step 2          ][ step 3 ...

* with an ``engine_cpu`` model (``simulator.engine_cpu``), a step starts no earlier than
  its CPU time (schedule, input preparation, output processing) after it was scheduled:
  sync, every step cycle is CPU + GPU; async, step N+1's CPU overlaps step N's forward and
  only its excess over the GPU time shows;
* pipeline parallel (pp > 1): the batch queue holds ``pp + 1`` steps (async) or ``pp``
  (sync) and each step's stages chain through ``simulator.pipeline.stage_ends``; a step's
  output is processed when its last stage ends. pp = 1 keeps the single-GPU-timeline path.

When a schedule() grants no tokens and no step is in flight, nothing can
change until a request arrives: the replica goes idle and the next
``add_request`` wakes it. That is where the real engine would spin.
Requests arriving while the loop runs or waits only join the scheduler's
queues, as they join vLLM's input queue, and the next schedule() sees them.
"""

from __future__ import annotations

from collections import deque
from functools import partial
from typing import Callable

import numpy as np

from simulator.batch_engine import BatchEngine, BatchShape, StepCost
from simulator.dp_group import LockstepOutput, LockstepRanks
from simulator.engine_cpu import EngineCpu
from simulator.events import PRIO_KICK, PRIO_STEP_DONE, EventLoop
from simulator.lora import AdapterCache
from simulator.pipeline import max_concurrent_batches, stage_ends
from simulator.request import Request, RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerOutput, UpdateResult
from simulator.trace import BatchTrace

BATCH_QUEUE_DEPTH = 2

OnUpdate = Callable[["Replica", UpdateResult, float], None]
OnRemoteKv = Callable[["Replica", tuple[str, ...]], None]


class Replica:
    """An engine core: scheduler + batch engine, stepping on an event loop."""

    def __init__(self, replica_id: int, loop: EventLoop, scheduler: Scheduler | LockstepRanks,
                 engine: BatchEngine,
                 trace: BatchTrace, on_update: OnUpdate, *, async_scheduling: bool,
                 step_jitter: float = 0.0, jitter_seed: int = 0, role: str = "C",
                 engine_cpu: EngineCpu | None = None, adapters: AdapterCache | None = None,
                 adapter_copy_s: float = 0.0) -> None:
        self.replica_id = replica_id
        self.role = role                # cluster role (C, P, D...), written into the trace
        # P/D decode side: told which requests a schedule() admitted for a KV pull (the
        # worker starts reading then); None when this replica pulls no remote KV.
        self.on_remote_kv: OnRemoteKv | None = None
        self.loop = loop
        self.scheduler = scheduler
        self.engine = engine
        self.trace = trace
        self.on_update = on_update
        self.async_scheduling = async_scheduling
        self.engine_cpu = engine_cpu    # the step's CPU time before its forward can start (None: 0)
        # LoRA: the adapters resident on this engine (simulator.lora.AdapterCache), and the seconds a
        # copy of one into a GPU slot takes before the step's forward
        self.adapters, self._adapter_copy_s = adapters, adapter_copy_s
        self._cpu_free_s = 0.0          # when the engine core's thread finishes its last step's CPU work
        self._pp = getattr(engine, "num_stages", 1)   # pipeline stages (engines without PP: 1)
        self._queue_depth = max_concurrent_batches(self._pp, async_scheduling) if self._pp > 1 \
            else BATCH_QUEUE_DEPTH
        self._stage_free_s = [0.0] * self._pp   # pp > 1: when each stage finishes its last step
        self.gpu_free_s = 0.0           # when the GPU finishes the last launched step
        self.busy_s = 0.0               # total GPU time of executed steps
        self._queue: deque[tuple[SchedulerOutput, float]] = deque()   # (step, end_s), newest left
        self._active = False            # the loop is running or an event will resume it
        self._num_steps = 0
        # Real engines carry per-step noise; identical requests in a noiseless simulation can
        # lock batches in phase. ``step_jitter`` scales each step by max(0, 1 + sigma * N(0, 1)),
        # drawn from a generator seeded per replica, so runs stay reproducible.
        self._resume_async = partial(self._run_async, True)     # the oldest step just ended
        self._jitter = step_jitter
        self._rng = np.random.default_rng([jitter_seed, replica_id]) if step_jitter > 0 else None
        # The loop processes every step's output in order with its time, so the scheduler may
        # keep plain decodes lazy (Scheduler.enable_lazy_decode): same steps, same token times.
        for s in scheduler.ranks if isinstance(scheduler, LockstepRanks) else (scheduler,):
            s.enable_lazy_decode()
        # The routers poll every replica per routed request: num_unfinished() (the scheduler's
        # unfinished requests) and num_free_kv_blocks() (free KV blocks, summed over lockstep DP
        # ranks) are bound here, with no forwarding call in between.
        self.num_unfinished = scheduler.num_unfinished
        if isinstance(scheduler, LockstepRanks):
            self.num_free_kv_blocks = scheduler.num_free_kv_blocks
        else:
            free_queue = scheduler.kv.pool.free_queue
            self.num_free_kv_blocks = lambda: free_queue.num_free_blocks

    # ------------------------------------------------------------------ client side
    def add_request(self, spec: RequestSpec, **kv_params: bool) -> Request:
        """Hand a request to the scheduler and wake the loop if it is idle.

        The wake-up runs after every other arrival of the same instant (``PRIO_KICK``),
        as vLLM's engine drains its whole input queue before it schedules.
        ``kv_params``: P/D flags passed to ``Scheduler.add_request`` (remote_prefill/remote_decode).
        """
        request = self.scheduler.add_request(spec, **kv_params)
        self.wake()
        return request

    def wake(self) -> None:
        """Make an idle loop schedule again (new request, KV pull done, blocks freed)."""
        if not self._active:
            self._active = True
            self.loop.at(self.loop.now_s, self._run, PRIO_KICK)

    # ------------------------------------------------------------------ engine loop
    def _launch(self, out: SchedulerOutput | LockstepOutput) -> float:
        """Price and place one step on the GPU timeline; return its end time.

        A lockstep DP group's step lasts as long as its slowest rank (idle ranks run a
        dummy batch that is never the slowest; ``BatchEngine.lockstep_costs`` prices the
        ranks padded to the busiest or each on its own tokens, as vLLM pads); each rank gets
        its own trace row.
        """
        now = self.loop.now_s
        if self.on_remote_kv is not None and out.remote_kv_request_ids:
            self.on_remote_kv(self, out.remote_kv_request_ids)
        if out.total_num_scheduled_tokens == 0:
            return now
        if not isinstance(out, LockstepOutput) and self._pp == 1 and self._rng is None:
            return self._launch_one(out, now)
        if isinstance(out, LockstepOutput):
            ranks = [(i, o, s) for i, (o, s) in enumerate(zip(out.outputs, self.scheduler.ranks))
                     if o is not None and o.total_num_scheduled_tokens > 0]
        else:
            ranks = [(0, out, self.scheduler)]
        if self.engine_cpu is not None:     # each DP rank's engine core prepares its own batch
            now = self._cpu_done(max(len(o.num_scheduled_tokens) for _, o, _ in ranks))
        lockstep = isinstance(out, LockstepOutput)
        # speculative decoding: the DP ranks draft together unless none of them can use drafts
        group_skip = all(o.skip_drafts for _, o, _ in ranks) if lockstep else None
        shapes = [self._shape(o, group_skip) for _, o, _ in ranks]
        if lockstep:
            costs = self.engine.lockstep_costs(shapes, len(out.outputs) - len(ranks))
        else:
            costs = [self.engine.step_cost(b) for b in shapes]
        if self._pp > 1:
            start, end = self._launch_stages(shapes, costs if lockstep else None, now)
        else:
            duration = costs[0].duration_s if len(costs) == 1 else max(c.duration_s for c in costs)
            if not lockstep and out.lora_ids:
                duration += self._adapter_load_s(out)
            if self._rng is not None:
                duration *= max(0.0, 1.0 + self._jitter * float(self._rng.standard_normal()))
            start = max(now, self.gpu_free_s)
            end = start + duration
            self.gpu_free_s = end
            self.busy_s += duration
        for (rank, o, sched), cost in zip(ranks, costs):
            self._trace_step(rank, sched, o, cost, start, end)
        self._num_steps += 1
        return end

    def _trace_step(self, rank: int, sched: Scheduler, out: SchedulerOutput, cost: StepCost,
                    start: float, end: float) -> None:
        """One trace row: ``sched``'s step ``out`` (DP rank ``rank``) on [start, end]."""
        pool = sched.kv.pool
        usable = pool.num_gpu_blocks - 1
        self.trace.add_step(
            self.replica_id, rank, self._num_steps, start, end, out.request_ids,
            out.num_scheduled_tokens, out.context_lens, cost.padded_tokens, cost.cudagraph_mode,
            usable - pool.free_queue.num_free_blocks, usable,
            len(sched.waiting) + len(sched.kv_holding_waiting),    # get_request_counts()[1]
            len(out.preempted_request_ids), self.role, out.spec_tokens)

    def _launch_one(self, out: SchedulerOutput, now: float) -> float:
        """`_launch` of one scheduler, one stage, no jitter (the same steps, written out)."""
        cost = self.engine.step_cost(self._shape(out) if out.spec_tokens or out.lora_ids or out.encoder_patches else
                                     BatchShape.of_step(out.num_scheduled_tokens, out.context_lens))
        duration = cost.duration_s
        if out.lora_ids:
            duration += self._adapter_load_s(out)
        if self.engine_cpu is not None:
            now = self._cpu_done(len(out.num_scheduled_tokens))
        start = now if now > self.gpu_free_s else self.gpu_free_s
        end = start + duration
        self.gpu_free_s = end
        self.busy_s += duration
        self._trace_step(0, self.scheduler, out, cost, start, end)
        self._num_steps += 1
        return end

    def _shape(self, out: SchedulerOutput, group_skips_drafts: bool | None = None) -> BatchShape:
        """The step's batch for the engine; with speculative decoding, the drafts it verifies and
        the drafter's passes after it: none when vLLM skips drafting, which a lockstep DP group
        does only when every rank can (``group_skips_drafts``; None: this output's own flag). With
        LoRA, the step's adapters; with images, the patches of those the tower encodes."""
        if not out.spec_tokens:
            return BatchShape.of_step(out.num_scheduled_tokens, out.context_lens, num_loras=out.num_loras,
                                      encoder_patches=out.encoder_patches)
        skip = out.skip_drafts if group_skips_drafts is None else group_skips_drafts
        passes = 0 if skip else self.engine.spec.num_speculative_tokens
        return BatchShape.of_step(out.num_scheduled_tokens, out.context_lens, sum(out.spec_tokens), passes,
                                  encoder_patches=out.encoder_patches)

    def _adapter_load_s(self, out: SchedulerOutput) -> float:
        """LoRA: the copies into GPU slots that make the step's adapters resident (seconds, before
        its forward; ``AdapterCache.apply``)."""
        if self.adapters is None:
            return 0.0
        copies, _ = self.adapters.apply(out.lora_ids)
        return copies * self._adapter_copy_s

    def _cpu_done(self, num_reqs: int) -> float:
        """When the CPU work of a step of ``num_reqs`` requests scheduled now is done: the engine
        core's one thread runs it after the previous step's."""
        now = self.loop.now_s
        done = (now if now > self._cpu_free_s else self._cpu_free_s) + self.engine_cpu.step_s(num_reqs)
        self._cpu_free_s = done
        return done

    def _launch_stages(self, shapes: list[BatchShape], costs: list[StepCost] | None,
                       ready_s: float) -> tuple[float, float]:
        """pp > 1: chain the step's stages after the previous step's (``simulator.pipeline``).

        Each stage lasts as long as the slowest DP rank's (``costs``: a lockstep group's
        ``lockstep_costs``, split into stages); jitter scales the whole step; ``ready_s``: when its
        CPU work is done. Returns (start of stage 0, end of the last stage).
        """
        if costs is None:
            per_rank = [self.engine.stage_times_s(b) for b in shapes]
        else:
            per_rank = [self.engine.stage_times_s(b, c) for b, c in zip(shapes, costs)]
        stages = [max(col) for col in zip(*per_rank)]
        if self._rng is not None:
            f = max(0.0, 1.0 + self._jitter * float(self._rng.standard_normal()))
            stages = [d * f for d in stages]
        start = max(ready_s, self._stage_free_s[0])
        ends = stage_ends(ready_s, stages, self._stage_free_s)
        self._stage_free_s = ends
        self.gpu_free_s = ends[-1]
        self.busy_s += sum(stages) / self._pp      # mean busy time of one stage's GPUs
        return start, ends[-1]

    def _run(self) -> None:
        """Advance the engine loop until it must wait for the GPU or has nothing to do.

        Requests added while the loop runs (a client sending its next request when
        one finishes) only join the scheduler's queue; the loop picks them up.
        """
        self._active = True
        if self.async_scheduling or self._pp > 1:    # vLLM's step_with_batch_queue
            self._run_async()
        else:
            self._run_sync()

    def _run_sync(self) -> None:
        sched = self.scheduler
        while sched.has_requests():
            out = sched.schedule()
            end = self._launch(out)
            if out.total_num_scheduled_tokens == 0:
                sched.update_from_output(out, self.loop.now_s)
                if not sched.has_unfinished_requests() and sched.has_requests():
                    continue        # only finishes left to report: one more (empty) schedule
                break               # nothing can run until a request arrives
            self._wait_until(end, out)
            return
        self._active = False

    def _run_async(self, resumed: bool = False) -> None:
        """vLLM's ``step_with_batch_queue`` loop; ``resumed``: the oldest step just ended."""
        sched, queue = self.scheduler, self._queue
        while True:
            if not resumed:
                if sched.has_requests():
                    out = sched.schedule()
                    end = self._launch(out)
                    queue.appendleft((out, end))
                    executed = out.total_num_scheduled_tokens > 0
                    if len(queue) < self._queue_depth and (executed or sched.has_requests()):
                        continue
                elif not queue:
                    self._active = False
                    return
                out, end = queue[-1]
                if end > self.loop.now_s:
                    self._wait_until(end, None)      # block on the oldest step's result
                    return
            resumed = False
            out, _ = queue.pop()
            self._process(out)
            if out.total_num_scheduled_tokens == 0 and not self._in_flight():
                if not sched.has_unfinished_requests() and sched.has_requests():
                    continue    # only finishes left to report
                self._active = False
                return          # idle: nothing changes until a request arrives

    def _in_flight(self) -> bool:
        """Whether a step that runs tokens is still in the batch queue."""
        return any(o.total_num_scheduled_tokens > 0 for o, _ in self._queue)

    def _wait_until(self, end_s: float, sync_out: SchedulerOutput | None) -> None:
        if sync_out is None:
            self.loop.at(end_s, self._resume_async, PRIO_STEP_DONE)     # once per step: no closure
            return

        def resume() -> None:
            self._process(sync_out)
            self._run_sync()

        self.loop.at(end_s, resume, PRIO_STEP_DONE)

    def _process(self, out: SchedulerOutput) -> None:
        result = self.scheduler.update_from_output(out, self.loop.now_s)
        if result.token_request_ids or result.finished_request_ids or result.aborted_request_ids:
            self.on_update(self, result, self.loop.now_s)
