"""`BlockPool.get_new_blocks`' one-block and bulk-eviction paths and `cache_blocks`' one-block and
bulk paths leave the pool exactly as the plain block-by-block loops do (random requests on small
pools, so blocks are evicted and hit, and hashes repeat within and across requests)."""

import random

import pytest

from simulator.kv_cache.block_pool import BlockPool


class _PlainPool(BlockPool):
    """Reference: take blocks one by one, evicting each block's hash on its own; register them
    one by one."""

    def get_new_blocks(self, n: int) -> list[int]:
        blocks = self.free_queue.popleft_n(n)
        for b in blocks:
            if self.enable_caching and self.block_hash[b] is not None:
                self._evict(b)
            self.ref_cnt[b] += 1
        return blocks

    def cache_blocks(self, blocks, hashes, start: int, stop: int) -> None:
        for i in range(start, stop):
            block, h = blocks[i], hashes[i]
            if self.block_hash[block] == h:
                continue
            assert self.block_hash[block] is None
            self.block_hash[block] = h
            holders = self.cached.get(h)
            if holders is None:
                self.cached[h] = block
            elif type(holders) is int:
                self.cached[h] = {holders: holders, block: block}
            else:
                holders[block] = block


def _state(pool: BlockPool) -> tuple:
    cached = [(h, dict(v) if isinstance(v, dict) else v) for h, v in pool.cached.items()]
    return list(pool.ref_cnt), list(pool.block_hash), cached, pool.free_queue.order()


@pytest.mark.parametrize("seed", range(30))
def test_fast_paths_equal_the_block_by_block_loop(seed):
    rng = random.Random(seed)
    caching = seed % 5 != 0
    pools = [BlockPool(40, caching), _PlainPool(40, caching)]
    held: list[list[int]] = []
    evictions = 0
    for _ in range(200):
        if held and (rng.random() < 0.4 or pools[0].num_free_blocks < 8):
            blocks = held.pop(rng.randrange(len(held)))
            for pool in pools:
                pool.free_blocks(reversed(blocks))
        else:
            n = rng.choice([1, 1, 2, rng.randint(3, 8)])
            hits = []
            if caching and rng.random() < 0.3:      # a prefix hit on cached blocks (some free, some held)
                hits = [b for b in (pools[0].get_cached_block(h) for h in range(12)) if b is not None][:3]
                for pool in pools:
                    pool.touch(hits)
            evictions += sum(pools[0].block_hash[b] is not None for b in pools[0].free_queue.order()[:n])
            new = [pool.get_new_blocks(n) for pool in pools]
            assert new[0] == new[1]
            blocks = hits + new[0]
            hashes = [rng.randrange(12) if rng.random() < 0.5 else rng.randrange(10**6) for _ in blocks]
            num_full = rng.randint(len(hits), len(blocks))
            for pool in pools:
                if caching:                 # (the manager registers nothing without caching)
                    pool.cache_blocks(blocks, hashes, len(hits), num_full)
            held.append(blocks)
        assert _state(pools[0]) == _state(pools[1])
    assert evictions > 0 or not caching
