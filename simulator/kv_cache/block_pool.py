"""Block pool and free-block queue, mirroring vLLM 0.33 `block_pool.py` / `kv_cache_utils.py`.

Blocks are plain ints (block ids); per-block state lives in lists indexed by id. Block 0 is the
null block: taken out of the free queue at construction and never freed.

Free queue (vLLM `FreeKVCacheBlockQueue`), a doubly linked list over block ids:

    HEAD <-> b_a <-> b_b <-> ... <-> b_z <-> TAIL
     ^ new blocks are taken here            ^ freed *hashed* blocks are appended here (LRU)
     ^ freed *unhashed* blocks are prepended here, in the order given (reused first)

Eviction is implicit: a hashed block taken from the head for a new allocation loses its hash.
A cached block hit by a new request is removed from the middle of the queue (`touch`).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from operator import itemgetter


class FreeBlockQueue:
    """O(1) doubly linked list of free block ids in exact vLLM order (initially 0, 1, ..., n-1).

    The blocks never taken yet, ``fresh``, ``fresh + 1``, ..., n-1 (the rest of the initial
    order), are not linked one by one: one node, FRESH, stands for the whole run in the list, and
    taking from it is a range. (A block is taken from the run's front only, or by ``remove``,
    which links the run block by block first; freed blocks are linked as usual.)
    """

    def __init__(self, num_blocks: int) -> None:
        self._size = num_blocks
        self._head = num_blocks
        self._tail = num_blocks + 1
        self._fresh_node = num_blocks + 2
        self._fresh = 0                     # first block of the fresh run (num_blocks: none left)
        # prev/next of a linked block not in the queue, and of every fresh block, are -1.
        # array('q'): 8 bytes a link instead of a list slot + an int object (~10M blocks at 1k GPUs)
        self._prev = array("q", [-1]) * (num_blocks + 3)
        self._next = array("q", [-1]) * (num_blocks + 3)
        first = self._fresh_node if num_blocks else self._tail
        self._next[self._head] = first
        self._prev[first] = self._head
        self._next[first] = self._tail if num_blocks else -1
        self._prev[self._tail] = first
        self.num_free_blocks = num_blocks

    def __contains__(self, block_id: int) -> bool:
        return self._prev[block_id] != -1 or self._fresh <= block_id < self._size

    def _unlink_fresh_node(self) -> None:
        nxt, prev, node = self._next, self._prev, self._fresh_node
        p, n = prev[node], nxt[node]
        nxt[p] = n
        prev[n] = p
        prev[node] = nxt[node] = -1

    def _link_fresh_run(self) -> None:
        """Link the fresh run block by block in FRESH's place (before a fresh block is removed)."""
        nxt, prev = self._next, self._prev
        last, following = prev[self._fresh_node], nxt[self._fresh_node]
        self._unlink_fresh_node()
        for b in range(self._fresh, self._size):
            nxt[last] = b
            prev[b] = last
            last = b
        nxt[last] = following
        prev[following] = last
        self._fresh = self._size

    def popleft(self) -> int:
        """Take the first free block (the head)."""
        if not self.num_free_blocks:
            raise ValueError("cannot take 1 block, 0 free")
        nxt, prev = self._next, self._prev
        block = nxt[self._head]
        if block == self._fresh_node:
            block = self._fresh
            self._fresh = block + 1
            if block + 1 == self._size:
                self._unlink_fresh_node()
        else:
            following = nxt[block]
            nxt[self._head] = following
            prev[following] = self._head
            prev[block] = nxt[block] = -1
        self.num_free_blocks -= 1
        return block

    def popleft_n(self, n: int) -> list[int]:
        """Take the first n free blocks (head first)."""
        if n > self.num_free_blocks:
            raise ValueError(f"cannot take {n} blocks, {self.num_free_blocks} free")
        nxt, prev, fresh_node = self._next, self._prev, self._fresh_node
        out: list[int] = []
        cur = nxt[self._head]
        left = n
        while left:
            if cur == fresh_node:
                start = self._fresh
                stop = min(start + left, self._size)
                out += range(start, stop)
                left -= stop - start
                self._fresh = stop
                if stop < self._size:
                    break                   # the run stays first
            else:
                out.append(cur)
                left -= 1
            following = nxt[cur]
            prev[cur] = nxt[cur] = -1
            cur = following
        nxt[self._head] = cur
        prev[cur] = self._head
        self.num_free_blocks -= n
        return out

    def remove(self, block_id: int) -> None:
        if self._fresh <= block_id < self._size:
            self._link_fresh_run()
        p, n = self._prev[block_id], self._next[block_id]
        if p == -1:
            raise RuntimeError(f"block {block_id} is not in the free queue")
        self._next[p] = n
        self._prev[n] = p
        self._prev[block_id] = self._next[block_id] = -1
        self.num_free_blocks -= 1

    def append_n(self, blocks: Sequence[int]) -> None:
        """Put blocks at the tail, in order (the last one becomes the tail)."""
        nxt, prev = self._next, self._prev
        last = prev[self._tail]
        for b in blocks:
            nxt[last] = b
            prev[b] = last
            last = b
        nxt[last] = self._tail
        prev[self._tail] = last
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: Sequence[int]) -> None:
        """Put blocks at the head, keeping their order (blocks[0] becomes the head)."""
        if not blocks:
            return
        nxt, prv = self._next, self._prev
        first = nxt[self._head]
        prev = self._head
        for b in blocks:
            prv[b] = prev
            nxt[prev] = b
            prev = b
        nxt[prev] = first
        prv[first] = prev
        self.num_free_blocks += len(blocks)

    def order(self) -> list[int]:
        """Free block ids from head to tail (for tests and debugging; O(n))."""
        out, cur = [], self._next[self._head]
        while cur != self._tail:
            if cur == self._fresh_node:
                out += range(self._fresh, self._size)
            else:
                out.append(cur)
            cur = self._next[cur]
        return out


class BlockPool:
    """All KV blocks of one replica (one KV group), their reference counts and the prefix cache.

    `cached` maps a block hash to the blocks holding it, in insertion order; a lookup returns the
    first (vLLM `BlockHashToBlockMap.get_one_block`). Duplicates arise when two requests fill
    identical blocks at the same time; block tables stay append-only, so both are kept. As vLLM's
    map does, it stores a lone holder as the bare block id and only duplicates as a dict
    {block: block} (a dict per hash cost ~200 bytes a full block: GBs at 1k GPUs).
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool) -> None:
        if num_gpu_blocks < 2:
            raise ValueError(f"num_gpu_blocks={num_gpu_blocks}; must be >= 2 (block 0 is the null block)")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_gpu_blocks
        self.block_hash: list[int | None] = [None] * num_gpu_blocks
        self.cached: dict[int, int | dict[int, int]] = {}
        self.free_queue = FreeBlockQueue(num_gpu_blocks)
        self.null_block = self.free_queue.popleft_n(1)[0]

    @property
    def num_free_blocks(self) -> int:
        return self.free_queue.num_free_blocks

    def usage(self) -> float:
        """Fraction of usable blocks (all but the null block) not in the free queue."""
        return 1.0 - self.num_free_blocks / (self.num_gpu_blocks - 1)

    def get_cached_block(self, block_hash: int) -> int | None:
        blocks = self.cached.get(block_hash)
        if blocks is None or type(blocks) is int:
            return blocks
        return next(iter(blocks)) if blocks else None

    def get_new_blocks(self, n: int) -> list[int]:
        """Take n blocks from the head of the free queue, evicting their cached hashes.

        A free block holds no reference, so each new block's count becomes 1."""
        ref, block_hash = self.ref_cnt, self.block_hash
        if n == 1:                          # a decode's next block
            b = self.free_queue.popleft()
            if block_hash[b] is not None and self.enable_caching:
                self._evict(b)
            ref[b] = 1
            return [b]
        blocks = self.free_queue.popleft_n(n)
        if n and self.enable_caching:      # n > 1: itemgetter gives a tuple
            hashes = itemgetter(*blocks)(block_hash)
            num_unhashed = hashes.count(None)
            if num_unhashed == 0 and list(map(self.cached.get, hashes)) == blocks:
                # every block is its hash's only holder (the usual eviction): drop them all
                cached = self.cached
                for h in hashes:
                    del cached[h]
                for b in blocks:
                    block_hash[b] = None
                    ref[b] = 1
                return blocks
            if num_unhashed < n:
                for b in blocks:
                    if block_hash[b] is not None:
                        self._evict(b)
        for b in blocks:
            ref[b] = 1
        return blocks

    def touch(self, blocks: Iterable[int]) -> None:
        """A prefix hit: take free blocks out of the queue and add a reference."""
        ref = self.ref_cnt
        for b in blocks:
            if ref[b] == 0:
                self.free_queue.remove(b)
            ref[b] += 1

    def free_blocks(self, ordered_blocks: Iterable[int]) -> None:
        """Drop one reference per block; blocks reaching 0 go back to the queue.

        Order = eviction priority (first evicted first). Unhashed ones are prepended (reused first,
        vLLM 0.33), hashed ones appended (LRU).
        """
        first, last = [], []
        ref, block_hash, caching, null = self.ref_cnt, self.block_hash, self.enable_caching, self.null_block
        for b in ordered_blocks:
            if b == null:
                continue
            c = ref[b] - 1
            ref[b] = c
            if c == 0:
                if block_hash[b] is None or not caching:
                    first.append(b)
                else:
                    last.append(b)
        self.free_queue.prepend_n(first)
        self.free_queue.append_n(last)

    def cache_blocks(self, blocks: Sequence[int], hashes: Sequence[int], start: int, stop: int) -> None:
        """Register newly full blocks[start:stop] under hashes[start:stop] (vLLM `_insert_block_hash`
        per block)."""
        block_hash, cached = self.block_hash, self.cached
        n = stop - start
        if n == 1:                          # a decode's filled block
            block, h = blocks[start], hashes[start]
            current = block_hash[block]
            if current is None:
                block_hash[block] = h
                holders = cached.setdefault(h, block)
                if holders is not block:    # the hash is held already: one more holder
                    self._add_holder(h, block)
                return
        elif n > 1:
            # Bulk (a prompt's blocks), none registered yet: each hash is inserted where it is
            # new, in order (the loop below with its holder look-up missing); the blocks of the
            # hashes held already (by other blocks, or earlier in this run) are added to their
            # holders afterwards, in order: the same map, in the same order, as the loop.
            new_blocks, new_hashes = blocks[start:stop], hashes[start:stop]
            if itemgetter(*new_blocks)(block_hash).count(None) == n:
                for b, h in zip(new_blocks, new_hashes):
                    block_hash[b] = h
                held = list(map(cached.setdefault, new_hashes, new_blocks))
                if held != new_blocks:
                    for h, b, holders in zip(new_hashes, new_blocks, held):
                        if holders is not b:
                            self._add_holder(h, b)
                return
        for i in range(start, stop):
            block, h = blocks[i], hashes[i]
            current = block_hash[block]
            if current == h:
                continue
            assert current is None, f"block {block} already has another hash"
            block_hash[block] = h
            if cached.setdefault(h, block) is not block:
                self._add_holder(h, block)

    def _add_holder(self, h: int, block: int) -> None:
        """``block`` holds hash ``h`` too (another block holds it): keep both, in insertion order."""
        holders = self.cached[h]
        if type(holders) is int:
            self.cached[h] = {holders: holders, block: block}
        else:
            holders[block] = block

    def uncache(self, block: int) -> None:
        """Drop ``block``'s hash, if any (vLLM ``_maybe_evict_cached_block``): its content is no
        longer what the hash promises."""
        if self.block_hash[block] is not None:
            self._evict(block)

    def _evict(self, block: int) -> None:
        h = self.block_hash[block]
        holders = self.cached.get(h)
        if type(holders) is int:
            if holders == block:
                del self.cached[h]
        elif holders is not None:
            holders.pop(block, None)
            if not holders:
                del self.cached[h]
        self.block_hash[block] = None

    def check_invariants(self, held: int) -> None:
        """Raise if blocks are not conserved: free + referenced == total - 1 (null block)."""
        referenced = sum(1 for r in self.ref_cnt if r > 0)
        if self.num_free_blocks + referenced != self.num_gpu_blocks - 1:
            raise AssertionError(
                f"blocks not conserved: free {self.num_free_blocks} + referenced {referenced} "
                f"!= {self.num_gpu_blocks - 1}"
            )
        total_refs = sum(self.ref_cnt)
        if total_refs != held:
            raise AssertionError(f"sum(ref_cnt)={total_refs} != blocks held by requests {held}")
        if any(r < 0 for r in self.ref_cnt):
            raise AssertionError("negative reference count")
