"""`BlockPool.cache_blocks` registers a run of blocks in bulk when it can; same state as one by one."""

import random

import pytest

from simulator.kv_cache.block_pool import BlockPool


@pytest.mark.parametrize("seed", range(20))
def test_bulk_cache_blocks_equals_block_by_block(seed):
    rng = random.Random(seed)
    bulk, single = BlockPool(64, True), BlockPool(64, True)
    for _ in range(12):
        n = rng.randint(1, 8)
        blocks = bulk.get_new_blocks(n)
        assert single.get_new_blocks(n) == blocks
        hashes = [rng.randrange(12) for _ in range(n)]     # repeats within and across calls
        start = rng.randint(0, n - 1)
        if rng.random() < 0.3:                            # some already registered, same hash
            single.cache_blocks(blocks, hashes, start, start + 1)
            bulk.cache_blocks(blocks, hashes, start, start + 1)
        bulk.cache_blocks(blocks, hashes, start, n)
        for i in range(start, n):
            single.cache_blocks(blocks, hashes, i, i + 1)
        assert bulk.block_hash == single.block_hash
        assert list(bulk.cached.items()) == list(single.cached.items())
        if rng.random() < 0.5:
            bulk.free_blocks(reversed(blocks))
            single.free_blocks(reversed(blocks))
            assert bulk.free_queue.order() == single.free_queue.order()


def test_bulk_cache_blocks_takes_the_bulk_path_for_fresh_hashes():
    pool = BlockPool(16, True)
    blocks = pool.get_new_blocks(4)
    pool.cache_blocks(blocks, [10, 11, 12, 13], 0, 4)
    assert pool.cached == {10: blocks[0], 11: blocks[1], 12: blocks[2], 13: blocks[3]}
    assert [pool.block_hash[b] for b in blocks] == [10, 11, 12, 13]
