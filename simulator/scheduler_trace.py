"""Scheduler-only runs with a fake model runner: the trace the vLLM oracle test compares.

Fake model runner: one sampled token (id `OUTPUT_TOKEN_ID`) for each request whose step reached
the end of its known tokens, decided right after `schedule()` (`SchedulerOutput.samples`, i.e.
vLLM's `not request.is_prefill_chunk`); none for a partial prefill chunk. A request preempted
while its step is in flight still receives that step's (stale) token, as in vLLM.

Driving loops (same as vLLM 0.33 `EngineCore`):
  sync  — `step()`: while has_requests(): schedule(); update_from_output().
  async — `step_with_batch_queue()` with a queue of depth 2: schedule and launch; if the queue is
          not full and (the step ran tokens or more requests remain), schedule again; otherwise
          process the oldest in-flight step. See `simulator.scheduler` for the timeline.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from simulator.kv_cache.hybrid import HybridKVCacheManager
from simulator.kv_cache.manager import KVCacheManager
from simulator.kv_cache.state import StateKVCacheManager
from simulator.kv_cache.state_align import AlignStateKVCacheManager
from simulator.memory import max_in_flight_tokens
from simulator.pipeline import max_concurrent_batches
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig, SchedulerOutput, UpdateResult

BATCH_QUEUE_DEPTH = 2
STATE = "state"     # a kv_groups entry for a Gated DeltaNet state group (the oracle driver's too)
STATE_ALIGN = "state_align"     # the same in vLLM's "align" mamba cache mode (prefix caching on)
MAX_IDLE_STEPS = 10_000


def make_scheduler(config: SchedulerConfig, num_gpu_blocks: int, kv_groups: tuple[int | str, ...] = (),
                   kv_role: str | None = None) -> Scheduler:
    """A scheduler over ``num_gpu_blocks`` blocks; ``kv_groups`` (vLLM's KV cache groups in order,
    0 = full attention, W > 0 = a sliding window of W tokens, -C < 0 = chunked local attention of
    C-token chunks, ``STATE`` = a Gated DeltaNet group's states, as the oracle driver takes them)
    with a local group gives the hybrid manager, with state groups (and one full-attention group)
    ``StateKVCacheManager``, with ``STATE_ALIGN`` groups (prefix caching on) ``AlignStateKVCacheManager``,
    otherwise one full-attention group. ``kv_role``: the scheduler's (P/D: "producer" or "consumer")."""
    if STATE_ALIGN in kv_groups:
        if sorted(map(str, kv_groups)) != ["0"] + [STATE_ALIGN] * (len(kv_groups) - 1):
            raise ValueError(f"kv_groups={kv_groups}: state groups go with one full-attention group (0)")
        if not config.enable_prefix_caching:
            raise ValueError("kv_groups with STATE_ALIGN: the \"align\" mamba cache mode needs prefix caching")
        return Scheduler(config, AlignStateKVCacheManager(num_gpu_blocks, config.block_size, config.max_model_len,
                                                          len(kv_groups) - 1, watermark=config.watermark,
                                                          num_speculative_blocks=config.num_speculative_tokens),
                         kv_role=kv_role)
    if STATE in kv_groups:
        if sorted(map(str, kv_groups)) != ["0"] + [STATE] * (len(kv_groups) - 1):
            raise ValueError(f"kv_groups={kv_groups}: state groups go with one full-attention group (0)")
        return Scheduler(config, StateKVCacheManager(num_gpu_blocks, config.block_size, config.max_model_len,
                                                     len(kv_groups) - 1, watermark=config.watermark,
                                                     num_speculative_blocks=config.num_speculative_tokens),
                         kv_role=kv_role)
    if any(kv_groups):
        chunked = any(w < 0 for w in kv_groups)
        kv = HybridKVCacheManager(
            num_gpu_blocks, config.block_size, config.max_model_len, tuple(abs(w) for w in kv_groups),
            max_in_flight_tokens(config.max_num_batched_tokens, config.pipeline_parallel_size,
                                 config.async_scheduling),
            enable_prefix_caching=config.enable_prefix_caching, watermark=config.watermark, chunked=chunked)
        return Scheduler(config, kv, kv_role=kv_role)
    kv = KVCacheManager(
        num_gpu_blocks,
        config.block_size,
        config.max_model_len,
        enable_prefix_caching=config.enable_prefix_caching,
        watermark=config.watermark,
    )
    return Scheduler(config, kv, kv_role=kv_role)


def drive(
    sched: Scheduler,
    on_schedule: Callable[[SchedulerOutput], None] | None = None,
    on_update: Callable[[SchedulerOutput, UpdateResult], None] | None = None,
) -> int:
    """Run the vLLM engine loop (sync, or a batch queue: depth 2, pp + 1 / pp with PP) until drained.

    on_schedule(out) is called after every schedule(), on_update(out, result) after every
    update_from_output(). Returns the number of schedule() calls. Raises RuntimeError after
    MAX_IDLE_STEPS consecutive empty steps (a request that can never fit the KV cache).
    """
    idle = 0
    calls = 0

    def scheduled() -> SchedulerOutput:
        nonlocal idle, calls
        out = sched.schedule()
        calls += 1
        idle = 0 if out.total_num_scheduled_tokens > 0 else idle + 1
        if idle > MAX_IDLE_STEPS:
            raise RuntimeError(f"no progress for {MAX_IDLE_STEPS} steps; a request cannot fit the KV cache")
        if on_schedule is not None:
            on_schedule(out)
        return out

    def update(out: SchedulerOutput) -> None:
        result = sched.update_from_output(out)
        if on_update is not None:
            on_update(out, result)

    pp = sched.config.pipeline_parallel_size
    if not sched.config.async_scheduling and pp == 1:
        while sched.has_requests():
            update(scheduled())
        return calls
    depth = max_concurrent_batches(pp, sched.config.async_scheduling) if pp > 1 else BATCH_QUEUE_DEPTH

    queue: deque[SchedulerOutput] = deque()
    while True:
        if sched.has_requests():
            out = scheduled()
            queue.appendleft(out)
            if len(queue) < depth and (out.total_num_scheduled_tokens > 0 or sched.has_requests()):
                continue
        elif not queue:
            break
        update(queue.pop())
    return calls


def run_scheduler_only(
    requests: list[RequestSpec],
    config: SchedulerConfig,
    num_gpu_blocks: int,
    *,
    include_empty_steps: bool = False,
    kv_groups: tuple[int, ...] = (),
    record_free_blocks: bool = False,
) -> list[dict[str, int]] | tuple[list[dict[str, int]], list[int]]:
    """Add all requests at t=0 in list order and drive the scheduler until all finish.

    Returns one dict per schedule() call that scheduled tokens: {request_id: num_scheduled_tokens}
    in scheduling order (dict order). Steps scheduling nothing (e.g. async steps where every running
    request already reached max_tokens) are omitted unless include_empty_steps. ``kv_groups``:
    `make_scheduler`'s. With ``record_free_blocks``: (those steps, the free KV blocks right after
    each step's schedule()).
    """
    sched = make_scheduler(config, num_gpu_blocks, kv_groups)
    for spec in requests:
        sched.add_request(spec)
    steps: list[dict[str, int]] = []
    free: list[int] = []

    def record(out: SchedulerOutput) -> None:
        if out.total_num_scheduled_tokens > 0 or include_empty_steps:
            steps.append(out.as_dict())
            free.append(sched.kv.num_free_blocks)

    drive(sched, on_schedule=record)
    return (steps, free) if record_free_blocks else steps


def run_spec_scheduler_only(
    requests: list[RequestSpec],
    config: SchedulerConfig,
    num_gpu_blocks: int,
    accept_drafts: Callable[[str, int, int], int],
    *,
    kv_groups: tuple[int, ...] = (),
    record_free_blocks: bool = False,
) -> list[dict[str, tuple[int, int]]] | tuple[list[dict[str, tuple[int, int]]], list[int]]:
    """``run_scheduler_only`` with speculative decoding (``config.num_speculative_tokens`` > 0):
    ``accept_drafts(request_id, context_len, drafts)`` says how many of the drafts a request
    verified in a step are accepted (``context_len``: its num_computed_tokens before that step).
    Returns one dict per step that scheduled tokens: {request_id: (num_scheduled_tokens, drafts)};
    ``kv_groups`` and ``record_free_blocks`` as ``run_scheduler_only``'s."""
    if config.num_speculative_tokens < 1:
        raise ValueError(f"num_speculative_tokens={config.num_speculative_tokens}; must be >= 1 here")
    sched = make_scheduler(config, num_gpu_blocks, kv_groups)
    sched.accept_drafts = lambda r, ctx, drafts: accept_drafts(r.request_id, ctx, drafts)
    for spec in requests:
        sched.add_request(spec)
    steps: list[dict[str, tuple[int, int]]] = []

    free: list[int] = []

    def record(out: SchedulerOutput) -> None:
        if out.total_num_scheduled_tokens > 0:
            steps.append(dict(zip(out.request_ids, zip(out.num_scheduled_tokens, out.spec_tokens))))
            free.append(sched.kv.num_free_blocks)

    drive(sched, on_schedule=record)
    return (steps, free) if record_free_blocks else steps
