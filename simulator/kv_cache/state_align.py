"""KV cache manager for Gated DeltaNet hybrids (Qwen3.5, Qwen3-Next) with prefix caching,
mirroring vLLM 0.33's ``HybridKVCacheCoordinator`` over the ``MambaManager`` of each GDN group in
the "align" mamba cache mode (vLLM's default for these models) and one ``FullAttentionManager``.

Every group has the attention block of B tokens (``simulator.memory.gdn_layout``'s aligned block;
also the hash block and the prefix-hit alignment). A GDN group's table is indexed by position:
entry i holds the recurrent state after (i + 1) x B tokens, the null block where nothing is held.
For a chunk of tokens [s, e) of a request (``processed`` p = computed tokens not in flight):

    before counting:  every non-null entry below floor((p - 1) / B) goes back to the pool, highest
                      index first (``_remove_blocks_in_range``; frees happen even if then refused)
    blocks per group: min(max(ceil(e / B) - held entries - hit entries, 0), 1 + checkpoint)
    checkpoint:       the prefill's last chunk (e >= max(prompt, tokens - 1)) starting on a block
                      boundary and crossing more than one (FlashInfer's GDN prefill exports the
                      state at floor((e - 1) / B) x B into entry ceil(e / B) - 2)
    placement:        null entries up to ceil(e / B) - 1 (less the checkpoint), then [checkpoint,]
                      the state block at ceil(e / B) - 1

so a running request holds one state block per group, two while a chunk crosses into a new block,
three in a checkpointed chunk; with a drafter of k drafts (MTP) k speculative blocks more, at the
table's end (``num_speculative_blocks``). Prefix caching (retention interval 0): full attention registers
every full block; a GDN group registers only the state at the prompt's replay boundary
floor((prompt - 1) / B) x B and at the request's shared-prefix junction. A hit is the full group's
run of cached blocks from the left (FA_hit, at most tokens - 1), then the rightmost boundary within
it whose state every GDN group holds; the full group is cut to that hit, and FA_hit becomes the
request's junction when longer. A waiting request whose GDN hit state was registered during the
current ``schedule()`` is refused (``new_step_starts`` clears that record). The scheduler also cuts
prefill chunks to block boundaries (``split_chunk``, vLLM ``_mamba_block_aligned_split``).

vLLM's partial-tail re-keying (``_cache_partial_tail_block``) changes nothing here: without
``--prefix-match-unit`` every checkpoint it would key is already keyed by the mask above, and a
transient checkpoint (a resumed request's, past its prompt) was never keyed. Behind a P/D KV
connector (NixlConnector, pull mode) a pulled request takes one block per GDN group at the pulled
state's entry (``allocate_slots``), a finished request's tables lose the states behind its last
one before the connector reads them (``connector_finished``), and frees may be deferred
(``defer_free``). A drafter behind the connector keeps vLLM's legacy hashes and EAGLE's block drop
(``drop_last_hit_block``, set by the scheduler): a hit matches one block past the lookup limit and
drops it, checkpoints sit one block lower, floor(n / B) x B - B (``checkpoint_position``), the
kept boundaries are the block below the prompt's resend and extension boundaries (vLLM
``replay_boundaries``), and a checkpoint entry, which then holds the state one block below its
own end, is keyed at its position (``_key_checkpoint``, vLLM ``_cache_partial_tail_block``). Not
mirrored: vLLM's ``--prefix-match-unit`` and other retention intervals (flags Frontier does not
take).
"""

from __future__ import annotations

from collections.abc import Iterable

from simulator.kv_cache.manager import KVCacheManager, cdiv
from simulator.request import Request, RequestStatus

_ADMIT_STATUSES = (RequestStatus.WAITING, RequestStatus.PREEMPTED)


def checkpoint_position(num_tokens: int, block_size: int, drop_eagle_block: bool = False) -> int:
    """vLLM ``get_mamba_prefill_checkpoint_position`` (0 at least): the last block boundary before
    the final token, floor((num_tokens - 1) / B) x B (no drafter, or an EAGLE-family drafter with
    lookahead hashes); with EAGLE's block drop (a drafter behind a KV connector) the block before
    the last boundary, floor(num_tokens / B) x B - B."""
    if drop_eagle_block:
        return max(num_tokens // block_size * block_size - block_size, 0)
    return max((num_tokens - 1) // block_size * block_size, 0)


def checkpoint_valid(start: int, end: int, position: int, block_size: int) -> bool:
    """vLLM ``is_mamba_prefill_checkpoint_valid`` with hash block = mamba block = alignment = B:
    can the chunk [start, end) export the state at ``position`` into a checkpoint block?"""
    return (start % block_size == 0
            and cdiv(end, block_size) - 2 > (start - 1) // block_size
            and start + block_size <= position
            and start < position < end
            and (position - start) % block_size == 0)


class AlignStateKVCacheManager(KVCacheManager):
    """Per-group block tables (GDN groups first, as Qwen3.5's layer 0 is a GDN layer, then the
    full-attention group) over one ``BlockPool`` with prefix caching on.

    num_state_groups: vLLM's mamba KV cache groups (Qwen3.5: 3), each with one prefill
        checkpoint block (FlashInfer's GDN prefill, which vLLM runs on Hopper, exports a
        mid-prefill state; Triton's, which exports none, is not modelled).
    num_speculative_blocks: k, the drafts of a drafter (MTP): each GDN table ends in k more
        blocks (a verify writes the state after each draft), the running state is the entry
        k from the end, and when a chunk moves the state past them they are moved to the
        table's end (vLLM ``_relocate_speculative_block``); a request's first allocation may take
        k more blocks.
    """

    inline_allocation = False       # the scheduler calls allocate_running / grow_running
    aligned_prefill = True          # the scheduler cuts prefill chunks with split_chunk

    def __init__(self, num_gpu_blocks: int, block_size: int, max_model_len: int, num_state_groups: int,
                 watermark: float = 0.0, num_speculative_blocks: int = 0) -> None:
        super().__init__(num_gpu_blocks, block_size, max_model_len, enable_prefix_caching=True,
                         watermark=watermark)
        if num_state_groups < 1:
            raise ValueError(f"num_state_groups={num_state_groups}; must be >= 1")
        if num_speculative_blocks < 0:
            raise ValueError(f"num_speculative_blocks={num_speculative_blocks}; must be >= 0")
        self.num_state_groups = num_state_groups
        self.spec_blocks = num_speculative_blocks
        self.allocated: set[str] = set()            # vLLM _allocated_block_reqs (one for all groups)
        self.full_group = num_state_groups          # the group id its hashes are keyed with
        self.state_tables: list[dict[str, list[int]]] = [{} for _ in range(num_state_groups)]
        self.state_cached: list[dict[str, int]] = [{} for _ in range(num_state_groups)]
        self.retired: dict[str, int] = {}           # vLLM _num_retired_blocks (one for all groups)
        self.junction: dict[str, int] = {}          # request.shared_prefix_boundary
        self.cached_this_step: set[tuple] = set()   # GDN keys registered since the step began
        # EAGLE's block drop (a drafter behind a KV connector): the checkpoint of a request's last
        # allocation, (state position, table entry), one entry above the position's own
        self.checkpoints: dict[str, tuple[int, int]] = {}

    # ------------------------------------------------------------------ scheduler hooks
    def new_step_starts(self) -> None:
        """vLLM ``new_step_starts`` at the top of ``schedule()``."""
        self.cached_this_step.clear()

    def split_chunk(self, request: Request, start: int, num_new_tokens: int, max_prefill_tokens: int) -> int:
        """vLLM ``Scheduler._mamba_block_aligned_split``: the tokens of a prefill chunk from
        ``start`` once cut to a block boundary (unless it is the prefill's last chunk), at the
        last cacheable boundary (binds only for chunks a checkpoint cannot serve) and at the
        shared-prefix junction; 0 = the request gets no tokens this step. ``max_prefill_tokens``:
        the token budget, or the configured long-prefill threshold when set (a block wider than it
        advances sub-block). A padded speculative-decoding admission is never cut (its start, a
        hit, is on a block), so vLLM's un-padding of a cut one has no counterpart here."""
        tokens = request.num_tokens
        prefill_end = max(request.prompt_len, tokens - 1)
        if start >= prefill_end:
            return num_new_tokens
        bs = self.block_size
        drop = self.drop_last_hit_block
        last = checkpoint_position(tokens, bs, drop)
        end = start + num_new_tokens
        internal = end >= prefill_end and checkpoint_valid(start, end, checkpoint_position(prefill_end, bs, drop), bs)
        if internal:
            last = 0
        if end < prefill_end:
            aligned = end // bs * bs
            if aligned > start or bs <= max_prefill_tokens:
                end = aligned
        junction = self.junction.get(request.request_id, 0)
        stops = ((start // bs + 1) * bs if start % bs and not internal else 0,
                 last,
                 start + (junction - start) // bs * bs if start < junction < end else 0)
        end = min((x for x in stops if start < x < end), default=end)
        return max(end - start, 0)

    # ------------------------------------------------------------------ lookup
    def get_computed_blocks(self, request: Request) -> tuple[tuple[list[int], ...], int]:
        """Per-group hit blocks (GDN groups, then full attention) and the hit length in tokens;
        sets the request's junction (vLLM ``get_computed_blocks`` of the simple-hybrid
        coordinator)."""
        bs, hashes, pool, full = self.block_size, request.block_hashes, self.pool, self.full_group
        get = pool.get_cached_block
        fa_hit: list[int] = []
        drop = self.drop_last_hit_block     # EAGLE's block drop: match one block more, then drop it
        for i in range(min((request.num_tokens - 1 + (bs if drop else 0)) // bs, len(hashes))):
            b = get((hashes[i], full))
            if b is None:
                break
            fa_hit.append(b)
        if drop and fa_hit:
            fa_hit.pop()
        groups = range(self.num_state_groups)
        hits: list[list[int]] = [[] for _ in groups]
        length = 0
        for i in range(len(fa_hit) - 1, -1, -1):      # MambaManager: right to left, all groups
            found = [get((hashes[i], g)) for g in groups]
            if None not in found:
                hits = [[pool.null_block] * i + [b] for b in found]
                length = (i + 1) * bs
                break
        longest = len(fa_hit) * bs
        del fa_hit[length // bs:]
        self.junction[request.request_id] = longest if longest > length else 0
        return (*hits, fa_hit), length

    # ------------------------------------------------------------------ allocation
    def _checkpoint(self, rid: str, start: int, end: int, prefill_end: int) -> bool:
        """vLLM ``_needs_internal_checkpoint`` (the chunk [start, end) takes a checkpoint block)."""
        if end < prefill_end:
            return False
        bs = self.block_size
        if not checkpoint_valid(start, end, checkpoint_position(end, bs, self.drop_last_hit_block), bs):
            return False
        idx = cdiv(end, bs) - 2
        table = self.state_tables[0].get(rid, ())
        return idx >= 0 and (idx >= len(table) or table[idx] == self.pool.null_block
                             or rid in self.allocated and idx >= len(table) - self.spec_blocks)

    def _to_allocate(self, rid: str, slots: int, main: int, hits: tuple[list[int], ...], computed: int,
                     prefill_end: int) -> tuple[int, bool]:
        """vLLM's coordinator ``get_num_blocks_to_allocate`` summed over the groups, and whether
        the chunk ending at ``main`` takes a checkpoint block. The same-step refusal gives more
        blocks than the pool has."""
        pool, bs = self.pool, self.block_size
        ref, null = pool.ref_cnt, pool.null_block
        state_hits = hits[:-1]
        if state_hits[0] and any(pool.block_hash[h[-1]] in self.cached_this_step for h in state_hits):
            return pool.num_gpu_blocks + 1, False
        ck = self._checkpoint(rid, computed, main, prefill_end)
        need = 0
        required = cdiv(main, bs) + self.spec_blocks
        cap = 1 + ck + (0 if rid in self.allocated else self.spec_blocks)
        for g, hit in enumerate(state_hits):
            new = required - len(hit) - len(self.state_tables[g].get(rid, ()))
            if new > 0:
                need += min(new, cap)
            need += sum(1 for b in hit if b != null and ref[b] == 0)
        hit = hits[-1]
        need += max(cdiv(slots, bs) - len(hit) - len(self.req_to_blocks.get(rid, ())), 0)
        need += sum(1 for b in hit if ref[b] == 0)
        return need, ck

    def _remove_skipped(self, rid: str, processed: int) -> None:
        """vLLM ``remove_skipped_blocks`` of the GDN groups (align mode): free every non-null
        entry below floor((processed - 1) / B) not freed yet, highest first, one call per group."""
        if processed <= 1:
            return
        tables = self.state_tables
        first = self.retired.get(rid, 0)
        table0 = tables[0].get(rid)
        if table0 is None:
            return
        last = min((processed - 1) // self.block_size, len(table0))
        if first >= last:
            return
        null, free = self.pool.null_block, self.pool.free_blocks
        for g in range(self.num_state_groups):
            table = tables[g][rid]
            freed = []
            for i in range(last - 1, first - 1, -1):
                if table[i] != null:
                    freed.append(table[i])
                    table[i] = null
            if freed:
                free(freed)
        self.retired[rid] = last

    def _sync(self, request: Request) -> None:
        """The request's full-attention block count and the processed tokens at which its next
        state entry falls below the kept one (``kv_free_at``): the scheduler gives a running
        request slots without calling ``allocate_running`` while neither is due."""
        rid = request.request_id
        request.kv_num_blocks = len(self.req_to_blocks.get(rid, ()))
        request.kv_free_at = (self.retired.get(rid, 0) + 1) * self.block_size + 1

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
        """vLLM ``KVCacheManager.allocate_slots`` over the GDN groups and the full group (a
        drafter's ``num_lookahead_tokens`` take slots in the full group only, as vLLM's align mode
        ignores them for the states). P/D decode side: ``num_external_computed_tokens`` (a pull)
        adopt the local hit, then take a block per GDN group at the pulled state's entry (the
        entries before it null: vLLM's ``add_local_computed_blocks`` skips all but the last
        computed token's, dropping a hit state the pull passes) and full-attention blocks for the
        pulled tokens; ``delay_cache_blocks`` (nothing registered until the pull lands) and
        ``reserved_blocks`` (kept free for in-flight prefills). Returns the new blocks of all
        groups, None if they do not fit (or the same-step refusal)."""
        ext = num_external_computed_tokens
        if num_new_tokens == 0 and num_new_computed_tokens == 0 and ext == 0:
            raise ValueError("num_new_tokens must be > 0 when there are no computed tokens to adopt")
        rid = request.request_id
        groups = self.num_state_groups
        hits = new_computed_blocks if new_computed_blocks else ((),) * (groups + 1)     # [] or None: no hit
        local = request.num_computed_tokens + num_new_computed_tokens
        total = min(local + ext, self.max_model_len)
        watermark = 0
        if has_scheduled_reqs and request.status in _ADMIT_STATUSES:
            watermark = self.watermark_blocks
        prefill_end = max(request.prompt_len, request.num_tokens - 1)
        if full_sequence_must_fit:
            full = min(request.num_tokens, self.max_model_len)
            if self._to_allocate(rid, full, full, hits, total, prefill_end)[0] + watermark > self.pool.num_free_blocks:
                return None
        main = total + num_new_tokens
        slots = min(main + num_lookahead_tokens, self.max_model_len)
        self._remove_skipped(rid, max(0, total - request.num_in_flight_tokens))
        need, ck = self._to_allocate(rid, slots, main, hits, local + ext, prefill_end)
        if self.drop_last_hit_block:            # vLLM _checkpoints, recorded even if then refused
            if ck:
                bs = self.block_size
                self.checkpoints[rid] = (checkpoint_position(main, bs, True), cdiv(main, bs) - 2)
            else:
                self.checkpoints.pop(rid, None)
        if need + watermark > self.pool.num_free_blocks - reserved_blocks:
            self._sync(request)
            return None
        pool, bs, null = self.pool, self.block_size, self.pool.null_block
        if rid not in self.state_cached[0]:       # add_local_computed_blocks (hit or not), every group
            skipped = max(local + ext - 1, 0) // bs     # a GDN group keeps the last computed token's state
            for g in range(groups):
                kept = hits[g][skipped:]
                table = self.state_tables[g].setdefault(rid, [])
                table.extend([null] * skipped)
                table.extend(kept)
                pool.touch([b for b in kept if b != null])
                self.state_cached[g][rid] = len(table)
            table = self.req_to_blocks.setdefault(rid, [])
            pool.touch(hits[-1])
            table.extend(hits[-1])
            self.num_cached_block[rid] = request.kv_num_cached_blocks = len(table)
            if ext > 0:                         # allocate_external_computed_blocks, group by group
                for t in [self.state_tables[g][rid] for g in range(groups)] + [table]:
                    n = cdiv(local + ext, bs) - len(t)
                    if n > 0:
                        t.extend(pool.get_new_blocks(n))
        new: list[int] = []
        k = self.spec_blocks
        required = cdiv(main, bs) + k
        state_idx = required - k - 1            # the running state's entry once allocated
        allocated = rid in self.allocated
        for g in range(groups):                 # allocate_new_blocks, group by group
            table = self.state_tables[g][rid]
            if required <= len(table) and not ck:
                continue
            prev = len(table)
            if prev < state_idx:
                table.extend([null] * (state_idx - ck - prev))
            if allocated:                       # _relocate_speculative_block: to the table's end
                for i in range(prev - k, prev):
                    if i >= state_idx - ck:
                        break
                    table.append(table[i])
                    table[i] = null
            n = required - len(table)
            if n > 0:
                got = pool.get_new_blocks(n)
                table.extend(got)
                new += got
        self.allocated.add(rid)
        table = self.req_to_blocks[rid]
        n = cdiv(slots, bs) - len(table)
        if n > 0:
            got = pool.get_new_blocks(n)
            table.extend(got)
            new += got
        self._sync(request)
        if not delay_cache_blocks:
            self.cache_blocks(request, min(total + num_new_tokens, request.num_tokens))
        return new

    def allocate_running(self, request: Request, n: int, lookahead: int = 0) -> list[int] | None:
        """``allocate_slots`` of a running request (a prefill chunk or a decode)."""
        return self.allocate_slots(request, n, num_lookahead_tokens=lookahead)

    def grow_running(self, request: Request, slots: int, processed: int) -> list[int] | None:
        """A running decode's ``allocate_slots`` but caching, for the scheduler's lazy decode:
        the frees due at ``processed`` tokens, then a state block per group and full-attention
        blocks for ``slots`` tokens (a decode never takes a checkpoint); None when they do not
        fit (the frees stay, as in vLLM)."""
        rid, bs, pool = request.request_id, self.block_size, self.pool
        self.checkpoints.pop(rid, None)
        self._remove_skipped(rid, processed)
        required = cdiv(slots, bs)
        table = self.req_to_blocks[rid]
        add = required - len(table)
        state_add = [min(max(required - len(t[rid]), 0), 1) for t in self.state_tables]
        if max(add, 0) + sum(state_add) > pool.num_free_blocks:
            self._sync(request)
            return None
        new: list[int] = []
        null = pool.null_block
        for tables, k in zip(self.state_tables, state_add):
            if k:
                t = tables[rid]
                if len(t) < required - 1:
                    t.extend([null] * (required - 1 - len(t)))
                got = pool.get_new_blocks(k)
                t.extend(got)
                new += got
        if add > 0:
            got = pool.get_new_blocks(add)
            table.extend(got)
            new += got
        self._sync(request)
        return new

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Hash-register full blocks up to ``num_tokens`` tokens (rounded down to a block): every
        block of the full group; of each GDN group only the entries ending at the prompt's replay
        boundary and at the junction (vLLM ``reachable_block_mask``, retention interval 0),
        remembered as registered this step."""
        rid, bs, hashes = request.request_id, self.block_size, request.block_hashes
        num_full = min(num_tokens, len(hashes) * bs) // bs
        start = request.kv_num_cached_blocks
        if start < num_full:
            keys = [(h, self.full_group) for h in hashes[start:num_full]]
            self.pool.cache_blocks(self.req_to_blocks[rid][start:num_full], keys, 0, len(keys))
            self.num_cached_block[rid] = request.kv_num_cached_blocks = num_full
        if rid in self.checkpoints:
            self._key_checkpoint(request)
        cached = self.state_cached[0].get(rid, 0)
        if cached >= num_full:
            return
        if self.drop_last_hit_block:        # vLLM replay_boundaries with EAGLE's block drop
            keep = {max((request.prompt_len - 1) // bs - 1, 0) - 1, max(request.prompt_len // bs - 1, 0) - 1}
        else:
            keep = {(request.prompt_len - 1) // bs - 1}
        junction = self.junction.get(rid, 0)
        if junction:
            keep.add(junction // bs - 1)
        null = self.pool.null_block
        for g in range(self.num_state_groups):
            table = self.state_tables[g][rid]
            for i in sorted(keep):
                if cached <= i < num_full and table[i] != null:
                    key = (hashes[i], g)
                    self.pool.cache_blocks([table[i]], [key], 0, 1)
                    self.cached_this_step.add(key)
            self.state_cached[g][rid] = num_full

    def _key_checkpoint(self, request: Request) -> None:
        """vLLM ``_cache_partial_tail_block`` with EAGLE's block drop: the checkpoint entry holds the
        state one block below its own end; it is keyed at that position when it is the prompt's
        checkpoint or the junction, else its key (if any) is dropped."""
        rid, bs, pool, null = request.request_id, self.block_size, self.pool, self.pool.null_block
        position, idx = self.checkpoints[rid]
        i = position // bs - 1
        keep = (position == checkpoint_position(request.prompt_len, bs, True)
                or position == self.junction.get(rid, 0)) and i < len(request.block_hashes)
        for g in range(self.num_state_groups):
            block = self.state_tables[g][rid][idx]
            if block == null:
                continue
            key = (request.block_hashes[i], g) if keep else None
            if pool.block_hash[block] == key:
                continue
            pool.uncache(block)
            if keep:
                pool.cache_blocks([block], [key], 0, 1)
                self.cached_this_step.add(key)

    # ------------------------------------------------------------------ freeing
    def _pop_tables(self, request: Request) -> list[list[int]]:
        """vLLM ``pop_blocks_for_free`` per group (GDN groups, then full attention): the
        request's blocks without the null ones; its bookkeeping is forgotten."""
        rid, null = request.request_id, self.pool.null_block
        tables = []
        for g in range(self.num_state_groups):
            tables.append([b for b in self.state_tables[g].pop(rid, []) if b != null])
            self.state_cached[g].pop(rid, None)
        tables.append(self.req_to_blocks.pop(rid, []))
        self.num_cached_block.pop(rid, None)
        self.retired.pop(rid, None)
        self.junction.pop(rid, None)
        self.checkpoints.pop(rid, None)
        self.allocated.discard(rid)
        request.kv_num_blocks = request.kv_num_cached_blocks = request.kv_free_at = 0
        return tables

    def free(self, request: Request) -> None:
        """Release the request's blocks group by group, each tail first (vLLM ``coordinator.free``)."""
        for blocks in self._pop_tables(request):
            self.pool.free_blocks(reversed(blocks))

    def defer_free(self, request: Request, fence_seq: int) -> None:
        """vLLM ``pop_blocks_for_free``: every group's blocks in group order, as one list returned
        to the pool (tail first) once step ``fence_seq`` is processed."""
        blocks = [b for table in self._pop_tables(request) for b in table]
        if blocks:
            self.deferred_frees.append((fence_seq, blocks))

    def connector_finished(self, request: Request) -> None:
        """vLLM ``_connector_finished``: before a finished request's tables go to the KV connector,
        the GDN groups free the states behind the last processed token's."""
        self._remove_skipped(request.request_id, max(0, request.num_computed_tokens - request.num_in_flight_tokens))

    def remaining_blocks(self, request: Request, extra_tokens: int = 0) -> int:
        """vLLM ``_request_remaining_blocks``: blocks the request still needs for its whole sequence
        (+ ``extra_tokens`` of full-attention slots: a verify step's), every group counted as its
        ``get_num_blocks_to_allocate`` counts it (a GDN group at most its running state and a
        checkpoint)."""
        full = min(request.num_tokens, self.max_model_len)
        empty = ((),) * (self.num_state_groups + 1)
        return self._to_allocate(request.request_id, full + extra_tokens, full, empty, request.num_computed_tokens,
                                 max(request.prompt_len, request.num_tokens - 1))[0]

    def check_invariants(self, requests: Iterable[Request] = ()) -> None:
        """Raise if a request's block count disagrees with its full-attention table, a GDN table
        differs in length or null entries from the first, or blocks are not conserved."""
        null = self.pool.null_block
        for r in requests:
            blocks = len(self.req_to_blocks.get(r.request_id, ()))
            if r.kv_num_blocks != blocks:
                raise AssertionError(f"{r}: kv_num_blocks {r.kv_num_blocks} != table {blocks}")
        for rid, table0 in self.state_tables[0].items():
            shape = [b == null for b in table0]
            for g in range(1, self.num_state_groups):
                if [b == null for b in self.state_tables[g].get(rid, ())] != shape:
                    raise AssertionError(f"request {rid}: GDN group {g}'s table differs from group 0's")
        held = sum(1 for tables in self.state_tables for t in tables.values() for b in t if b != null)
        held += sum(len(t) for t in self.req_to_blocks.values())
        held += sum(len(b) for _, b in self.deferred_frees)
        self.pool.check_invariants(held)
