"""KV cache manager for models with sliding-window or chunked local-attention layers, mirroring
vLLM 0.33's hybrid KV cache (`HybridKVCacheCoordinator` / `KVCacheCoordinatorNoPrefixCache` /
`UnitaryKVCacheCoordinator` over `FullAttentionManager`, `SlidingWindowManager` and
`ChunkedLocalAttentionManager`).

A model such as gpt-oss (sliding, full, sliding, ...; or Gemma 3's five sliding layers to one
full) has several KV cache groups over ONE block pool (`simulator.memory.kv_layout`): each group
keeps its own block table per request, and every group takes blocks for each new token. A full group
holds a request's blocks until it finishes; a sliding group of window W frees the blocks wholly
before the window (replaced by the null block 0) every time the request is given slots:

    skipped tokens = max(0, processed - W + 1),  processed = computed - in flight (async steps)
    blocks needed by a group   = ceil(slots / block_size) - held   (held counts its null blocks)
    a request's admission gate = full groups' blocks for the whole sequence + each sliding group's
                                 min(that, cap), cap = ceil(min(W - 1 + in-flight tokens, L) / bs) + 1

so a request costs ceil(tokens / bs) per full group plus ~W / bs per sliding group in a long
decode, and every token of a prefill chunk in each group until the next step frees it.

Prefix caching (vLLM 0.33 defaults: hits at block granularity, sparse retention
``prefix_cache_retention_interval = 0``): block hashes are keyed per group; a full group caches
every full block, a sliding group only the ceil((W - 1) / bs) blocks that end at the replay
boundary (the prompt's last token, ``(prompt - 1) // bs`` blocks) and at a shared-prefix junction
(the longest full-attention hit when a sliding group hit less). A hit is the full groups' longest
run of cached blocks from the left (all full groups), then the sliding groups' rightmost run of
ceil((W - 1) / bs) cached blocks within it (blocks left of the run are null); the full groups are
cut to that length (vLLM's "simple hybrid": one full type plus one other).

Llama 4's chunked groups (``chunked``; chunks of C = W tokens) follow the same rules with the
chunk for the window: skipped tokens = processed // C x C (a chunk's blocks are freed together
once the next token lies past it), admission cap ceil(min(C + in-flight tokens, L) / bs), every
full block cached (no sparse retention), and a hit is null blocks up to the last chunk's start
within the full groups' hit, then cached blocks left to right from it.

P/D decode side (a KV connector, as vLLM's NixlConnector with HMA): the pulled tokens take blocks
only inside each sliding group's window, and a finished request's out-of-window blocks are freed
before its table goes to the connector (`connector_finished`). EAGLE drafts (co-located): lookahead
slots in every group; with prefix caching vLLM hashes a block with the token after it, which keeps
the coordinator's lookup as without a drafter. Speculative decoding behind a KV connector keeps
the one-group `KVCacheManager` (the sliding groups are not charged; see the README's limits).
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.kv_cache.manager import KVCacheManager, cdiv
from simulator.request import Request, RequestStatus

_ADMIT_STATUSES = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


def skipped_tokens(tokens: int, window: int, chunked: bool) -> int:
    """vLLM `get_num_skipped_tokens` of a local group (sliding window, or ``chunked`` attention
    chunks, of ``window`` tokens) after ``tokens`` computed tokens: the tokens no later query
    attends (sliding: before the window of the next token; chunked: before its chunk)."""
    if chunked:
        return tokens // window * window
    return max(0, tokens - window + 1)


class HybridKVCacheManager(KVCacheManager):
    """Block tables per KV cache group over one `BlockPool`.

    group_windows: one entry per vLLM KV cache group, in vLLM's group order (the kind of layer 0
        first): 0 = full attention, W > 0 = a local group of W tokens (one W for all): a sliding
        window, or with ``chunked`` Llama 4's attention chunks (`ChunkedLocalAttentionManager`).
    max_in_flight_tokens: VllmConfig.max_in_flight_tokens (concurrent batches x token budget),
        for the local groups' admission cap.
    """

    inline_allocation = False     # the scheduler's inline fast paths assume one full group (lazy decode
                                  # visits call grow_running instead)

    def __init__(
        self,
        num_gpu_blocks: int,
        block_size: int,
        max_model_len: int,
        group_windows: tuple[int, ...],
        max_in_flight_tokens: int,
        enable_prefix_caching: bool = True,
        watermark: float = 0.0,
        chunked: bool = False,
    ) -> None:
        super().__init__(num_gpu_blocks, block_size, max_model_len, enable_prefix_caching, watermark)
        windows = {w for w in group_windows if w}
        if not windows or len(windows) > 1 or any(w < 0 for w in group_windows):
            raise ValueError(f"group_windows={group_windows}; need one sliding window > 0 (0 = full attention)")
        if max_in_flight_tokens < 1:
            raise ValueError(f"max_in_flight_tokens={max_in_flight_tokens}; must be >= 1")
        self.group_windows = tuple(group_windows)
        self.window = windows.pop()
        self.chunked = chunked
        self.full_groups = [g for g, w in enumerate(group_windows) if not w]
        self.local_groups = [g for g, w in enumerate(group_windows) if w]     # sliding or chunked
        # tables[g][request id]: group g's block table (sliding: null blocks before the window)
        self.tables: list[dict[str, list[int]]] = [{} for _ in group_windows]
        # cached[g][request id]: vLLM num_cached_block (membership marks a running request)
        self.cached: list[dict[str, int]] = [{} for _ in group_windows]
        self.junction: dict[str, int] = {}          # request.shared_prefix_boundary
        self.nulls: dict[str, int] = {}             # leading null blocks of a request's sliding tables
        self.req_to_blocks = self.tables[self.full_groups[0] if self.full_groups else 0]
        if chunked:     # ChunkedLocalAttentionSpec.max_admission_blocks_per_request
            self.admission_cap = cdiv(min(self.window + max_in_flight_tokens, max_model_len), block_size)
        else:           # SlidingWindowSpec's
            self.admission_cap = cdiv(min(self.window - 1 + max_in_flight_tokens, max_model_len), block_size) + 1
        self.hit_run = cdiv(self.window - 1, block_size)     # contiguous blocks a sliding hit needs

    def _skipped(self, tokens: int) -> int:
        return skipped_tokens(tokens, self.window, self.chunked)

    # ------------------------------------------------------------------ lookup
    def get_computed_blocks(self, request: Request) -> tuple[tuple[list[int], ...], int]:
        """Per-group hit blocks and the hit length (tokens), capped at num_tokens - 1; sets the
        request's shared-prefix junction (vLLM `get_computed_blocks`)."""
        empty = tuple([] for _ in self.group_windows)
        if not self.enable_caching:
            return empty, 0
        bs, hashes, pool = self.block_size, request.block_hashes, self.pool
        max_len = request.num_tokens - 1
        hits: list[list[int]] = [[] for _ in self.group_windows]
        length = max_len
        if self.full_groups:            # FullAttentionManager.find_longest_cache_hit: left to right
            for i in range(min(max_len // bs, len(hashes))):
                found = [pool.get_cached_block((hashes[i], g)) for g in self.full_groups]
                if None in found:
                    break
                for g, b in zip(self.full_groups, found):
                    hits[g].append(b)
            length = len(hits[self.full_groups[0]]) * bs
        longest = length if self.full_groups else 0
        run = self._chunked_run(hashes, length) if self.chunked else self._sliding_run(hashes, length)
        length = len(run[0]) * bs
        for g, blocks in zip(self.local_groups, run):
            hits[g] = blocks
        for g in self.full_groups:
            del hits[g][cdiv(length, bs):]
        self.junction[request.request_id] = longest if longest > length else 0
        return tuple(hits), length

    def _sliding_run(self, hashes: list, length: int) -> list[list[int]]:
        """`SlidingWindowManager.find_longest_cache_hit` within the full groups' hit of ``length``
        tokens, per sliding group: right to left, the first run of hit_run cached blocks (null
        blocks before it), or a shorter run at the start."""
        pool, n = self.pool, length // self.block_size
        groups = self.local_groups
        run: list[list[int]] = [[pool.null_block] * n for _ in groups]
        contiguous = 0
        for i in range(n - 1, -1, -1):
            found = [pool.get_cached_block((hashes[i], g)) for g in groups]
            if None in found:
                contiguous = 0
                continue
            for blocks, b in zip(run, found):
                blocks[i] = b
            contiguous += 1
            if contiguous >= self.hit_run:
                for blocks in run:
                    del blocks[i + contiguous:]
                return run
        for blocks in run:              # a run at the start counts even if shorter
            del blocks[contiguous:]
        return run

    def _chunked_run(self, hashes: list, length: int) -> list[list[int]]:
        """`ChunkedLocalAttentionManager.find_longest_cache_hit` within the full groups' hit of
        ``length`` tokens, per chunked group: null blocks before the last chunk's start, then
        cached blocks left to right from it."""
        pool, bs = self.pool, self.block_size
        start = length // self.window * self.window // bs if length > 0 else 0
        groups = self.local_groups
        run: list[list[int]] = [[pool.null_block] * start for _ in groups]
        for i in range(start, length // bs):
            found = [pool.get_cached_block((hashes[i], g)) for g in groups]
            if None in found:
                break
            for blocks, b in zip(run, found):
                blocks.append(b)
        return run

    # ------------------------------------------------------------------ allocation
    def _to_allocate(self, g: int, rid: str, num_tokens: int, hit: list[int], total_computed: int,
                     cap: bool) -> int:
        """vLLM `SingleTypeKVCacheManager.get_num_blocks_to_allocate` for group g."""
        window = self.group_windows[g]
        required = cdiv(num_tokens, self.block_size)
        if cap and window:
            required = min(required, self.admission_cap)
        held = len(self.tables[g].get(rid, ()))
        if rid in self.cached[g]:
            return max(required - held, 0)
        skipped = self._skipped(total_computed) // self.block_size if window else 0
        need = max(required - max(skipped, len(hit) + held), 0)
        ref, null = self.pool.ref_cnt, self.pool.null_block
        return need + sum(1 for b in hit[max(0, skipped - held):] if ref[b] == 0 and b != null)

    def _remove_skipped(self, request: Request, processed: int) -> None:
        """vLLM `remove_skipped_blocks`: each local group frees the blocks wholly before the window
        (or chunk) of the next token (tail first), leaving null blocks."""
        rid = request.request_id
        skipped = self._skipped(processed)
        if skipped <= 0:
            return
        null = self.pool.null_block
        for g in self.local_groups:
            blocks = self.tables[g].setdefault(rid, [])
            freed = []
            k = min(skipped // self.block_size, len(blocks))
            for i in range(k - 1, -1, -1):
                if blocks[i] == null:
                    break
                freed.append(blocks[i])
                blocks[i] = null
            if freed:
                self.pool.free_blocks(freed)
            if k > self.nulls.get(rid, 0):      # the nulls stay a prefix: [0, k) now
                self.nulls[rid] = k
        self._sync(request)

    def _sync(self, request: Request) -> None:
        """The request's block count (every group's table has one length) and the processed
        tokens at which its window passes the next block: the scheduler gives a running request
        slots without calling `allocate_running` while neither a new block nor a free is due."""
        rid = request.request_id
        table = self.tables[0].get(rid)
        request.kv_num_blocks = len(table) if table is not None else 0
        nxt = (self.nulls.get(rid, 0) + 1) * self.block_size       # skipped tokens freeing one more block
        request.kv_free_at = -(-nxt // self.window) * self.window if self.chunked else nxt + self.window - 1

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: tuple[list[int], ...] | None = None,
        num_lookahead_tokens: int = 0,
        full_sequence_must_fit: bool = False,
        has_scheduled_reqs: bool = True,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        reserved_blocks: int = 0,
    ) -> list[int] | None:
        """vLLM `KVCacheManager.allocate_slots` over every group, with ``num_lookahead_tokens``
        slots for an EAGLE drafter (co-located). P/D decode side: ``num_external_computed_tokens``
        a connector will write (a sliding group takes blocks for those inside the window only),
        ``delay_cache_blocks``, ``reserved_blocks`` (`KVCacheManager.allocate_slots`). Returns
        the new blocks of all groups, None if they do not fit."""
        if num_new_tokens == 0 and num_new_computed_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError("num_new_tokens must be > 0 when there are no computed tokens to adopt")
        rid = request.request_id
        hits = new_computed_blocks if new_computed_blocks and any(new_computed_blocks) else None
        if request.status == RequestStatus.RUNNING and rid in self.tables[0] and not full_sequence_must_fit \
                and hits is None:
            return self.allocate_running(request, num_new_tokens, num_lookahead_tokens)
        groups = range(len(self.group_windows))
        hit_of = hits if hits is not None else tuple([] for _ in groups)
        local = request.num_computed_tokens + num_new_computed_tokens
        ext = num_external_computed_tokens
        total = min(local + ext, self.max_model_len)
        watermark = 0
        if has_scheduled_reqs and request.status in _ADMIT_STATUSES:
            watermark = self.watermark_blocks
        if full_sequence_must_fit:
            full = min(request.num_tokens, self.max_model_len)
            need = sum(self._to_allocate(g, rid, full, hit_of[g], total, True) for g in groups)
            if need + watermark > self.pool.num_free_blocks:
                return None
        slots = min(total + num_new_tokens + num_lookahead_tokens, self.max_model_len)
        self._remove_skipped(request, max(0, total - request.num_in_flight_tokens))
        need = sum(self._to_allocate(g, rid, slots, hit_of[g], local + ext, False) for g in groups)
        if need + watermark > self.pool.num_free_blocks - reserved_blocks:
            return None
        pool, bs = self.pool, self.block_size
        if (hits is not None or ext > 0) and not any(rid in c for c in self.cached):
            # add_local_computed_blocks: every group's hit blocks first (touch), skipped ones as null
            skipped = self._skipped(local + ext) // bs
            for g in groups:
                blocks = hit_of[g][skipped:] if self.group_windows[g] and skipped > 0 else hit_of[g]
                pad = skipped if self.group_windows[g] else 0
                if self.enable_caching:
                    pool.touch(blocks)
                table = self.tables[g].setdefault(rid, [])
                table.extend([pool.null_block] * pad)
                table.extend(blocks)
                self.cached[g][rid] = len(table)
            if skipped > 0:
                self.nulls[rid] = skipped
            request.kv_num_cached_blocks = len(self.tables[0][rid])
            if ext > 0:     # allocate_external_computed_blocks, group by group
                for g, window in enumerate(self.group_windows):
                    out = self._skipped(local + ext) if window else 0          # skipped tokens
                    if (min(local + ext - out, ext) if out > 0 else ext) <= 0:
                        continue
                    table = self.tables[g][rid]
                    n = cdiv(local + ext, bs) - len(table)
                    if n > 0:
                        table.extend(pool.get_new_blocks(n))
        new: list[int] = []
        for g in groups:                # allocate_new_blocks, group by group
            table = self.tables[g].setdefault(rid, [])
            n = cdiv(slots, bs) - len(table)
            if n > 0:
                got = pool.get_new_blocks(n)
                table.extend(got)
                new += got
        self._sync(request)
        if self.enable_caching and not delay_cache_blocks:
            self.cache_blocks(request, min(total + num_new_tokens, request.num_tokens))
        return new

    def allocate_running(self, request: Request, n: int, lookahead: int = 0) -> list[int] | None:
        """`allocate_slots` of a running request that holds its tables (same result). Every
        group's table has the same length (null blocks included), so each needs ceil(slots / bs)
        minus that length (no null block lies past the window's start, so vLLM's skipped-block
        term never binds); no watermark; out-of-window blocks are freed only when the window
        passed a block since the last time (`nulls`). Runs per running request per step (the
        scheduler calls it inline)."""
        bs, max_len = self.block_size, self.max_model_len
        c = request.num_computed_tokens
        total = c if c < max_len else max_len
        slots = total + n + lookahead if total + n + lookahead < max_len else max_len
        new = self.grow_running(request, slots, total - request.num_in_flight_tokens)
        if new is None:
            return None
        if self.enable_caching:
            known, main = request.num_tokens, total + n       # drafts are not cached
            num_full = min(main if main < known else known, len(request.block_hashes) * bs) // bs
            if num_full > request.kv_num_cached_blocks:
                self.cache_blocks(request, num_full * bs)
        return new

    def grow_running(self, request: Request, slots: int, processed: int) -> list[int] | None:
        """A running request's `allocate_slots` but caching: free what the window (or chunk) of
        ``processed`` tokens (computed, not in flight) leaves behind, then give every group
        blocks for ``slots`` tokens; the new blocks, or None when they do not fit (the frees
        stay, as in vLLM). The scheduler's lazy decode calls it with counts it derives."""
        rid, bs, pool = request.request_id, self.block_size, self.pool
        if self._skipped(processed) // bs > self.nulls.get(rid, 0):
            self._remove_skipped(request, processed)
        add = -(-slots // bs) - len(self.tables[0][rid])
        new: list[int] = []
        if add > 0:
            if add * len(self.tables) > pool.num_free_blocks:
                return None
            for tables in self.tables:
                got = pool.get_new_blocks(add)
                tables[rid].extend(got)
                new += got
            request.kv_num_blocks += add
        return new

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Hash-register each group's full blocks up to `num_tokens` tokens (hybrid coordinators
        round down to whole blocks); a sliding group registers only the blocks a later hit can
        reach (vLLM `reachable_block_mask`, retention interval 0), a chunked group every block it
        still holds."""
        if not self.enable_caching:
            return
        rid, bs, hashes = request.request_id, self.block_size, request.block_hashes
        num_full = min(num_tokens, len(hashes) * bs) // bs
        boundaries = [request.prompt_len - 1]
        if self.junction.get(rid):
            boundaries.append(self.junction[rid])
        null = self.pool.null_block
        for g, window in enumerate(self.group_windows):
            start = self.cached[g].get(rid, 0)
            if start >= num_full:
                continue
            blocks = self.tables[g][rid]
            if window and self.chunked:     # every block (dense: the base reachable_block_mask), nulls skipped
                idx = [i for i in range(start, num_full) if blocks[i] != null]
                self.pool.cache_blocks([blocks[i] for i in idx], [(hashes[i], g) for i in idx], 0, len(idx))
            elif window:
                keep = set()
                for boundary in boundaries:
                    end = boundary // bs
                    keep.update(range(max(start, end - self.hit_run), min(num_full, end)))
                idx = [i for i in sorted(keep) if blocks[i] != null]     # in order: one bulk call
                self.pool.cache_blocks([blocks[i] for i in idx], [(hashes[i], g) for i in idx], 0, len(idx))
            else:               # every full block, in order (no null blocks in a full group)
                keys = [(h, g) for h in hashes[start:num_full]]
                self.pool.cache_blocks(blocks[start:num_full], keys, 0, len(keys))
            self.cached[g][rid] = num_full
        request.kv_num_cached_blocks = num_full

    # ------------------------------------------------------------------ freeing
    def _pop_tables(self, request: Request) -> list[list[int]]:
        """vLLM `pop_blocks_for_free` per group: the request's blocks (null ones dropped), group
        by group in allocation order; its bookkeeping is forgotten."""
        rid, null = request.request_id, self.pool.null_block
        tables = []
        for g in range(len(self.group_windows)):
            tables.append([b for b in self.tables[g].pop(rid, []) if b != null])
            self.cached[g].pop(rid, None)
        self.junction.pop(rid, None)
        self.nulls.pop(rid, None)
        request.kv_num_blocks = request.kv_num_cached_blocks = request.kv_free_at = 0
        return tables

    def free(self, request: Request) -> None:
        """Release the request's blocks group by group, each tail first (vLLM `coordinator.free`)."""
        for blocks in self._pop_tables(request):
            self.pool.free_blocks(reversed(blocks))

    def defer_free(self, request: Request, fence_seq: int) -> None:
        """vLLM `pop_blocks_for_free`: every group's blocks in group order, as one list returned to
        the pool (tail first) once step `fence_seq` is processed."""
        blocks = [b for table in self._pop_tables(request) for b in table]
        if blocks:
            self.deferred_frees.append((fence_seq, blocks))

    def connector_finished(self, request: Request) -> None:
        """vLLM `_connector_finished`: before a finished request's block table goes to the KV
        connector, the sliding groups free what lies before the window (processed tokens)."""
        self._remove_skipped(request, max(0, request.num_computed_tokens - request.num_in_flight_tokens))

    def remaining_blocks(self, request: Request, extra_tokens: int = 0) -> int:
        """vLLM `_request_remaining_blocks`: blocks the request still needs for its whole
        sequence, with the sliding groups' admission cap."""
        full = min(request.num_tokens, self.max_model_len) + extra_tokens
        return sum(self._to_allocate(g, request.request_id, full, [], request.num_computed_tokens, True)
                   for g in range(len(self.group_windows)))

    def check_invariants(self, requests: Iterable[Request] = ()) -> None:
        """Raise if a request's block count (the scheduler's inline skip relies on it) disagrees
        with its tables, or blocks are not conserved (every non-null table entry and deferred
        block holds one reference)."""
        for r in requests:
            blocks = len(self.tables[0].get(r.request_id, ()))
            if r.kv_num_blocks != blocks:
                raise AssertionError(f"{r}: kv_num_blocks {r.kv_num_blocks} != table {blocks}")
        null = self.pool.null_block
        held = sum(1 for tables in self.tables for blocks in tables.values() for b in blocks if b != null)
        held += sum(len(b) for _, b in self.deferred_frees)
        self.pool.check_invariants(held)
