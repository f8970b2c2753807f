"""P/D parity with a hybrid KV cache: test_pd_parity's decode ("consumer") and prefill ("producer")
runs, with full-attention and sliding-window KV cache groups sharing one block pool (what gpt-oss or
Gemma-3 get in vLLM).

``kv_groups``: one entry per vLLM KV cache group, in group order, 0 = full attention, W > 0 = a
sliding window of W tokens, -C = chunked local attention of C-token chunks. vLLM's side is ``vllm_pd_driver.run_vllm_pd(..., kv_groups=...)``: its
real scheduler with the HybridKVCacheCoordinator (KVCacheCoordinatorNoPrefixCache without prefix
caching) and ``HMAPullConnector`` (the pull connector with ``SupportsHMA``: NixlConnector's delay rule
over every group's blocks). The mirror's is ``test_pd_parity.run_mirror(..., kv_groups=...)``: the
simulator's ``HybridKVCacheManager``. Schedules and free blocks after every update_from_output must
be equal step by step (``test_pd_parity.assert_pd_parity``). Prompts are 50-900 tokens, so the
windows (64, 128) drop blocks; prompts are unique to each request (``make_requests``), so prefix
caching matters through recomputation after a preemption and through cached blocks counted free.
"""

from __future__ import annotations

import pytest
from test_pd_parity import assert_pd_parity, make_requests, pd_knobs, recomputed_locally

GPT_OSS = (128, 0)
FULL_FIRST = (0, 128)
GEMMA = (64, 64, 64, 0)
LLAMA4 = (-128, -128, -128, 0)      # chunked local attention (chunks of 128), then the NoPE layers' group

CASES = [
    # (name, side, seed, n, prompt range, output range, num_gpu_blocks, kv_groups, extra knobs)
    ("decode_gptoss_budget_256", "decode", 201, 30, (50, 900), (1, 60), 3000, GPT_OSS,
     {"max_num_batched_tokens": 256}),
    ("decode_full_first_cached_budget_2048", "decode", 202, 30, (50, 900), (1, 60), 3000, FULL_FIRST,
     {"max_num_batched_tokens": 2048, "enable_prefix_caching": True}),
    ("decode_gemma_cached_budget_256", "decode", 203, 30, (50, 900), (1, 60), 6000, GEMMA,
     {"max_num_batched_tokens": 256, "enable_prefix_caching": True}),
    ("decode_gemma_budget_2048", "decode", 204, 30, (50, 900), (1, 60), 6000, GEMMA,
     {"max_num_batched_tokens": 2048}),
    # tight: decode requests are preempted and recomputed locally (test_tight_hybrid_decode_cases_preempt)
    ("decode_tight_gptoss_budget_256", "decode", 205, 30, (50, 900), (20, 200), 200, GPT_OSS,
     {"max_num_batched_tokens": 256}),
    ("decode_tight_gemma_cached_budget_2048", "decode", 206, 30, (50, 900), (20, 200), 400, GEMMA,
     {"max_num_batched_tokens": 2048, "enable_prefix_caching": True}),
    # a preempted request's 64-token recompute chunks leave budget to admit pulls while it holds
    # fewer blocks than its sequence: the in-flight reservation (sliding groups capped) refuses some
    ("decode_reservation_gptoss_threshold_64", "decode", 401, 30, (200, 1500), (50, 300), 200, GPT_OSS,
     {"max_num_batched_tokens": 1024, "long_prefill_token_threshold": 64}),
    ("decode_reservation_gptoss_threshold_64_b", "decode", 402, 30, (200, 1500), (50, 300), 300, GPT_OSS,
     {"max_num_batched_tokens": 1024, "long_prefill_token_threshold": 64}),
    ("prefill_gptoss_cached_budget_2048", "prefill", 207, 30, (50, 900), (1, 1), 3000, GPT_OSS,
     {"max_num_batched_tokens": 2048, "enable_prefix_caching": True}),
    # tight: admission waits for blocks held until finished_sending
    ("prefill_full_first_tight_budget_256", "prefill", 208, 30, (50, 900), (1, 1), 200, FULL_FIRST,
     {"max_num_batched_tokens": 256}),
    ("prefill_gptoss_tight_cached_budget_2048", "prefill", 211, 30, (50, 900), (1, 1), 250, GPT_OSS,
     {"max_num_batched_tokens": 2048, "enable_prefix_caching": True}),
    ("prefill_gemma_budget_256", "prefill", 209, 30, (50, 900), (1, 1), 6000, GEMMA,
     {"max_num_batched_tokens": 256}),
    ("prefill_gemma_cached_budget_2048", "prefill", 210, 30, (50, 900), (1, 1), 6000, GEMMA,
     {"max_num_batched_tokens": 2048, "enable_prefix_caching": True}),
    ("decode_llama4_cached_budget_256", "decode", 212, 30, (50, 900), (1, 60), 6000, LLAMA4,
     {"max_num_batched_tokens": 256, "enable_prefix_caching": True}),
    ("decode_llama4_budget_2048", "decode", 213, 30, (50, 900), (20, 200), 400, LLAMA4,
     {"max_num_batched_tokens": 2048}),
    ("prefill_llama4_cached_budget_2048", "prefill", 214, 30, (50, 900), (1, 1), 6000, LLAMA4,
     {"max_num_batched_tokens": 2048, "enable_prefix_caching": True}),
]
_BY_NAME = {case[0]: case for case in CASES}


def _run_vllm(case, async_scheduling: bool, kv_groups: tuple[int, ...]):
    import vllm_pd_driver

    _, side, seed, n, prompt, output, blocks, _, extra = case
    return vllm_pd_driver.run_vllm_pd(make_requests(seed, n, prompt, output), side=side, num_gpu_blocks=blocks,
                                      kv_groups=kv_groups, **pd_knobs(async_scheduling, **extra))


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pd_hybrid_paths_match_vllm(case, async_scheduling) -> None:
    name, side, seed, n, prompt, output, blocks, kv_groups, extra = case
    requests = make_requests(seed, n, prompt, output)
    expected = assert_pd_parity(name, requests, side=side, num_gpu_blocks=blocks, kv_groups=kv_groups,
                                **pd_knobs(async_scheduling, **extra))
    assert len({rid for step in expected[0] for rid in step}) == n


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", ["decode_tight_gptoss_budget_256", "decode_tight_gemma_cached_budget_2048"])
def test_tight_hybrid_decode_cases_preempt(name, async_scheduling) -> None:
    # Guards the parity cases: a "tight" decode case that never preempts tests nothing.
    case = _BY_NAME[name]
    trace, free = _run_vllm(case, async_scheduling, case[7])
    assert recomputed_locally(trace), f"{name}: no decode request was preempted and recomputed locally"
    assert min(free) == 0, f"{name}: the pool never ran out"


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name", ["decode_gptoss_budget_256", "decode_gemma_budget_2048",
                                  "prefill_gemma_budget_256", "prefill_full_first_tight_budget_256",
                                  "decode_llama4_cached_budget_256", "prefill_llama4_cached_budget_2048"])
def test_hybrid_groups_change_vllm_free_blocks(name, async_scheduling) -> None:
    # Guards the parity cases: the groups must reach vLLM's KV cache, or the cases are test_pd_parity's.
    case = _BY_NAME[name]
    _, hybrid_free = _run_vllm(case, async_scheduling, case[7])
    _, plain_free = _run_vllm(case, async_scheduling, ())
    assert hybrid_free != plain_free, f"{name}: kv_groups={case[7]} left vLLM's free blocks as one full group's"


def test_pd_scheduler_builds_the_hybrid_coordinator_with_an_hma_connector() -> None:
    import vllm_pd_driver
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA

    knobs = pd_knobs(False, enable_prefix_caching=True)
    scheduler, _ = vllm_pd_driver.new_pd_scheduler(num_gpu_blocks=500, kv_groups=GEMMA, **knobs)
    assert type(scheduler.connector) is vllm_pd_driver.HMAPullConnector
    assert isinstance(scheduler.connector, SupportsHMA)
    assert type(scheduler.kv_cache_manager.coordinator).__name__ == "HybridKVCacheCoordinator"
    assert len(scheduler.kv_cache_manager.coordinator.single_type_managers) == 4
    plain, _ = vllm_pd_driver.new_pd_scheduler(num_gpu_blocks=500, **knobs)
    assert type(plain.connector) is vllm_pd_driver.PullConnector
    assert not isinstance(plain.connector, SupportsHMA)
