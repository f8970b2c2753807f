"""The vLLM driver with a hybrid KV cache (``kv_groups``), alone: tiny cases whose step traces,
free-block counts and prefix hits are derived by hand from vLLM 0.33's KV cache manager.

Rules used (vllm/v1/core):
- One pool: ``num_gpu_blocks`` blocks, block 0 the null block, so 199 of 200 start free; every group
  takes its blocks from it. ``get_num_free_blocks`` counts freed-but-cached (evictable) blocks as free.
- ``KVCacheManager.allocate_slots(request, n)``: first ``remove_skipped_blocks(processed)`` with
  processed = num_computed_tokens - num_in_flight_tokens (tokens of steps scheduled but not yet
  processed: 0 in sync runs, the previous step's tokens in async ones), then every group grows its
  table to cdiv(num_computed_tokens + n, 16) entries; a sliding group too (it allocates a block for
  every new token of the chunk, whatever the window).
- ``SlidingWindowManager``: get_num_skipped_tokens(p) = max(0, p - W + 1); remove_skipped_blocks frees
  the blocks wholly below that ((p - W + 1) // 16 of them), walking back from the last one and
  stopping at the first already-null entry; freed entries become the null block.
- Admission (``scheduler_reserve_full_isl``, default True) checks the full prompt fits: full group
  cdiv(300, 16) = 19, sliding group min(19, max_admission_blocks_per_request) =
  min(19, cdiv(min(W - 1 + max_in_flight_tokens, max_model_len), 16) + 1) = 13 (sync, 64 in flight).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_vllm_driver_smoke import Req

_KNOBS = dict(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=1024, block_size=16, num_gpu_blocks=200,
              enable_prefix_caching=False)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_sliding_window_frees_blocks_behind_the_window(vllm_driver, async_scheduling):
    # kv_groups=(128, 0): group 0 sliding (W=128), group 1 full attention; prompt 300, 5 outputs,
    # budget 64. Schedule: 4 chunks of 64, then 44 ends the prompt (token 1), then 4 decodes.
    # skip(p) = p - 127 tokens below the window, i.e. (p - 127) // 16 sliding blocks freeable.
    #
    # Sync (processed p = num_computed_tokens; 199 free at start):
    #  1: 0 -> 64     p=0   skip none;              +4 sliding +4 full (4, 4)        199-8 = 191
    #  2: 64 -> 128   p=64  skip none;              +4 +4 (8, 8)                     191-8 = 183
    #  3: 128 -> 192  p=128 skip 1 token, 0 blocks; +4 +4 (12, 12)                   183-8 = 175
    #  4: 192 -> 256  p=192 skip 65 -> free 0..3 (+4); +4 +4 (16, 16)          175+4-8 = 171
    #  5: 256 -> 300  p=256 skip 129 -> 8 blocks, free 7..4 (+4); +3 +3 (19, 19) 171+4-6 = 169
    #  6: decode, 300 -> 301 (19 blocks hold 304 slots): p=300 skip 173 -> 10, free 9, 8   = 171
    #  7: p=301 skip 174 -> 10 blocks, nothing new                                         = 171
    #  8: p=302 skip 175 -> 10                                                             = 171
    #  9: p=303 skip 176 -> 11, free block 10                                              = 172
    #
    # Async: step k is scheduled before step k-1's output is processed, so num_in_flight_tokens is
    # step k-1's tokens and p lags one step (p = computed - in flight):
    #  1: p=0                                          +4 +4                          199-8 = 191
    #  2: computed 64, in flight 64, p=0               +4 +4                          191-8 = 183
    #  3: computed 128, p=64                           +4 +4                          183-8 = 175
    #  4: computed 192, p=128 (skip 1 token, 0 blocks) +4 +4                          175-8 = 167
    #  5: computed 256, p=192 skip 65: free 0..3 (+4); +3 +3                    167+4-6 = 165
    #  6: computed 300 (+1 placeholder: 301 slots, 19 blocks), in flight 44, p=256 skip 129:
    #     free 7..4                                                               165+4 = 169
    #  7: computed 301, in flight 1, p=300 skip 173: free 9, 8                            = 171
    #  8: p=301 skip 174                                                                  = 171
    #  9: p=302 skip 175                                                                  = 171
    trace, free = vllm_driver.run_vllm_scheduler(
        [Req("a", 300, 5)], kv_groups=(128, 0), record_free_blocks=True, async_scheduling=async_scheduling,
        **_KNOBS)
    assert trace == [{"a": 64}] * 4 + [{"a": 44}] + [{"a": 1}] * 4
    if async_scheduling:
        assert free == [191, 183, 175, 167, 165, 169, 171, 171, 171]
    else:
        assert free == [191, 183, 175, 171, 169, 171, 171, 171, 172]


def test_single_full_group_frees_nothing_before_the_end(vllm_driver):
    # The default (one full-attention group): 4 blocks per 64-token chunk, 3 for the last 44 (19
    # in all, 304 slots), nothing freed while running.
    trace, free = vllm_driver.run_vllm_scheduler([Req("a", 300, 5)], record_free_blocks=True, **_KNOBS)
    assert trace == [{"a": 64}] * 4 + [{"a": 44}] + [{"a": 1}] * 4
    assert free == [195, 191, 187, 183, 180, 180, 180, 180, 180]
    assert vllm_driver.run_vllm_scheduler([Req("a", 300, 5)], **_KNOBS) == trace   # default: trace only


def test_kv_groups_are_checked(vllm_driver):
    scheduler, _ = vllm_driver.new_scheduler(kv_groups=(64, 64, 64, 0), long_prefill_token_threshold=0,
                                             policy="fcfs", async_scheduling=False, watermark=0.0,
                                             **{**_KNOBS, "enable_prefix_caching": True})
    coordinator = scheduler.kv_cache_manager.coordinator
    assert type(coordinator).__name__ == "HybridKVCacheCoordinator"
    assert [getattr(m, "sliding_window", 0) for m in coordinator.single_type_managers] == [64, 64, 64, 0]
    assert coordinator.retention_interval == 0      # CacheConfig.prefix_cache_retention_interval default
    # -C: chunked local attention of C-token chunks (Llama 4); vLLM keeps no hybrid groups with a drafter
    scheduler, _ = vllm_driver.new_scheduler(kv_groups=(-64, 0), long_prefill_token_threshold=0, policy="fcfs",
                                             async_scheduling=False, watermark=0.0, **_KNOBS)
    assert [type(m).__name__ for m in scheduler.kv_cache_manager.coordinator.single_type_managers] == [
        "ChunkedLocalAttentionManager", "FullAttentionManager"]
    assert scheduler.kv_cache_manager.coordinator.single_type_managers[0].attention_chunk_size == 64
    with pytest.raises(ValueError, match="kv_groups with a drafter"):
        vllm_driver.run_vllm_scheduler([Req("a", 30, 1)], kv_groups=(-64, 0), num_speculative_tokens=1, **_KNOBS)


def _run_recording_hits(
    driver: Any, requests: list[Req], **knobs: Any
) -> tuple[list[dict[str, int]], dict[str, int]]:
    """The sync driver loop, also recording each request's num_computed_tokens when first
    scheduled (its prefix-cache hit, ``NewRequestData.num_computed_tokens``)."""
    defaults = dict(long_prefill_token_threshold=0, policy="fcfs", async_scheduling=False, watermark=0.0)
    scheduler, block_hasher = driver.new_scheduler(**{**defaults, **knobs})
    driver.add_requests(scheduler, requests, block_hasher)
    trace: list[dict[str, int]] = []
    hits: dict[str, int] = {}
    for _ in range(1000):
        if not scheduler.has_requests():
            return trace, hits
        out = scheduler.schedule()
        for new in out.scheduled_new_reqs:
            hits.setdefault(new.req_id, new.num_computed_tokens)
        sampled = driver._fake_sample(scheduler, out)
        driver._record(trace, out)
        scheduler.update_from_output(out, sampled)
    raise RuntimeError("still busy")


@pytest.mark.parametrize("kv_groups", [(128, 0), (0, 128)])
def test_prefix_hit_under_sparse_sliding_retention(vllm_driver, kv_groups):
    # max_num_seqs=1: b and c wait until the request before them finishes. Prompts: a = b = 200 ids,
    # c = a's first 100 ids + 60 own ids. 200 tokens hash 12 full blocks (192 tokens).
    #
    # a caches (retention interval 0, replay boundary num_prompt_tokens - 1 = 199): the full group
    # caches all 12 blocks; the sliding group (W=128) only the `need` = cdiv(W - 1, 16) = 8 blocks
    # ending at the aligned boundary 199 // 16 * 16 = 192, i.e. blocks 4..11
    # (SlidingWindowManager.reachable_block_mask). Freed blocks keep their hash (evictable, 200-block
    # pool: nothing evicted).
    #
    # b: get_computed_blocks caps the hit at num_tokens - 1 = 199. HybridKVCacheCoordinator looks up
    # full attention first (whatever the group order): blocks 0..11 hit -> 192. Then the sliding
    # group, max_length 192: scanning blocks 11 down to 4 gives 8 contiguous hits = need -> a hit
    # of 12 blocks = 192 (blocks 0..3 padded with the null block). Simple hybrid: one pass. b
    # computes only 200 - 192 = 8 tokens.
    #
    # c: the full group hits blocks 0..5 (96 tokens, block 6 mixes in c's own ids). The sliding
    # group, max_length 96: blocks 5, 4 hit (2 < need 8), block 3 was never cached -> no run of 8,
    # and the hit is the leading run of cached blocks from block 0: none -> 0. The hit is 0 (with a
    # single full-attention group, or dense retention, it would be 96).
    prompt = tuple(range(1, 201))
    requests = [Req("a", 200, 3, prompt_token_ids=prompt), Req("b", 200, 3, prompt_token_ids=prompt),
                Req("c", 160, 3, prompt_token_ids=prompt[:100] + tuple(range(10_001, 10_061)))]
    knobs = {**_KNOBS, "max_num_seqs": 1, "max_num_batched_tokens": 256, "enable_prefix_caching": True}
    trace, hits = _run_recording_hits(vllm_driver, requests, kv_groups=kv_groups, **knobs)
    assert hits == {"a": 0, "b": 192, "c": 0}
    assert trace == [{"a": 200}, {"a": 1}, {"a": 1}, {"b": 8}, {"b": 1}, {"b": 1},
                     {"c": 160}, {"c": 1}, {"c": 1}]
    _, plain_hits = _run_recording_hits(vllm_driver, requests, **knobs)
    assert plain_hits == {"a": 0, "b": 192, "c": 96}
