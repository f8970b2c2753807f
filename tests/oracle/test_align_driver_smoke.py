"""The vLLM driver with Gated DeltaNet groups in the "align" mamba cache mode (``STATE_ALIGN``), alone:
Qwen3.5's KV cache with prefix caching on Hopper (3 GDN groups, then 1 full-attention group, one pool).
Tiny cases whose step traces, free-block counts and held state blocks are derived by hand from vLLM
0.33's align mode (the rules below, read in vllm/v1/core and sched/scheduler.py); each is also run
without the align mode (one full-attention group, or ``STATE`` groups without prefix caching) to
show that it changes the result.

Notation: B = 64 (block size; scheduler block, hash block and checkpoint grid all equal B), P = prompt
length, s / e = a chunk's first / end token, pe = max(P, num_tokens - 1) the prefill end, ⌈x⌉ = cdiv.
Pool: 200 blocks, block 0 the null block, so 199 start free; ``get_num_free_blocks`` counts
freed-but-hashed (evictable) blocks as free.

Rules used (vllm/v1/core, align mode, FlashInfer GDN prefill: one checkpoint block per GDN group):
- Split (``Scheduler._mamba_block_aligned_split``): a chunk that does not reach pe (not the last one)
  is cut down to a multiple of B; cut to 0, a waiting request ends admission for the step. The last
  chunk is kept whole (B <= the per-step cap). A chunk also stops at the request's shared-prefix
  junction (``shared_prefix_boundary``, below).
- Per GDN group a request's table is indexed by block position: index i holds the state after
  (i + 1)·B tokens, nulls where nothing is held. A chunk [s, e) allocates the state block at index
  ⌈e/B⌉ - 1 if the table is shorter, plus, on the last prefill chunk with s % B == 0 and e - s > B,
  a checkpoint block at index ⌈e/B⌉ - 2 that receives the state at ⌊(e - 1)/B⌋·B. The next time the
  request is given slots, with p processed tokens, the blocks at indices < ⌊(p - 1)/B⌋ are freed.
  So a request holds 1 state block per group, 2 while a chunk crosses into a new block, 3 in a
  checkpointed chunk that starts from an earlier state.
- Prefix cache (retention interval 0): full attention hashes every full block; a GDN group hashes
  only the state at the prompt's replay boundary ⌊(P - 1)/B⌋·B (index ⌊(P - 1)/B⌋ - 1) and at the
  junction. A hit is full attention's cached run FA_hit (≤ num_tokens - 1), then the rightmost
  block boundary ≤ FA_hit whose state all three GDN groups cached: hit = that boundary; if
  FA_hit > hit the request's junction is FA_hit.
- Same-step refusal: a waiting request whose GDN hit block was hashed in the current schedule() is
  refused, which ends admission for the step.
- Admission reserves the whole prompt (``scheduler_reserve_full_isl``): full attention ⌈P/B⌉ - hit
  blocks, each GDN group at most 2 (state + checkpoint); none of these cases is short of blocks.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_vllm_driver_smoke import Req

_B = 64
_KNOBS = dict(max_num_seqs=8, max_num_batched_tokens=2048, max_model_len=1024, block_size=_B, num_gpu_blocks=200,
              enable_prefix_caching=True)


def _groups(driver: Any) -> tuple:
    """Qwen3.5's groups in vLLM's order: 3 GDN groups in the align mode, then full attention."""
    return (driver.STATE_ALIGN,) * 3 + (0,)


def _state_groups(driver: Any) -> tuple:
    """Qwen3.5's groups without prefix caching: 3 GDN groups in the "none" mode, then full attention."""
    return (driver.STATE,) * 3 + (0,)


def _ids(first: int, n: int) -> tuple[int, ...]:
    return tuple(range(first, first + n))


def _run(driver: Any, requests: list[Req], kv_groups: tuple, **overrides: Any) -> tuple[list, list]:
    """``run_vllm_scheduler`` with ``_KNOBS`` (and ``overrides``): ``(trace, free_blocks)``."""
    return driver.run_vllm_scheduler(requests, kv_groups=kv_groups, record_free_blocks=True,
                                     **{**_KNOBS, **overrides})


def _run_recording_held(driver: Any, requests: list[Req], **overrides: Any) -> tuple[list, list, list]:
    """The sync driver loop on ``_groups`` and ``_KNOBS``, also recording, right after each
    schedule() that executes a step, the non-null state blocks each scheduled request holds in a GDN
    group (``{request_id: n}``; the three groups must agree). Returns ``(trace, free_blocks, held)``."""
    knobs = {**_KNOBS, "long_prefill_token_threshold": 0, "policy": "fcfs", "async_scheduling": False,
             "watermark": 0.0, **overrides}
    scheduler, block_hasher = driver.new_scheduler(kv_groups=_groups(driver), **knobs)
    driver.add_requests(scheduler, requests, block_hasher)
    gdn_managers = scheduler.kv_cache_manager.coordinator.single_type_managers[:3]
    trace: list[dict[str, int]] = []
    free: list[int] = []
    held: list[dict[str, int]] = []
    for _ in range(1000):
        if not scheduler.has_requests():
            return trace, free, held
        out = scheduler.schedule()
        if out.total_num_scheduled_tokens > 0:
            free.append(scheduler.kv_cache_manager.block_pool.get_num_free_blocks())
            step: dict[str, int] = {}
            for rid in out.num_scheduled_tokens:
                counts = {sum(not b.is_null for b in m.req_to_blocks[rid]) for m in gdn_managers}
                assert len(counts) == 1, f"{rid}: the GDN groups hold different block counts {counts}"
                step[rid] = counts.pop()
            held.append(step)
        sampled = driver._fake_sample(scheduler, out)
        driver._record(trace, out)
        scheduler.update_from_output(out, sampled)
    raise RuntimeError("still busy")


def test_align_groups_are_checked(vllm_driver):
    # What the driver builds for STATE_ALIGN: vLLM's MambaManager in the align mode over block_size
    # blocks, the hybrid prefix-caching coordinator, scheduler and hash block = B, the align split on.
    scheduler, _ = vllm_driver.new_scheduler(kv_groups=_groups(vllm_driver), long_prefill_token_threshold=0,
                                             policy="fcfs", async_scheduling=False, watermark=0.0, **_KNOBS)
    coordinator = scheduler.kv_cache_manager.coordinator
    assert type(coordinator).__name__ == "HybridKVCacheCoordinator"
    assert [(type(m).__name__, getattr(m, "mamba_cache_mode", None), m.block_size)
            for m in coordinator.single_type_managers] == [("MambaManager", "align", _B)] * 3 + [
        ("FullAttentionManager", None, _B)]
    assert (scheduler.block_size, scheduler.hash_block_size) == (_B, _B)
    assert scheduler.need_mamba_block_aligned_split
    # the STATE groups: the "none" mode, one max_model_len block, no aligned split
    scheduler, _ = vllm_driver.new_scheduler(kv_groups=_state_groups(vllm_driver), long_prefill_token_threshold=0,
                                             policy="fcfs", async_scheduling=False, watermark=0.0,
                                             **{**_KNOBS, "enable_prefix_caching": False})
    assert [getattr(m, "mamba_cache_mode", None) for m in scheduler.kv_cache_manager.coordinator.single_type_managers
            ] == ["none"] * 3 + [None]
    assert not scheduler.need_mamba_block_aligned_split


@pytest.mark.parametrize("kv_groups, knobs, match", [
    (("state_align", 0), {"enable_prefix_caching": False}, "needs enable_prefix_caching"),
    (("state_align", "state", 0), {}, "only STATE_ALIGN and 0"),
    (("state_align", 128, 0), {}, "only STATE_ALIGN and 0"),
    (("state_align", -64, 0), {}, "only STATE_ALIGN and 0"),
])
def test_align_setups_not_modelled_are_refused(vllm_driver, kv_groups, knobs, match):
    assert vllm_driver.STATE_ALIGN == "state_align"
    with pytest.raises(ValueError, match=match):
        vllm_driver.run_vllm_scheduler([Req("a", 30, 1)], kv_groups=kv_groups, **{**_KNOBS, **knobs})


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_last_chunk_takes_a_checkpoint_block(vllm_driver, async_scheduling):
    # One prompt P=300, 3 outputs, budget 2048. Step 1 prefills all 300 tokens (the last chunk is not
    # cut). 300 > B and s = 0 % B: each GDN group takes the state block at index ⌈300/64⌉ - 1 = 4
    # and the checkpoint block at index 3 (state at ⌊299/64⌋·64 = 256, the replay boundary, hashed);
    # full attention ⌈300/64⌉ = 5 blocks: 199 - 3·2 - 5 = 188.
    # Sync: step 2 (p = 300) frees the blocks below ⌊299/64⌋ = 4: the checkpoint (hashed, so it stays
    # an evictable cache entry, counted free): 188 + 3 = 191; 301 tokens still fit (5 blocks): 191.
    # Async: step 2 is scheduled before step 1's output, with p = 300 - 300 in flight = 0: nothing
    # freed, 188; step 3 has p = 301 - 1 = 300 and frees the checkpoints: 191.
    requests = [Req("a", 300, 3)]
    trace, free = _run(vllm_driver, requests, _groups(vllm_driver), async_scheduling=async_scheduling)
    assert trace == [{"a": 300}, {"a": 1}, {"a": 1}]
    assert free == ([188, 188, 191] if async_scheduling else [188, 191, 191])
    # Without the align mode: the STATE groups hold one max_model_len block each, 199 - 3 - 5 = 191
    # throughout; one full-attention group alone 199 - 5 = 194.
    trace, free = _run(vllm_driver, requests, _state_groups(vllm_driver), async_scheduling=async_scheduling,
                       enable_prefix_caching=False)
    assert (trace, free) == ([{"a": 300}, {"a": 1}, {"a": 1}], [191, 191, 191])
    trace, free = _run(vllm_driver, requests, (), async_scheduling=async_scheduling)
    assert (trace, free) == ([{"a": 300}, {"a": 1}, {"a": 1}], [194, 194, 194])


def test_prefill_chunks_end_on_block_boundaries_except_the_last(vllm_driver):
    # Budget 100 < 2B. a: P=250, b: P=130, 3 outputs each. (p = processed tokens when given slots.)
    #  1: a: 100 → cut to 64 (not the last chunk). GDN idx 0, FA 1 block: 199 - 4 = 195. b: the 36
    #     tokens left cut to 0 → admission ends for the step.
    #  2: a: 64 → 164 cut to 128. p=64 frees nothing (⌊63/64⌋ = 0); GDN idx 1, FA 1: 191. b: 0 again.
    #  3: a: 128 → 228 cut to 192. p=128 frees idx 0 (+3); idx 2 (state at 192 = ⌊249/64⌋·64, the
    #     replay boundary: hashed) + FA 1: 191 + 3 - 4 = 190. b: 0.
    #  4: a: 192 → 250 = pe, the last chunk: 58 tokens, kept (58 ≤ B: no checkpoint). p=192 frees
    #     idx 1 (+3); idx 3 + FA 1: 189. b: 42 tokens → 0.
    #  5: a decodes (p=250 frees idx 2, hashed: +3 = 192). b admitted, no hit: 99 → cut to 64; GDN idx 0
    #     + FA 1: 188.
    #  6: a decodes (nothing). b: 64 → 130 = pe, the last chunk: 66 > B tokens, kept whole (a non-last
    #     chunk would be cut to 64); s = 64 % B = 0, so each GDN group takes the checkpoint at idx 1
    #     (state at 128) and the state at idx 2: 3 blocks held (previous state, checkpoint, new state);
    #     FA 2: 188 - 8 = 180. a finishes after this step: its GDN idx 3 ×3 + FA 4 = 187.
    #  7: b decodes, p=130 frees idx 0 and 1 (+6): 193.  8: b decodes: 193.
    # Held GDN blocks per group: a 1, 2, 2, 2 (each chunk crosses into a new block), then 1; b 1, 3, 1, 1.
    requests = [Req("a", 250, 3), Req("b", 130, 3)]
    expected_trace = [{"a": 64}, {"a": 64}, {"a": 64}, {"a": 58}, {"a": 1, "b": 64}, {"a": 1, "b": 66},
                      {"b": 1}, {"b": 1}]
    trace, free, held = _run_recording_held(vllm_driver, requests, max_num_batched_tokens=100)
    assert trace == expected_trace
    assert free == [195, 191, 190, 189, 188, 180, 193, 193]
    assert held == [{"a": 1}, {"a": 2}, {"a": 2}, {"a": 2}, {"a": 1, "b": 1}, {"a": 1, "b": 3}, {"b": 1}, {"b": 1}]
    assert _run(vllm_driver, requests, _groups(vllm_driver), max_num_batched_tokens=100) == (trace, free)
    # Without the align mode chunks fill the budget: a 100, 100, 50 (+ b 50), then b 80 ends its prompt.
    plain = [{"a": 100}, {"a": 100}, {"a": 50, "b": 50}, {"a": 1, "b": 80}, {"a": 1, "b": 1}, {"b": 1}]
    assert _run(vllm_driver, requests, (), max_num_batched_tokens=100)[0] == plain
    assert _run(vllm_driver, requests, _state_groups(vllm_driver), max_num_batched_tokens=100,
                enable_prefix_caching=False)[0] == plain


def test_decode_crossing_a_block_holds_two_state_blocks(vllm_driver):
    # a: P=100, 31 outputs. Step 1: 100 tokens, the last chunk, 100 > B: checkpoint idx 0 (state at
    # 64, the replay boundary ⌊99/64⌋·64) + state idx 1 per group, FA 2: 199 - 8 = 191, 2 held.
    # Step 2 (p=100) frees idx 0 (hashed: +3): 194, 1 held. Step j decodes token 99 + j; steps 2..29
    # stay in block 1 (e ≤ 128). Step 30 (e = 129) crosses into block 2: GDN idx 2 + FA 1: 190, 2 held
    # (p = 128 frees nothing, ⌊127/64⌋ = 1 already retired). Step 31 (p = 129) frees idx 1: 193, 1 held.
    trace, free, held = _run_recording_held(vllm_driver, [Req("a", 100, 31)])
    assert trace == [{"a": 100}] + [{"a": 1}] * 30
    assert free == [191] + [194] * 28 + [190, 193]
    assert held == [{"a": 2}] + [{"a": 1}] * 28 + [{"a": 2}, {"a": 1}]
    # The STATE groups hold one block each throughout: 199 - 3 - 2 = 194, then FA's 3rd block: 193.
    _, free = _run(vllm_driver, [Req("a", 100, 31)], _state_groups(vllm_driver), enable_prefix_caching=False)
    assert free == [194] * 29 + [193, 193]


def test_identical_prompts_arriving_together_are_admitted_one_step_apart(vllm_driver):
    # a and b: the same 300 ids; c: 100 own ids; 2 outputs each, budget 2048.
    #  1: a prefills 300 (11 blocks, as in test_last_chunk_takes_a_checkpoint_block): 188; its GDN
    #     checkpoint at 256 is hashed this step. b's lookup: FA_hit = 4 blocks = 256 (≤ 299), GDN hit
    #     block 3 (256) → hit 256 — but that block was hashed in this schedule(): refused, and
    #     admission ends, so c (unrelated) waits too.
    #  2: a decodes, freeing its checkpoints (+3): 191. b hits 256 and computes the last 44 (no
    #     checkpoint: 44 ≤ B): per GDN group it takes the (now evictable) hit block and 1 state block
    #     (-6), FA 1 new block (its 4 hit blocks are a's, held): 184. c: 100 tokens, the last chunk,
    #     100 > B: checkpoint (64) + state per group, FA 2: 176. a finishes: GDN idx 4 ×3 + its own FA
    #     block 4 (blocks 0..3 are still b's): 180.
    #  3: b (p=300) frees its hit block idx 3 (+3), c (p=100) its checkpoint idx 0 (+3): 186.
    requests = [Req("a", 300, 2, prompt_token_ids=_ids(1, 300)), Req("b", 300, 2, prompt_token_ids=_ids(1, 300)),
                Req("c", 100, 2, prompt_token_ids=_ids(10_001, 100))]
    trace, free = _run(vllm_driver, requests, _groups(vllm_driver))
    assert trace == [{"a": 300}, {"a": 1, "b": 44, "c": 100}, {"b": 1, "c": 1}]
    assert free == [188, 176, 186]
    # One full-attention group: b hits a's blocks hashed in the same step, all three start together.
    assert _run(vllm_driver, requests, ())[0] == [{"a": 300, "b": 44, "c": 100}, {"a": 1, "b": 1, "c": 1}]


def test_shared_prefix_arrival_is_split_at_the_junction(vllm_driver):
    # max_num_seqs=1: each request waits until the one before it finishes. A shared 200-token prefix:
    # a = prefix + 60 own (260), b = prefix + 150 own (350), c = prefix + 90 own (290), d = b's prompt
    # + 10 own (360); 2 outputs each.
    #  1: a prefills 260: checkpoint idx 3 (256, hashed) + state idx 4 per group, FA 5: 188.
    #  2: a decodes, freeing the checkpoints: 191; a finishes (all back): 199.
    #  3: b: FA_hit = 3 blocks = 192 (block 3 mixes in a's own ids); no GDN state at 64/128/192 is
    #     cached (a kept only 256) → hit 0, junction 192. The prefill (350 = pe, would be one chunk)
    #     stops at the junction: 192 tokens; GDN state idx 2 (the junction state, hashed), FA 3: 193.
    #  4: b: 192 → 350, the last chunk, 158 > B: checkpoint idx 4 (state at 320, b's replay boundary,
    #     hashed) + state idx 5 per group, FA 3: 193 - 9 = 184.
    #  5: b decodes, freeing idx 2 and 4 (+6): 190; b finishes: 199.
    #  6: c: FA_hit 192 and b's junction state at 192 in all three groups → hit 192, 98 tokens, the
    #     last chunk, 98 > B: per group the evictable hit block + checkpoint idx 3 + state idx 4 (9),
    #     FA 3 evictable hit blocks + 2 new (5): 199 - 14 = 185.
    #  7: c decodes, freeing the hit and checkpoint blocks (+6): 191; c finishes: 199.
    #  8: d: FA_hit 320 (b's 5 hashed blocks), b's checkpoint state at 320 → hit 320, 40 tokens:
    #     per group the hit block + state idx 5 (6), FA 5 hit blocks + 1 new (6): 187.
    #  9: d decodes, freeing the hit block: 190.
    prefix = _ids(1, 200)
    b_prompt = prefix + _ids(20_001, 150)
    requests = [Req("a", 260, 2, prompt_token_ids=prefix + _ids(10_001, 60)),
                Req("b", 350, 2, prompt_token_ids=b_prompt),
                Req("c", 290, 2, prompt_token_ids=prefix + _ids(30_001, 90)),
                Req("d", 360, 2, prompt_token_ids=b_prompt + _ids(40_001, 10))]
    trace, free = _run(vllm_driver, requests, _groups(vllm_driver), max_num_seqs=1)
    assert trace == [{"a": 260}, {"a": 1}, {"b": 192}, {"b": 158}, {"b": 1}, {"c": 98}, {"c": 1}, {"d": 40},
                     {"d": 1}]
    assert free == [188, 191, 193, 184, 190, 185, 191, 187, 190]
    # One full-attention group: b hits 192 and computes its 158 remaining tokens in one step.
    assert _run(vllm_driver, requests, (), max_num_seqs=1)[0] == [
        {"a": 260}, {"a": 1}, {"b": 158}, {"b": 1}, {"c": 98}, {"c": 1}, {"d": 40}, {"d": 1}]
