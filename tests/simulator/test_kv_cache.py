"""Golden tests of the KV cache (exact block ids, eviction order, prefix hits) — values as vLLM 0.33."""

import pytest

from simulator.kv_cache import BlockPool, FreeBlockQueue, KVCacheManager
from simulator.request import Request, RequestStatus


def req(rid: str, n: int, tokens: tuple[int, ...] | None = None, max_tokens: int = 4) -> Request:
    return Request(rid, 0.0, n, max_tokens, block_size=16, prompt_token_ids=tokens)


def admit(kv: KVCacheManager, r: Request, n: int | None = None) -> list[int]:
    """Admit like the scheduler's waiting loop: prefix lookup, full-sequence gate, first chunk."""
    hit_blocks, hit = kv.get_computed_blocks(r)
    n = r.num_tokens - hit if n is None else n
    blocks = kv.allocate_slots(r, n, hit, hit_blocks, full_sequence_must_fit=True, has_scheduled_reqs=False)
    assert blocks is not None
    r.status = RequestStatus.RUNNING
    r.num_computed_tokens = hit + n
    return blocks


def test_free_queue_keeps_vllm_order():
    q = FreeBlockQueue(6)
    assert q.popleft_n(2) == [0, 1]
    q.remove(3)
    q.append_n([1])
    q.prepend_n([3, 0])
    assert q.order() == [3, 0, 2, 4, 5, 1]
    assert q.num_free_blocks == 6


def test_null_block_is_reserved_and_new_blocks_come_from_the_head():
    pool = BlockPool(10, enable_caching=True)
    assert pool.null_block == 0 and pool.num_free_blocks == 9
    assert pool.get_new_blocks(3) == [1, 2, 3]
    assert pool.usage() == pytest.approx(3 / 9)


def test_prefix_hit_is_capped_at_num_tokens_minus_one():
    kv = KVCacheManager(20, 16, 1024)
    toks = tuple(range(1, 34))
    a = req("a", 33, toks)
    admit(kv, a)
    assert kv.get_computed_blocks(req("b", 32, toks[:32]))[1] == 16  # 32 tokens hit 16
    assert kv.get_computed_blocks(req("c", 33, toks))[1] == 32  # 33 tokens hit 32
    assert kv.get_computed_blocks(req("d", 33))[1] == 0  # unique content never hits


def test_free_order_hashed_to_tail_unhashed_to_head():
    kv = KVCacheManager(10, 16, 1024)
    a = req("a", 40, tuple(range(40)))
    assert admit(kv, a) == [1, 2, 3]  # blocks 1, 2 full (hashed), 3 partial
    kv.free(a)
    # reverse order: 3 (no hash) -> head; 2 then 1 (hashed) -> tail (LRU: chain tail evicted first)
    assert kv.pool.free_queue.order() == [3, 4, 5, 6, 7, 8, 9, 2, 1]
    assert kv.num_free_blocks == 9


def test_free_order_without_prefix_caching_is_all_to_head():
    kv = KVCacheManager(10, 16, 1024, enable_prefix_caching=False)
    a = req("a", 40, tuple(range(40)))
    assert admit(kv, a) == [1, 2, 3]
    kv.free(a)
    assert kv.pool.free_queue.order() == [3, 2, 1, 4, 5, 6, 7, 8, 9]


def test_hit_touches_free_blocks_and_reuse_evicts_lru_hash():
    kv = KVCacheManager(6, 16, 1024)  # usable blocks 1..5
    toks = tuple(range(100, 140))
    a = req("a", 40, toks)
    admit(kv, a)
    kv.free(a)  # queue: 3, 4, 5, 2, 1
    b = req("b", 40, toks)
    hit_blocks, hit = kv.get_computed_blocks(b)
    assert (hit_blocks, hit) == ([1, 2], 32)
    assert admit(kv, b) == [3]  # hits 1, 2 leave the free queue; the tail block is new
    assert kv.pool.free_queue.order() == [4, 5]
    kv.free(b)
    c = req("c", 70)  # unique: needs 5 blocks, takes 3, 4, 5, 2, 1 and evicts both hashes
    assert admit(kv, c) == [3, 4, 5, 2, 1]
    assert all(h not in kv.pool.cached for h in a.block_hashes)
    assert kv.get_computed_blocks(req("d", 40, toks)) == ([], 0)


def test_shared_block_needs_both_frees():
    kv = KVCacheManager(10, 16, 1024)
    toks = tuple(range(50))
    a, b = req("a", 50, toks), req("b", 50, toks)
    admit(kv, a)
    admit(kv, b)
    assert kv.get_block_ids("b")[:3] == kv.get_block_ids("a")[:3]
    kv.free(a)
    assert kv.num_free_blocks == 9 - 4  # only a's private tail block came back
    kv.free(b)
    assert kv.num_free_blocks == 9
    kv.check_invariants()


def test_full_sequence_gate_and_watermark():
    kv = KVCacheManager(11, 16, 1024, watermark=0.1)  # 10 usable, watermark 1 block
    big = req("big", 160)
    # first chunk fits (1 block) but the full prompt (10 blocks) + watermark does not
    assert kv.allocate_slots(big, 16, full_sequence_must_fit=True, has_scheduled_reqs=True) is None
    # without anything running the watermark does not apply
    assert kv.allocate_slots(big, 16, full_sequence_must_fit=True, has_scheduled_reqs=False) == [1]
    assert kv.req_to_blocks["big"] == [1]


def test_decode_allocates_only_at_block_boundary():
    kv = KVCacheManager(10, 16, 1024)
    r = req("r", 16)
    assert admit(kv, r) == [1]
    r.append_output_token()
    assert kv.allocate_slots(r, 1) == [2]
    r.num_computed_tokens += 1
    for _ in range(15):
        r.append_output_token()
        assert kv.allocate_slots(r, 1) == []
        r.num_computed_tokens += 1


def test_output_tokens_are_hashed_as_blocks_fill():
    r = req("r", 20, tuple(range(20)))
    assert len(r.block_hashes) == 1
    for _ in range(11):
        r.append_output_token()
    assert len(r.block_hashes) == 1
    r.append_output_token()  # 32 tokens
    assert len(r.block_hashes) == 2
    same = req("s", 32, tuple(range(20)) + (0,) * 12)
    assert same.block_hashes == r.block_hashes


def test_prefix_cache_stats_counted_at_admission():
    kv = KVCacheManager(20, 16, 1024)
    toks = tuple(range(48))
    for rid in ("a", "b"):
        r = req(rid, 48, toks)
        _, hit = kv.get_computed_blocks(r)
        kv.record_prefix_cache_stats(r, hit)
        admit(kv, r)
    assert (kv.stats.queries, kv.stats.hits, kv.stats.requests) == (96, 32, 2)


def test_invalid_arguments():
    with pytest.raises(ValueError, match="num_gpu_blocks"):
        BlockPool(1, True)
    with pytest.raises(ValueError, match="watermark"):
        KVCacheManager(10, 16, 64, watermark=1.0)
    kv = KVCacheManager(10, 16, 64)
    with pytest.raises(ValueError, match="num_new_tokens"):
        kv.allocate_slots(req("a", 4), 0)
