"""KV cache manager for one full-attention KV group, mirroring vLLM 0.33 `KVCacheManager` +
`UnitaryKVCacheCoordinator` + `FullAttentionManager` (sliding-window groups: `hybrid.py`; the KV
connector's async-load allocation of P/D disaggregation is supported: external tokens, delayed
caching, reserved blocks).

Slot arithmetic of `allocate_slots` (bs = block_size):

    | computed (c) | new prefix hit (h) | external (e) | new tokens (n) | lookahead (L) |
    need_slots   = min(c + h + e + n + L, max_model_len)
    new_blocks   = max(ceil(need_slots / bs) - held - len(hit_blocks), 0)
                   + hit blocks currently free (ref 0: touching takes them out of the free queue)
    refuse when new_blocks + watermark > free blocks - reserved (watermark: waiting/preempted only)
    cache (hash-register) full blocks up to min(c + h + e + n, num_tokens), unless delayed (P/D)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from simulator.kv_cache.block_pool import BlockPool
from simulator.request import Request, RequestStatus


_ADMIT_STATUSES = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class PrefixCacheStats:
    """Counted at admission (vLLM `record_prefix_cache_stats`): queries += num_tokens, hits += hit."""

    queries: int = 0
    hits: int = 0
    requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0
    preempted_requests: int = 0


class KVCacheManager:
    """Block tables per request over a `BlockPool`.

    num_gpu_blocks: blocks in the pool including the null block 0 (usable = num_gpu_blocks - 1).
    watermark: fraction of num_gpu_blocks kept free when admitting waiting/preempted requests.
    """

    inline_allocation = True    # one full-attention group: the scheduler may allocate inline
    aligned_prefill = False     # True: the scheduler cuts prefill chunks with split_chunk (GDN align mode)
    num_state_groups = 0        # Gated DeltaNet state groups beside the attention table (state managers)

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        enable_prefix_caching: bool = True,
        watermark: float = 0.0,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size={block_size}; must be >= 1")
        if max_model_len < 1:
            raise ValueError(f"max_model_len={max_model_len}; must be >= 1")
        if not 0.0 <= watermark < 1.0:
            raise ValueError(f"watermark={watermark}; must be in [0, 1)")
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_prefix_caching
        self.pool = BlockPool(num_gpu_blocks, enable_prefix_caching)
        self.watermark_blocks = int(watermark * num_gpu_blocks)
        self.req_to_blocks: dict[str, list[int]] = {}
        self.num_cached_block: dict[str, int] = {}
        self.stats = PrefixCacheStats()
        # P/D with async scheduling (vLLM defer_block_free): (fence step, blocks) freed once the
        # step with that sequence number has been processed. Empty otherwise.
        self.deferred_frees: deque[tuple[int, list[int]]] = deque()
        # vLLM's EAGLE block drop (speculative decoding behind a KV connector, whose block hashes
        # cover no token after the block): a prefix hit gives up its last block, whose hidden
        # states the drafter must recompute. Set by the scheduler.
        self.drop_last_hit_block = False

    @property
    def num_gpu_blocks(self) -> int:
        return self.pool.num_gpu_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def usage(self) -> float:
        """KV usage as vLLM reports it: 1 - free / (num_gpu_blocks - 1)."""
        return self.pool.usage()

    def get_block_ids(self, request_id: str) -> list[int]:
        return list(self.req_to_blocks.get(request_id, ()))

    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """Longest cached prefix of whole blocks, capped at num_tokens - 1 tokens.

        Returns (hit blocks, hit tokens). A 32-token prompt with block 16 hits 16 (the last token
        must be recomputed for logits, and hits are whole blocks); a 33-token prompt hits 32, or 16
        with ``drop_last_hit_block``.
        """
        if not self.enable_caching:
            return [], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        hashes = request.block_hashes
        blocks: list[int] = []
        get = self.pool.get_cached_block
        for i in range(min(max_blocks, len(hashes))):
            b = get(hashes[i])
            if b is None:
                break
            blocks.append(b)
        if self.drop_last_hit_block and blocks:
            blocks.pop()
        return blocks, len(blocks) * self.block_size

    def record_prefix_cache_stats(self, request: Request, num_hits: int) -> None:
        if not self.enable_caching:
            return
        s = self.stats
        if request.num_preemptions > 0:
            s.preempted_queries += request.num_tokens
            s.preempted_hits += num_hits
            s.preempted_requests += 1
        else:
            s.queries += request.num_tokens
            s.hits += num_hits
            s.requests += 1

    def _num_blocks_to_allocate(self, request_id: str, num_tokens: int, hit_blocks: list[int]) -> int:
        held = len(self.req_to_blocks.get(request_id, ()))
        need = max(cdiv(num_tokens, self.block_size) - held - len(hit_blocks), 0)
        ref = self.pool.ref_cnt
        return need + sum(1 for b in hit_blocks if ref[b] == 0)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: list[int] | None = None,
        num_lookahead_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        has_scheduled_reqs: bool = True,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> list[int] | None:
        """Give the request slots for `num_new_tokens` more tokens; None if the pool is too full.

        new_computed_blocks / num_new_computed_tokens: the prefix hit of a request being admitted.
        full_sequence_must_fit: admission gate of 0.33 (`scheduler_reserve_full_isl`): first check
        that blocks for min(num_tokens, max_model_len) tokens (minus hits) + watermark are free.
        has_scheduled_reqs: whether any request is running; the watermark applies only then.
        P/D decode side (KV connector async load), all 0/False otherwise:
        num_external_computed_tokens: tokens whose KV a connector will write into new blocks
            (allocated here, after the hit blocks); delay_cache_blocks: do not hash-register
            anything yet (the scheduler caches once the transfer is done); reserved_blocks:
            free blocks that must stay free for in-flight prefills (vLLM's reservation gate).
        Returns the newly allocated block ids (possibly empty).
        """
        if num_new_tokens == 0 and num_new_computed_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError("num_new_tokens must be > 0 when there are no computed tokens to adopt")
        rid = request.request_id
        held_blocks = self.req_to_blocks.get(rid)
        if held_blocks is not None and not full_sequence_must_fit and not new_computed_blocks:
            return self._allocate_running(request, held_blocks, num_new_tokens, num_lookahead_tokens, has_scheduled_reqs)
        hit_blocks = new_computed_blocks or []
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external_computed_tokens, self.max_model_len)
        watermark = 0
        if has_scheduled_reqs and request.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED):
            watermark = self.watermark_blocks
        free = self.pool.num_free_blocks
        if full_sequence_must_fit:
            full = min(request.num_tokens, self.max_model_len)
            if self._num_blocks_to_allocate(rid, full, hit_blocks) + watermark > free:
                return None
        num_main = total_computed + num_new_tokens
        need_slots = min(num_main + num_lookahead_tokens, self.max_model_len)
        if self._num_blocks_to_allocate(rid, need_slots, hit_blocks) + watermark > free - reserved_blocks:
            return None

        blocks = self.req_to_blocks.setdefault(rid, [])
        if hit_blocks:
            self.pool.touch(hit_blocks)
            blocks.extend(hit_blocks)
            self.num_cached_block[rid] = request.kv_num_cached_blocks = len(blocks)
        num_new = cdiv(need_slots, self.block_size) - len(blocks)
        new_blocks = self.pool.get_new_blocks(num_new) if num_new > 0 else []
        blocks.extend(new_blocks)
        request.kv_num_blocks = len(blocks)
        if self.enable_caching and not delay_cache_blocks:
            self.cache_blocks(request, min(total_computed + num_new_tokens, request.num_tokens))
        return new_blocks

    def _allocate_running(
        self, request: Request, blocks: list[int], num_new_tokens: int, lookahead: int, has_scheduled_reqs: bool
    ) -> list[int] | None:
        """Fast path of `allocate_slots` for a request that already holds blocks (same result)."""
        # Runs once per running request per step: written out without helper calls.
        bs, max_len = self.block_size, self.max_model_len
        c = request.num_computed_tokens
        num_main = (c if c < max_len else max_len) + num_new_tokens
        need = num_main + lookahead
        num_new = -(-(need if need < max_len else max_len) // bs) - len(blocks)
        watermark = 0
        if has_scheduled_reqs and request.status in _ADMIT_STATUSES:
            watermark = self.watermark_blocks
        if num_new > 0 or watermark:        # else 0 > free blocks: never refused
            if max(num_new, 0) + watermark > self.pool.num_free_blocks:
                return None
        if num_new > 0:
            new_blocks = self.pool.get_new_blocks(num_new)
            blocks.extend(new_blocks)
            request.kv_num_blocks = len(blocks)
        else:
            new_blocks = []
        if self.enable_caching:
            num_full = min(num_main, request.prompt_len + request.num_output_tokens,
                           len(request.block_hashes) * bs) // bs
            if num_full > request.kv_num_cached_blocks:
                self.cache_blocks(request, num_full * bs)
        return new_blocks

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Hash-register the request's full blocks covering its first `num_tokens` tokens."""
        if not self.enable_caching:
            return
        rid = request.request_id
        num_cached = request.kv_num_cached_blocks
        num_full = min(num_tokens, len(request.block_hashes) * self.block_size) // self.block_size
        if num_cached >= num_full:
            return
        self.pool.cache_blocks(self.req_to_blocks[rid], request.block_hashes, num_cached, num_full)
        self.num_cached_block[rid] = request.kv_num_cached_blocks = num_full

    def _pop_blocks(self, request: Request) -> list[int]:
        """vLLM `pop_blocks_for_free`: the request's blocks in allocation order; its bookkeeping is
        forgotten."""
        blocks = self.req_to_blocks.pop(request.request_id, [])
        self.num_cached_block.pop(request.request_id, None)
        request.kv_num_blocks = request.kv_num_cached_blocks = 0
        return blocks

    def free(self, request: Request) -> None:
        """Release the request's blocks, tail first (so a chain's tail is evicted first)."""
        self.pool.free_blocks(reversed(self._pop_blocks(request)))

    def defer_free(self, request: Request, fence_seq: int) -> None:
        """vLLM `_free_request_blocks` when a step still in flight may write the blocks: drop the
        request's bookkeeping now, return the blocks to the pool once step `fence_seq` is processed."""
        blocks = self._pop_blocks(request)
        if blocks:
            self.deferred_frees.append((fence_seq, blocks))

    def connector_finished(self, request: Request) -> None:
        """vLLM `_connector_finished`'s out-of-window free: nothing lies outside a full-attention
        window (`HybridKVCacheManager` frees its sliding groups' here)."""

    def remaining_blocks(self, request: Request, extra_tokens: int = 0) -> int:
        """vLLM `_request_remaining_blocks`: blocks the request still needs for its whole sequence
        (+ ``extra_tokens``: a verify step's with speculative decoding)."""
        need = min(request.num_tokens, self.max_model_len) + extra_tokens
        return max(cdiv(need, self.block_size) - len(self.req_to_blocks.get(request.request_id, ())), 0)

    def drain_deferred_frees(self, processed_seq: int) -> None:
        """vLLM `_drain_deferred_frees`: free (tail first) every entry whose fence is processed,
        stopping at the first pending one."""
        q = self.deferred_frees
        while q and q[0][0] <= processed_seq:
            _, blocks = q.popleft()
            self.pool.free_blocks(reversed(blocks))

    def check_invariants(self, requests: Iterable[Request] = ()) -> None:
        """Raise if blocks are not conserved, or a request's block counts disagree with the tables."""
        for r in requests:
            blocks, cached = self.req_to_blocks.get(r.request_id, ()), self.num_cached_block.get(r.request_id, 0)
            if (r.kv_num_blocks, r.kv_num_cached_blocks) != (len(blocks), cached):
                raise AssertionError(f"{r}: kv_num_blocks/kv_num_cached_blocks {r.kv_num_blocks}/"
                                     f"{r.kv_num_cached_blocks} != table {len(blocks)}/{cached}")
        self.pool.check_invariants(self._num_held_blocks())

    def _num_held_blocks(self) -> int:
        """Blocks out of the free queue: the requests' tables and the deferred frees."""
        return sum(len(b) for b in self.req_to_blocks.values()) + sum(len(b) for _, b in self.deferred_frees)
