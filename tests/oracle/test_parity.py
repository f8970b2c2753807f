"""Parity: our scheduler mirror schedules exactly what vLLM 0.33's real scheduler schedules.

Each case is a seeded random workload (10-60 requests, all at t=0, list order) run through
`vllm_driver.run_vllm_scheduler` (the oracle) and `simulator.scheduler_trace.run_scheduler_only`
(the mirror); the two traces ``[{request_id: num_scheduled_tokens}, ...]`` must be equal step by
step, in grant order. Steps that schedule nothing are dropped from both sides.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from simulator.request import RequestSpec

BLOCK_SIZE = 16


@dataclass(frozen=True)
class Case:
    """A workload shape plus scheduler knobs. Lengths are inclusive (lo, hi) token ranges."""

    name: str
    seed: int
    num_requests: int
    prompt_len: tuple[int, int]
    output_len: tuple[int, int]
    num_gpu_blocks: int
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    max_model_len: int = 4096
    enable_prefix_caching: bool = False
    long_prefill_token_threshold: int = 0
    policy: str = "fcfs"
    async_scheduling: bool = False
    num_shared_prefixes: int = 0          # > 0: real token ids, each prompt = a shared prefix + own suffix
    priorities: tuple[int, ...] = (0,)
    pipeline_parallel_size: int = 1       # > 1: batch queue of pp + 1 (async) / pp (sync), decode stagger
    watermark: float = 0.0                # --watermark
    max_num_active_seqs: int | None = None  # --max-num-active-seqs
    long_prefill_token_threshold_adaptive: bool = False
    scheduler_reserve_full_isl: bool = True
    prefill_schedule_interval: int = 1


CASES = [
    Case("sync_no_prefix_cache", 1, 40, (16, 600), (1, 80), 3000),
    Case("sync_prefix_cache_unique_prompts", 2, 40, (16, 600), (1, 80), 3000, enable_prefix_caching=True),
    Case("sync_shared_prefixes_cached", 3, 50, (20, 500), (1, 60), 3000, max_num_batched_tokens=1024,
         enable_prefix_caching=True, num_shared_prefixes=4),
    Case("sync_shared_prefixes_uncached", 4, 30, (20, 500), (1, 60), 3000, num_shared_prefixes=3),
    Case("tight_blocks_preemption", 5, 40, (50, 400), (50, 300), 100, max_num_seqs=32),
    Case("tight_blocks_preemption_cached", 6, 40, (50, 400), (50, 300), 100, enable_prefix_caching=True),
    Case("tight_blocks_shared_prefixes", 7, 40, (30, 400), (20, 200), 90, enable_prefix_caching=True,
         num_shared_prefixes=3),
    Case("chunked_long_prompts_budget_64", 8, 12, (200, 1500), (1, 30), 3000, max_num_seqs=8,
         max_num_batched_tokens=64),
    Case("chunked_long_prompts_budget_128", 9, 16, (200, 1500), (1, 30), 3000, max_num_seqs=16,
         max_num_batched_tokens=128, enable_prefix_caching=True),
    Case("long_prefill_threshold", 10, 30, (16, 1200), (1, 50), 3000, long_prefill_token_threshold=96),
    Case("long_prefill_threshold_small_budget", 11, 20, (16, 900), (1, 40), 3000,
         max_num_batched_tokens=128, long_prefill_token_threshold=48),
    Case("max_num_seqs_2", 12, 20, (16, 300), (1, 60), 3000, max_num_seqs=2, max_num_batched_tokens=256),
    Case("max_model_len_cap", 13, 20, (16, 500), (100, 600), 3000, max_model_len=640),
    Case("priority", 14, 40, (16, 500), (1, 80), 3000, policy="priority", priorities=(0, 1, 2, 3)),
    Case("priority_tight_blocks", 15, 40, (50, 400), (50, 250), 100, policy="priority",
         priorities=(0, 1, 2), enable_prefix_caching=True),
    Case("async_default_like", 16, 60, (16, 700), (1, 100), 3000, max_num_batched_tokens=1024,
         enable_prefix_caching=True, async_scheduling=True),
    Case("async_tight_blocks", 17, 40, (50, 400), (50, 300), 100, async_scheduling=True),
    Case("async_shared_prefixes_max_seqs_4", 18, 30, (20, 400), (1, 40), 3000, max_num_seqs=4,
         max_num_batched_tokens=128, enable_prefix_caching=True, num_shared_prefixes=3,
         async_scheduling=True),
    Case("async_priority_threshold", 19, 30, (16, 800), (1, 60), 200, policy="priority",
         priorities=(0, 1, 2), long_prefill_token_threshold=64, async_scheduling=True),
    Case("pp2_async", 20, 40, (16, 600), (1, 80), 3000, max_num_batched_tokens=256,
         async_scheduling=True, pipeline_parallel_size=2),
    Case("pp3_async_tight_blocks", 21, 40, (50, 400), (50, 300), 100, async_scheduling=True,
         pipeline_parallel_size=3),
    Case("pp2_sync", 22, 40, (16, 600), (1, 80), 3000, max_num_batched_tokens=256,
         pipeline_parallel_size=2),
    Case("pp4_async_prefix_threshold", 23, 30, (16, 800), (1, 60), 3000, enable_prefix_caching=True,
         num_shared_prefixes=3, long_prefill_token_threshold=64, async_scheduling=True,
         pipeline_parallel_size=4),
    Case("watermark_tight_blocks", 24, 40, (50, 400), (50, 300), 120, watermark=0.1),
    Case("watermark_async_cached", 25, 40, (30, 400), (20, 200), 150, watermark=0.05, enable_prefix_caching=True,
         num_shared_prefixes=3, async_scheduling=True),
    Case("max_num_active_seqs", 26, 30, (16, 500), (1, 80), 3000, max_num_seqs=16, max_num_active_seqs=5),
    Case("max_num_active_seqs_async", 27, 30, (16, 500), (1, 80), 3000, max_num_seqs=8, max_num_active_seqs=3,
         async_scheduling=True),
    Case("adaptive_threshold", 28, 12, (200, 1500), (1, 40), 3000, max_num_batched_tokens=1024,
         long_prefill_token_threshold=64, long_prefill_token_threshold_adaptive=True),
    Case("adaptive_threshold_async", 29, 30, (16, 900), (1, 50), 3000, max_num_batched_tokens=2048,
         long_prefill_token_threshold=32, long_prefill_token_threshold_adaptive=True, async_scheduling=True),
    Case("first_chunk_admission_tight", 30, 40, (100, 600), (20, 200), 120, max_num_batched_tokens=128,
         scheduler_reserve_full_isl=False),
    Case("first_chunk_admission_async_cached", 31, 40, (50, 500), (20, 200), 110, max_num_batched_tokens=256,
         scheduler_reserve_full_isl=False, enable_prefix_caching=True, num_shared_prefixes=3, async_scheduling=True),
    # the cadence holds prefill only once the waiting queue drains (else the release step is
    # capacity-bound): few requests with long prompts in small chunks
    Case("prefill_interval_4", 32, 4, (1000, 1500), (50, 200), 3000, max_num_batched_tokens=256,
         prefill_schedule_interval=4),
    Case("prefill_interval_3_async_cached", 33, 5, (600, 1500), (50, 200), 3000, max_num_batched_tokens=128,
         prefill_schedule_interval=3, async_scheduling=True, enable_prefix_caching=True, num_shared_prefixes=2),
    Case("prefill_interval_2_threshold", 34, 6, (600, 1200), (30, 150), 3000, max_num_batched_tokens=512,
         long_prefill_token_threshold=96, prefill_schedule_interval=2),
    Case("prefill_interval_5_async_tight", 35, 5, (400, 800), (100, 300), 110, max_num_batched_tokens=128,
         prefill_schedule_interval=5, async_scheduling=True),
]


def make_requests(case: Case) -> list[RequestSpec]:
    """Seeded workload; ids zero-padded so id order == list order (priority ties)."""
    rng = random.Random(case.seed)
    prefixes = [
        tuple(rng.randrange(1, 50_000) for _ in range(rng.randint(case.prompt_len[0], case.prompt_len[1] // 2)))
        for _ in range(case.num_shared_prefixes)
    ]
    requests = []
    for i in range(case.num_requests):
        prompt_len = rng.randint(*case.prompt_len)
        output_len = rng.randint(*case.output_len)
        token_ids = None
        if prefixes:
            prefix = rng.choice(prefixes)[:prompt_len]
            # suffix ids are unique to this request (>= 100_000, disjoint from prefix ids)
            suffix = tuple(100_000 + i * 10_000 + j for j in range(prompt_len - len(prefix)))
            token_ids = prefix + suffix
        requests.append(
            RequestSpec(
                request_id=f"r{i:03d}",
                arrival_s=0.0,
                prompt_len=prompt_len,
                output_len=output_len,
                priority=rng.choice(case.priorities),
                prompt_token_ids=token_ids,
            )
        )
    return requests


def _knobs(case: Case) -> dict:
    return dict(
        max_num_seqs=case.max_num_seqs,
        max_num_batched_tokens=case.max_num_batched_tokens,
        max_model_len=case.max_model_len,
        block_size=getattr(case, "block_size", BLOCK_SIZE),     # a case may name its own
        enable_prefix_caching=case.enable_prefix_caching,
        long_prefill_token_threshold=case.long_prefill_token_threshold,
        policy=case.policy,
        async_scheduling=case.async_scheduling,
        pipeline_parallel_size=case.pipeline_parallel_size,
        watermark=case.watermark,
        max_num_active_seqs=case.max_num_active_seqs,
        long_prefill_token_threshold_adaptive=case.long_prefill_token_threshold_adaptive,
        scheduler_reserve_full_isl=case.scheduler_reserve_full_isl,
        prefill_schedule_interval=case.prefill_schedule_interval,
    )


def first_difference(expected: list[dict[str, int]], actual: list[dict[str, int]]) -> str | None:
    """A readable account of the first step where two traces differ (None when equal)."""
    for step, (want, got) in enumerate(zip(expected, actual)):
        if list(want.items()) == list(got.items()):
            continue
        lines = [f"first difference at step {step} (of vllm {len(expected)}, mirror {len(actual)} steps)"]
        if step > 0:
            lines.append(f"  step {step - 1} (equal): {expected[step - 1]}")
        lines.append(f"  vllm  : {want}")
        lines.append(f"  mirror: {got}")
        only_vllm = [r for r in want if r not in got]
        only_mirror = [r for r in got if r not in want]
        counts = {r: (want[r], got[r]) for r in want if r in got and want[r] != got[r]}
        if only_vllm:
            lines.append(f"  only in vllm: {only_vllm}")
        if only_mirror:
            lines.append(f"  only in mirror: {only_mirror}")
        if counts:
            lines.append(f"  tokens differ (vllm, mirror): {counts}")
        if not (only_vllm or only_mirror or counts):
            lines.append(f"  same grants, order differs: vllm {list(want)} vs mirror {list(got)}")
        return "\n".join(lines)
    if len(expected) != len(actual):
        longer, who = (expected, "vllm") if len(expected) > len(actual) else (actual, "mirror")
        n = min(len(expected), len(actual))
        return f"traces equal for {n} steps, then only {who} goes on: step {n}: {longer[n]}"
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mirror_matches_vllm(vllm_driver, case: Case) -> None:
    from simulator.scheduler_config import SchedulerConfig
    from simulator.scheduler_trace import run_scheduler_only

    requests = make_requests(case)
    knobs = _knobs(case)
    expected = vllm_driver.run_vllm_scheduler(requests, num_gpu_blocks=case.num_gpu_blocks, **knobs)
    actual = run_scheduler_only(requests, SchedulerConfig(**knobs), case.num_gpu_blocks)
    actual = [step for step in actual if step]
    diff = first_difference(expected, actual)
    assert diff is None, f"{case.name}: {diff}"


def _resumed_requests(trace: list[dict[str, int]], requests: list[RequestSpec]) -> set[str]:
    """Requests seen recomputing: more than one token in a step after their whole prompt was
    scheduled. Without preemption every step after the prompt is a 1-token decode."""
    prompt_len = {r.request_id: r.prompt_len for r in requests}
    done = dict.fromkeys(prompt_len, 0)
    resumed = set()
    for step in trace:
        for rid, n in step.items():
            if done[rid] >= prompt_len[rid] and n > 1:
                resumed.add(rid)
            done[rid] += n
    return resumed


@pytest.mark.parametrize(
    "name", [c.name for c in CASES if "tight" in c.name]
)
def test_tight_cases_really_preempt(vllm_driver, name: str) -> None:
    # Guards the parity cases themselves: a "tight" case that never preempts tests nothing.
    case = next(c for c in CASES if c.name == name)
    requests = make_requests(case)
    trace = vllm_driver.run_vllm_scheduler(requests, num_gpu_blocks=case.num_gpu_blocks, **_knobs(case))
    assert _resumed_requests(trace, requests), f"{name}: no request was preempted"
    assert {rid for step in trace for rid in step} == {r.request_id for r in requests}


@pytest.mark.parametrize("name", ["watermark_tight_blocks", "watermark_async_cached", "max_num_active_seqs",
                                  "max_num_active_seqs_async", "adaptive_threshold", "adaptive_threshold_async",
                                  "first_chunk_admission_tight", "first_chunk_admission_async_cached",
                                  "prefill_interval_4", "prefill_interval_3_async_cached",
                                  "prefill_interval_2_threshold", "prefill_interval_5_async_tight"])
def test_knob_cases_change_the_schedule(vllm_driver, name: str) -> None:
    # Guards the knob cases: vLLM schedules them differently than with the knob at its default.
    import dataclasses
    case = next(c for c in CASES if c.name == name)
    plain = dataclasses.replace(case, watermark=0.0, max_num_active_seqs=None, long_prefill_token_threshold_adaptive=False,
                                scheduler_reserve_full_isl=True, prefill_schedule_interval=1)
    requests = make_requests(case)
    with_knob = vllm_driver.run_vllm_scheduler(requests, num_gpu_blocks=case.num_gpu_blocks, **_knobs(case))
    without = vllm_driver.run_vllm_scheduler(requests, num_gpu_blocks=case.num_gpu_blocks, **_knobs(plain))
    assert with_knob != without, f"{name}: the knob changes nothing"


def test_first_difference_reports_the_step() -> None:
    assert first_difference([{"a": 1}], [{"a": 1}]) is None
    msg = first_difference([{"a": 4, "b": 1}], [{"b": 1, "a": 4}])
    assert "step 0" in msg and "order differs" in msg
    msg = first_difference([{"a": 4}, {"a": 1}], [{"a": 4}])
    assert "only vllm goes on" in msg
