"""SGLang radix cache mirror (simulator/sglang_radix.py): match, insert, locks, LRU eviction."""

from array import array

import pytest

from simulator.sglang_radix import RadixCache, TokenPool, common_prefix_len


def a(*xs: int) -> array:
    return array("q", xs)


def stored(cache: RadixCache, key: array) -> None:
    """Insert key as a request would: allocate its slots, free the duplicates."""
    cache.pool.alloc(len(key))
    done, _ = cache.insert(key)
    cache.pool.free(done)


def test_common_prefix_len():
    assert common_prefix_len(a(1, 2, 3, 4), a(1, 2, 9, 4)) == 2
    assert common_prefix_len(a(1, 2, 3), a(1, 2, 3, 4)) == 3
    assert common_prefix_len(a(5), a(6)) == 0
    assert common_prefix_len(array("q", range(1000)), array("q", list(range(999)) + [7])) == 999


def test_insert_match_split_and_sizes():
    cache = RadixCache(TokenPool(100))
    stored(cache, a(1, 2, 3, 4, 5))
    assert cache.pool.available == 95 and cache.evictable_size == 5
    stored(cache, a(1, 2, 3, 9))           # splits [1..5] after 3; adds [9]
    assert cache.pool.available == 94 and cache.evictable_size == 6
    n, node = cache.match_prefix(a(1, 2, 7))
    assert n == 2 and list(node.key) == [1, 2]      # the match ended inside [1, 2, 3]: split again
    assert cache.total_size() == 6
    done, _ = cache.insert(a(1, 2, 3, 4, 5, 6))
    assert done == 5 and cache.evictable_size == 7


def test_locks_move_tokens_between_evictable_and_protected():
    cache = RadixCache(TokenPool(100))
    stored(cache, a(1, 2, 3, 4))
    _, node = cache.match_prefix(a(1, 2, 3, 4))
    cache.inc_lock_ref(node)
    assert (cache.evictable_size, cache.protected_size) == (0, 4)
    assert cache.evict(10) == 0                 # locked: nothing to evict
    stored(cache, a(1, 2, 8))                   # [1,2] shared and locked, [3,4] locked, [8] free
    assert (cache.evictable_size, cache.protected_size) == (1, 4)
    cache.dec_lock_ref(node)
    assert (cache.evictable_size, cache.protected_size) == (5, 0)


def test_evict_lru_leaf_then_parent():
    cache = RadixCache(TokenPool(100))
    stored(cache, a(1, 2, 3))
    stored(cache, a(1, 2, 4, 4))
    stored(cache, a(7, 7))
    cache.match_prefix(a(7, 7))                 # [7, 7] most recent; [3] least recent leaf
    assert cache.evict(1) == 1                  # [3] goes
    assert cache.match_prefix(a(1, 2, 3))[0] == 2
    # the match just touched [1, 2]: [4, 4] goes, then [7, 7] (touched before), not [1, 2]
    assert cache.evict(3) == 4
    assert cache.match_prefix(a(1, 2, 4, 4))[0] == 2
    assert cache.match_prefix(a(7, 7))[0] == 0
    assert cache.pool.available == 98 and cache.evictable_size == 2


def test_evict_to_free_evicts_only_the_shortfall():
    cache = RadixCache(TokenPool(10))
    stored(cache, a(1, 2, 3, 4))
    stored(cache, a(5, 6, 7, 8))
    assert cache.pool.available == 2
    cache.evict_to_free(2)
    assert cache.pool.available == 2            # no shortfall
    cache.evict_to_free(5)                      # shortfall 3: the LRU leaf [1, 2, 3, 4] (all 4 tokens)
    assert cache.pool.available == 6 and cache.match_prefix(a(5, 6, 7, 8))[0] == 4


def test_pool_refuses_overdraw_and_double_free():
    pool = TokenPool(4)
    with pytest.raises(RuntimeError, match="allocating 5 slots with 4 free"):
        pool.alloc(5)
    with pytest.raises(RuntimeError, match="double free"):
        pool.free(1)


def _all_nodes(cache: RadixCache) -> list:
    out, stack = [], list(cache.root.children.values())
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(node.children.values())
    return out


def _reference_evict(cache: RadixCache, num_tokens: int) -> list[int]:
    """SGLang's eviction as written (a heap over every unlocked leaf, built per call): the ids of
    the nodes it would evict, in order, without evicting them."""
    import heapq
    heap = [(n.last_access, n.nid, n) for n in cache.evictable_leaves()]
    heapq.heapify(heap)
    removed, freed, order = set(), 0, []
    while freed < num_tokens and heap:
        _, _, node = heapq.heappop(heap)
        removed.add(node.nid)
        order.append(node.nid)
        freed += len(node.key)
        parent = node.parent
        if (parent is not cache.root and parent.lock_ref == 0
                and all(c.nid in removed for c in parent.children.values())):
            heapq.heappush(heap, (parent.last_access, parent.nid, parent))
    return order


def test_the_lazy_heap_evicts_as_a_fresh_heap_would():
    """Random inserts, matches (splits, touches), locks and evictions: every eviction removes the
    nodes a heap built over all unlocked leaves at that moment (SGLang's) removes."""
    import random
    rng = random.Random(7)
    cache = RadixCache(TokenPool(10_000))
    locked, evictions = [], 0
    for _ in range(3000):
        op = rng.random()
        key = array("q", [rng.randint(0, 3) for _ in range(rng.randint(1, 12))])
        if op < 0.4 and cache.pool.available > 50:
            stored(cache, key)
        elif op < 0.7:
            n, node = cache.match_prefix(key)
            if n and rng.random() < 0.3:
                cache.inc_lock_ref(node)
                locked.append(node)
        elif op < 0.85 and locked:
            cache.dec_lock_ref(locked.pop(rng.randrange(len(locked))))
        else:
            want = rng.randint(1, 20)
            expected = _reference_evict(cache, want)
            before = _all_nodes(cache)
            freed = cache.evict(want)
            gone = {n.nid for n in before if n.parent is None}
            assert gone == set(expected) and freed == sum(len(n.key) for n in before if n.nid in gone)
            evictions += bool(expected)
    assert evictions > 100
    assert cache.pool.available + cache.total_size() == 10_000
