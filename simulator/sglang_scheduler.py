"""A mirror of SGLang 0.5.23's scheduler (``managers/scheduler.py``, ``schedule_policy.py``).

What it mirrors (engine-semantics.md section 7; the source wins where they differ):

* **Prefill first.** Every iteration (``get_next_batch_to_run``) first merges the last extend
  batch (minus the request still being chunked) into the running batch, then tries a new extend
  batch (``PrefillAdder``); only when none forms does the running batch decode one token each
  (``update_running_batch``). ``enable_mixed_chunk`` adds the running decodes to the extend batch
  when their next tokens fit.
* **Admission** (``PrefillAdder``; P = the page size): the continuing chunk first, then the waiting
  queue in policy order (``fcfs``: arrival; ``lof``: longest max_new_tokens first; ``lpm``: longest
  prefix hit first, newcomers sharing 32+ tokens with an earlier one last; fcfs above 128 waiting
  requests or without the radix cache). A request needs
  ``extend + min(max_new, 4096) + P < available + evictable - offset`` where the offset starts at
  the running requests' ``min(max_new - outputs, 4096) x ratio`` (ratio 1.0 for ``ignore_eos``
  requests, else ``new_token_ratio``) and grows by each admission's ``ceil_P(extend) + P + max_new``
  (``max_new`` 0 for a cut chunk). A request longer than the remaining chunk budget is cut there
  (on a page boundary) and becomes the one ``chunked_req``. The pass stops at the first refusal (``NO_TOKEN`` marks the
  batch full: no prefill is tried again until a running request leaves), when the chunk budget
  (``chunked_prefill_size``) or the input budget (``max_prefill_tokens``) is spent, or when the
  request rows (``max_running_requests``) are taken. Without the radix cache (``disable_radix_cache``)
  ``ignore_eos`` requests take ``add_one_req_ignore_eos``'s check instead (every request must be
  able to finish with at least one token per request to spare).
* **Radix cache** (``simulator.sglang_radix``, SGLang's ``UnifiedRadixCache``): each admission
  candidate's prefix match, capped at its tokens minus one; every 32nd admission pass also touches
  the first 128 waiting requests' prefixes (head last: ``_touch_waiting_prefixes``); a request's
  prompt is inserted when its prefill completes (``checkpoint_kv_cache``), a chunk's tokens before
  the next chunk, everything it computed when it finishes, each insert followed by one of the
  prompt alone (``checkpoint_into_tree``); its matched prefix stays locked while it runs; eviction
  of whole leaves in LRU order when an allocation needs room.
* **Memory in pages**: a request's extend takes the pages its new tokens reach into (a partial
  last page is filled first), a decode a new page when the request's KV fills its last; the tree
  keeps whole pages (a partial last page stays the request's and is freed with it); an extend
  batch evicts for its tokens plus a page a request first, a decode for a page a request.
* **Decode memory and retraction**: a decode step needs its new pages (evicting first);
  when they do not fit, requests are retracted, fewest outputs first (ties: longest prompt), until
  they do, keeping one; a retracted request frees its KV (not inserted), the tree is evicted until
  ``20 x remaining`` slots are free, and it goes to the tail of the waiting queue to be prefilled
  again over prompt + outputs. ``new_token_ratio`` then becomes ``min(1, (outputs + 20 x n) /
  (sum max_new + 1))`` of the remaining requests; every decode step without retraction lowers it by
  ``(init - min) / 600`` down to ``min`` (init 0.7 x ``schedule_conservativeness``, min init x 0.14).
* **Overlap scheduling** (on unless ``disable_overlap_schedule``): the caller (``simulator.replica``
  with async scheduling) schedules a step before it processes the previous one's output; a decode
  then leaves out the requests that the step in flight finishes by length
  (``_reqs_finishing_inflight``), and when the decode does not fit while such requests exist, it
  waits for them instead of retracting.

Not mirrored: priority scheduling and preemption, the other cache-aware policies (``dfs-weight``,
``hrrn``, ``shortest-prefill-first``), hierarchical cache, LoRA, grammar, speculative
decoding, ``prefill_decode_interval``, the prefill delayer, DP attention, disaggregation. Requests
end at their output length (no EOS).

The protocol is the one ``simulator.replica`` drives (``schedule`` / ``update_from_output`` with the
``SchedulerOutput`` / ``UpdateResult`` of ``simulator.scheduler_config``). A step's per-request
rows are the extend requests (tokens = the extend, context = the prefix) then the decodes (1 token,
context = the KV before it). ``kv`` exposes the token pool to the replica's trace as blocks of one
token.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from itertools import count

from simulator.request import OUTPUT_TOKEN_ID, RequestSpec, RequestStatus
from simulator.scheduler_config import SchedulerOutput, UpdateResult
from simulator.sglang_radix import RadixCache, RadixNode, TokenPool

CLIP_MAX_NEW_TOKENS = 4096          # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
RETRACT_DECODE_STEPS = 20           # SGLANG_RETRACT_DECODE_STEPS
INIT_NEW_TOKEN_RATIO = 0.7          # SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14   # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS = 600   # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
IGNORE_EOS_RESERVE_TOKENS = 1
WAITING_PREFIX_REFRESH_INTERVAL = 32    # schedule_policy.py (SGLANG_ENABLE_WAITING_PREFIX_REFRESH on)
WAITING_PREFIX_MATCH_MAX = 128
POLICIES = ("fcfs", "lof", "lpm")
IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD = 32        # IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD
IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD = 32  # IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD


@dataclass(frozen=True)
class SglangConfig:
    """SGLang server arguments the scheduler reads (0.5.23 defaults; ``max_total_tokens`` is the
    token pool, ``simulator.sglang_layout`` sizes it as SGLang does).

    chunked_prefill_size: tokens of one extend batch (``--chunked-prefill-size``; -1: no chunking).
    max_prefill_tokens: input tokens of one extend batch (``--max-prefill-tokens``; the first
        request may exceed it when chunking is off).
    max_running_requests: request rows (``--max-running-requests``).
    ignore_eos: requests are sent with ``ignore_eos`` (SGLang's ``bench_serving`` default): the
        running requests' reservation ignores ``new_token_ratio``.
    page_size: tokens per KV page (``--page-size``): allocations, prefix matches and the radix
        cache move in whole pages.
    """

    max_total_tokens: int
    context_length: int
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    max_running_requests: int = 4096
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    enable_mixed_chunk: bool = False
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    ignore_eos: bool = True
    page_size: int = 1

    def __post_init__(self) -> None:
        if self.page_size < 1 or self.max_total_tokens % self.page_size:
            raise ValueError(f"--page-size {self.page_size}: must be >= 1 and divide the token pool "
                             f"({self.max_total_tokens} tokens)")
        for name in ("max_total_tokens", "context_length", "max_prefill_tokens", "max_running_requests"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)}; must be >= 1")
        if self.chunked_prefill_size != -1 and self.chunked_prefill_size < 1:
            raise ValueError(f"--chunked-prefill-size {self.chunked_prefill_size}; must be >= 1 or -1 (no chunking)")
        if self.schedule_policy not in POLICIES:
            raise ValueError(f"--schedule-policy {self.schedule_policy!r} is not simulated; valid: {', '.join(POLICIES)}")
        if not self.schedule_conservativeness > 0:
            raise ValueError(f"--schedule-conservativeness {self.schedule_conservativeness}; must be > 0")

    @property
    def chunk_tokens(self) -> int | None:
        return None if self.chunked_prefill_size == -1 else self.chunked_prefill_size

    def ceil_page(self, tokens: int) -> int:
        """``ceil_paged_tokens``: tokens rounded up to whole pages."""
        return -(-tokens // self.page_size) * self.page_size


class SglReq:
    """SGLang's ``Req`` as the scheduler sees it, plus the fields the benchmark client reads
    (request_id, prompt_len, max_tokens, num_output_tokens, token_times_s, num_preemptions,
    num_cached_tokens)."""

    __slots__ = ("request_id", "arrival_s", "prompt_len", "max_tokens", "input_ids", "num_output_tokens",
                 "prefix_len", "extend_end", "last_node", "lock", "kv_committed", "protected_len",
                 "holds_row", "finished", "num_preemptions", "num_cached_tokens",
                 "token_times_s", "status", "is_new")

    def __init__(self, spec: RequestSpec, input_ids: array) -> None:
        self.request_id = spec.request_id
        self.arrival_s = spec.arrival_s
        self.prompt_len = spec.prompt_len
        self.max_tokens = spec.output_len
        self.input_ids = input_ids
        self.num_output_tokens = 0
        self.prefix_len = 0             # tokens whose KV it has (matched prefix, earlier chunks)
        self.extend_end = 0             # prefix_len + this pass's extend
        self.last_node: RadixNode | None = None
        self.lock: RadixNode | None = None      # the tree node it holds locked
        self.kv_committed = 0           # tokens with KV (SGLang kv_committed_len)
        self.protected_len = 0          # of them, owned by the tree (cache_protected_len)
        self.holds_row = False          # holds a req_to_token row (from its first extend to release)
        self.finished = False
        self.num_preemptions = 0        # retractions
        self.num_cached_tokens = -1     # prefix hit at the first admission
        self.token_times_s = None
        self.status = RequestStatus.WAITING
        self.is_new = True

    def fill_ids(self) -> array:
        """Prompt + outputs (every output token is OUTPUT_TOKEN_ID)."""
        if not self.num_output_tokens:
            return self.input_ids
        return self.input_ids + array("q", [OUTPUT_TOKEN_ID]) * self.num_output_tokens

    @property
    def fill_len(self) -> int:
        return self.prompt_len + self.num_output_tokens


@dataclass
class _Batch:
    """One scheduled step: the extend requests (with their extends and prefixes) and the decodes."""

    step_id: int
    extend: list[SglReq]
    decode: list[SglReq]
    ends: list[int] = None              # extend_end of each extend request when scheduled

    def __post_init__(self) -> None:
        if self.ends is None:
            self.ends = [r.extend_end for r in self.extend]

    @property
    def is_extend(self) -> bool:
        return bool(self.extend)


class _PoolView:
    """The token pool as the replica's trace reads a KV pool: one block per token."""

    def __init__(self, sched: SglangScheduler) -> None:
        self._sched = sched
        self.free_queue = self
        self.num_gpu_blocks = sched.pool.size + 1       # the trace counts num_gpu_blocks - 1 usable

    @property
    def num_free_blocks(self) -> int:
        return self._sched.pool.available + self._sched.evictable_size()


class _KvView:
    def __init__(self, sched: SglangScheduler) -> None:
        self.pool = _PoolView(sched)


class SglangScheduler:
    """SGLang 0.5.23's scheduler over one token pool (see the module docstring)."""

    def __init__(self, config: SglangConfig) -> None:
        self.config = config
        self.pool = TokenPool(config.max_total_tokens)
        self.tree = None if config.disable_radix_cache else RadixCache(self.pool, config.page_size)
        self.page_size = config.page_size
        self.waiting: list[SglReq] = []
        self.kv_holding_waiting: tuple = ()         # the replica's trace reads it (vLLM P/D); none here
        self.running: list[SglReq] = []
        self.batch_is_full = False
        self.chunked_req: SglReq | None = None
        self.last_batch: _Batch | None = None
        self.rows_free = config.max_running_requests
        init = min(INIT_NEW_TOKEN_RATIO * config.schedule_conservativeness, 1.0)
        self.ratio_init = init
        self.ratio_min = min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.ratio_decay = (init - self.ratio_min) / NEW_TOKEN_RATIO_DECAY_STEPS
        self.new_token_ratio = init
        self.overlap = not config.disable_overlap_schedule
        self._in_flight: list[_Batch] = []          # scheduled, output not processed (oldest first)
        self._steps = count()
        self._unique = count(1)
        self._unfinished = 0
        self.num_retractions = 0
        self._refresh_calls = 0                     # calc_priority passes with a waiting queue
        self._retracted: list[str] = []             # retracted while forming the step being scheduled
        self._aborted: list[str] = []               # aborted, not yet reported by update_from_output
        self.kv = _KvView(self)

    # ------------------------------------------------------------------ protocol
    def add_request(self, spec: RequestSpec, idle_spun: bool = True) -> SglReq | str:
        """Queue a request (``handle_generate_request``), or return why SGLang refuses it: a prompt
        of at least ``max_req_input_len`` = min(context_length - 1, pool - 1) - 5 tokens
        (``validate_input_length``). Its max_new_tokens is clipped as ``init_req_max_new_tokens``
        clips it: to ``max_req_len - prompt - 1`` and ``pool - ceil_page(prompt) - page - 1``.

        ``idle_spun``: SGLang's loop spins while it has nothing to do, and its first idle iteration
        (``on_idle``) resets new_token_ratio; a request finding the scheduler idle finds it reset.
        A caller that steps the loop itself (calling ``schedule`` in idle iterations) passes False."""
        if spec.lora_id:
            raise ValueError(f"request {spec.request_id!r} runs a LoRA adapter: LoRA is simulated on vLLM "
                             "engines only, not with --engine sglang")
        cfg = self.config
        max_req_len = min(cfg.context_length - 1, cfg.max_total_tokens - 1)
        if spec.prompt_len >= max_req_len - 5:
            return (f"Input length ({spec.prompt_len} tokens) exceeds the maximum allowed length "
                    f"({max_req_len - 5} tokens)")
        if spec.prompt_token_ids is not None:
            ids = array("q", spec.prompt_token_ids)
        else:       # content unique to this request: negative ids no other prompt uses
            start = next(self._unique) << 32
            ids = array("q", range(-start, -start - spec.prompt_len, -1))
        if idle_spun and self._fully_idle(self.last_batch):
            self.new_token_ratio = self.ratio_init      # the idle loop's on_idle reset it meanwhile
        req = SglReq(spec, ids)
        req.max_tokens = min(spec.output_len, max_req_len - spec.prompt_len - 1,
                             cfg.max_total_tokens - cfg.ceil_page(spec.prompt_len) - cfg.page_size - 1)
        self.waiting.append(req)
        self._unfinished += 1
        return req

    def enable_lazy_decode(self) -> None:
        """The replica's hook for vLLM's lazy decodes; SGLang's mirror has none."""

    def num_unfinished(self) -> int:
        return self._unfinished

    def has_unfinished_requests(self) -> bool:
        return self._unfinished > 0

    def has_requests(self) -> bool:
        return self._unfinished > 0

    def _fully_idle(self, last: _Batch | None) -> bool:
        """``is_fully_idle`` (``on_idle`` then resets new_token_ratio): nothing running, chunked, waiting
        or in flight, and no unfinished request in the last batch ``last``."""
        return (not self.running and self.chunked_req is None and not self.waiting and not self._in_flight
                and (last is None or all(r.finished for r in last.extend + last.decode)))

    def evictable_size(self) -> int:
        return self.tree.evictable_size if self.tree is not None else 0

    def schedule(self) -> SchedulerOutput:
        last = self.last_batch
        batch = self._next_batch()
        step_id = next(self._steps)
        if batch is None:
            if self._fully_idle(last):
                self.new_token_ratio = self.ratio_init      # on_idle
            batch = _Batch(step_id, [], [])
        batch.step_id = step_id
        self._in_flight.append(batch)
        ids, tokens, ctx, samples, reqs = [], [], [], [], []
        new_ids = []
        for r in batch.extend:
            ids.append(r.request_id)
            tokens.append(r.extend_end - r.prefix_len)
            ctx.append(r.prefix_len)
            samples.append(r.extend_end == r.fill_len)
            reqs.append(r)
            if r.is_new:
                new_ids.append(r.request_id)
                r.is_new = False
        for r in batch.decode:
            ids.append(r.request_id)
            tokens.append(1)
            ctx.append(r.kv_committed - 1)
            samples.append(True)
            reqs.append(r)
        retracted, self._retracted = tuple(self._retracted), []
        return SchedulerOutput(step_id, tuple(ids), tuple(tokens), tuple(ctx), tuple(samples), tuple(new_ids),
                               (), retracted, sum(tokens), requests=tuple(reqs))

    def update_from_output(self, out: SchedulerOutput, now_s: float) -> UpdateResult:
        """Process the oldest scheduled step's result (SGLang ``process_batch_result``)."""
        batch = self._in_flight.pop(0)
        if batch.step_id != out.step_id:
            raise RuntimeError(f"step {out.step_id} processed out of order (expected {batch.step_id})")
        got, first, done = [], [], []
        for r, end in zip(batch.extend, batch.ends):
            if r.finished or r.status == RequestStatus.PREEMPTED:
                continue
            if end < r.fill_len:                # a middle chunk: no token
                continue
            self._append_token(r, got, first, done)
            if not r.finished and r.prefix_len < end:
                self._checkpoint(r, end)
        for r in batch.decode:
            if r.finished or r.status == RequestStatus.PREEMPTED:
                continue
            self._append_token(r, got, first, done)
        aborted, self._aborted = tuple(self._aborted), []
        return UpdateResult(tuple(r.request_id for r in got), tuple(first), tuple(done), token_requests=tuple(got),
                            aborted_request_ids=aborted)

    # ------------------------------------------------------------------ results
    def _append_token(self, r: SglReq, got: list, first: list, done: list) -> None:
        r.num_output_tokens += 1
        got.append(r)
        if r.num_output_tokens == 1:
            first.append(r.request_id)
        if r.num_output_tokens >= r.max_tokens:
            r.finished = True
            r.status = RequestStatus.FINISHED_LENGTH_CAPPED
            self._unfinished -= 1
            done.append(r.request_id)
            self._release(r, checkpoint=True)

    def _checkpoint(self, r: SglReq, end: int) -> None:
        """``checkpoint_kv_cache``: publish r's first ``end`` tokens (its extend_end); prefix_len = end."""
        if self.tree is not None:
            self._insert(r, end)
        r.prefix_len = end

    def _insert(self, r: SglReq, up_to: int) -> None:
        """``UnifiedRadixCache.checkpoint_into_tree``: insert r's first ``up_to`` tokens and free the
        slots of the part already stored; then insert its prompt alone (a split at the prompt's end,
        touched after the outputs: LRU evicts a finished request's outputs before its prompt); move
        r's lock to the node the first insert ended on. Keys are cut to whole pages."""
        ps = self.page_size
        key = r.fill_ids()[:up_to // ps * ps]       # whole pages; a partial last page stays r's own
        stored, node = self.tree.insert(key)
        if stored > r.protected_len:
            self.pool.free(stored - r.protected_len)
        prompt = r.prompt_len // ps * ps
        if 0 < prompt < len(key):
            self.tree.insert(key[:prompt])
        r.protected_len = len(key)
        if r.lock is not None:
            self.tree.dec_lock_ref(r.lock)
        self.tree.inc_lock_ref(node)
        r.lock = r.last_node = node

    def _release(self, r: SglReq, checkpoint: bool) -> None:
        """``release_kv_cache``: insert (checkpoint) or free r's own KV, unlock, free its row."""
        if not r.holds_row:
            return
        if checkpoint and self.tree is not None:
            self._insert(r, r.kv_committed)
        self.pool.free(self._own_tokens(r))
        if r.lock is not None:
            self.tree.dec_lock_ref(r.lock)
        r.lock = None
        r.holds_row = False
        self.rows_free += 1

    def _own_tokens(self, r: SglReq) -> int:
        """Slots of r's own pages: those holding its KV beyond the tree-owned (page-aligned) part."""
        return self.config.ceil_page(r.kv_committed) - r.protected_len

    # ------------------------------------------------------------------ scheduling
    def _next_batch(self) -> _Batch | None:
        """``get_next_batch_to_run``."""
        chunked = self.chunked_req
        if chunked is not None and chunked.extend_end > chunked.prefix_len:
            self._checkpoint(chunked, chunked.extend_end)       # stash_chunked_request
        last = self.last_batch
        if last is not None and last.is_extend:
            keep = [r for r in last.extend + last.decode if not r.finished and r is not chunked
                    and r.status != RequestStatus.PREEMPTED]
            if len(keep) < len(last.extend) + len(last.decode):
                self.batch_is_full = False
            if keep and not self.running:
                self.batch_is_full = False      # the extend batch becomes the running batch, with its flag
            self.running.extend(keep)          # merge_batch (none of them is in the running batch)
        n = len(self.running)
        self.running = [r for r in self.running if not r.finished]
        if len(self.running) < n:
            self.batch_is_full = False
        batch = self._new_prefill()
        if batch is None and self.running:
            batch = self._update_running()
        self.last_batch = batch
        return batch

    def _drop_finishing_in_flight(self) -> bool:
        """``_reqs_finishing_inflight`` and the ``filter_batch`` after it: with overlap, leave out of
        the running batch the requests of the step in flight whose next output reaches
        max_new_tokens; whether any were left out."""
        if not self.overlap or not self._in_flight:
            return False
        queued = self._in_flight[-1]
        inside = set(map(id, queued.extend)) | set(map(id, queued.decode))
        n = len(self.running)
        self.running = [r for r in self.running if not (id(r) in inside and r.num_output_tokens + 1 >= r.max_tokens)]
        return len(self.running) < n

    def _update_running(self) -> _Batch | None:
        """``update_running_batch``: a decode of the running requests, retracting if KV is short."""
        n0 = len(self.running)
        finishing = self._drop_finishing_in_flight()
        if not self.running:
            self.batch_is_full = False
            return None
        fits = self._decode_fits(self.running)
        if not fits and finishing:
            self.batch_is_full = False
            return None
        if not fits:
            self._retract()
        else:
            self.new_token_ratio = max(self.new_token_ratio - self.ratio_decay, self.ratio_min)
        if len(self.running) < n0:
            self.batch_is_full = False
        if not self.running:
            return None
        self._prepare_decode(self.running)
        return _Batch(0, [], list(self.running))

    def _decode_tokens(self, reqs: list[SglReq]) -> int:
        """``new_tokens_required_next_decode``: a new page for each request whose KV fills its last."""
        ps = self.page_size
        return len(reqs) if ps == 1 else ps * sum(1 for r in reqs if r.kv_committed % ps == 0)

    def _decode_fits(self, reqs: list[SglReq]) -> bool:
        """``check_decode_mem``: the next decode's slots free after evicting the shortfall."""
        n = self._decode_tokens(reqs)
        if self.tree is not None:
            self.tree.evict_to_free(n)
        return self.pool.available >= n

    def _prepare_decode(self, reqs: list[SglReq]) -> None:
        """``alloc_for_decode``: evict for a page a request (paged: ``alloc_paged_token_slots_decode``'s
        worst case), allocate the pages the step needs."""
        if self.tree is not None:
            self.tree.evict_to_free(len(reqs) * self.page_size)
        self.pool.alloc(self._decode_tokens(reqs))
        for r in reqs:
            r.kv_committed += 1

    def _retract(self) -> None:
        """``retract_decode``: fewest outputs first (ties: longest prompt) until the decode fits,
        keeping one; if that one's next token does not fit either, it is aborted (and the ratio,
        over no request, becomes 0)."""
        order = sorted(self.running, key=lambda r: (r.num_output_tokens, -r.prompt_len), reverse=True)
        first = True
        while first or not self._decode_fits(order):
            if len(order) == 1:
                break
            first = False
            r = order.pop()
            self._release(r, checkpoint=False)
            if self.tree is not None:
                self.tree.evict_to_free(len(order) * RETRACT_DECODE_STEPS)
            r.prefix_len = r.extend_end = 0
            r.kv_committed = r.protected_len = 0
            r.last_node = None
            r.num_preemptions += 1
            r.status = RequestStatus.PREEMPTED
            self.num_retractions += 1
            self._retracted.append(r.request_id)
            self.waiting.append(r)
        if len(order) == 1 and not self._decode_fits(order):    # not even the last one fits: aborted
            r = order.pop()
            self._release(r, checkpoint=False)
            r.finished = True
            r.status = RequestStatus.FINISHED_ABORTED
            self._unfinished -= 1
            self._aborted.append(r.request_id)
        self.running = order        # filter_batch(keep_indices=sorted_indices): the batch in retraction order
        decoded = sum(r.num_output_tokens for r in self.running)
        budget = sum(r.max_tokens for r in self.running)
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (budget + 1))

    def _match(self, r: SglReq) -> None:
        """``init_next_round_input``: the radix match of prompt + outputs, at most all but one token,
        in whole pages."""
        if self.tree is None:
            r.prefix_len, r.last_node = 0, None
            return
        fill = r.fill_ids()
        ps = self.page_size
        r.prefix_len, r.last_node = self.tree.match_prefix(fill[:(len(fill) - 1) // ps * ps])
        r.protected_len = r.prefix_len

    def _new_prefill(self) -> _Batch | None:
        """``_get_new_batch_prefill_raw`` (no priority, LoRA, hierarchical cache, delayer)."""
        cfg = self.config
        if not self.running:
            self.batch_is_full = False
        if (self.batch_is_full or not self.waiting) and self.chunked_req is None:
            return None
        running_bs = len(self.running)
        if self._allocatable(running_bs, 0) <= 0 and self.chunked_req is None:
            self.batch_is_full = True
            return None
        policy = cfg.schedule_policy         # calc_priority
        if policy == "lpm" and (self.tree is None or len(self.waiting) > WAITING_PREFIX_MATCH_MAX):
            policy = "fcfs"                  # no tree, or too long a queue to match
        if policy == "lof":
            self.waiting.sort(key=lambda r: -r.max_tokens)
        elif policy == "lpm":
            self._sort_by_longest_prefix()
        if policy != "lpm":                  # a cache-aware policy touches the prefixes as it matches
            self._touch_waiting_prefixes()
        mixed_chunk = cfg.enable_mixed_chunk and cfg.chunk_tokens is not None   # is_mixed_chunk: needs chunking
        mixed = running_bs if mixed_chunk else 0
        adder = _PrefillAdder(self, mixed)
        if self.chunked_req is not None:
            self.chunked_req = adder.add_chunked(self.chunked_req)
        for r in self.waiting:
            if adder.state() == "other":         # a spent pass budget; NO_TOKEN is left to add_one_req
                break
            held = sum(1 for x in adder.can_run if x.holds_row)
            if len(adder.can_run) >= self._allocatable(len(self.running), held):
                self.batch_is_full = True
            if self.batch_is_full:
                break
            self._match(r)
            res = adder.add_one(r, self.chunked_req is not None)
            if res != "continue":
                if res == "no_token":
                    self.batch_is_full = bool(adder.can_run) or bool(self.running)
                break
        if not adder.can_run:
            return None
        taken = set(map(id, adder.can_run))
        self.waiting = [r for r in self.waiting if id(r) not in taken]
        if adder.new_chunked is not None:
            self.chunked_req = adder.new_chunked
        self._prepare_extend(adder.can_run)
        decode: list[SglReq] = []
        if mixed_chunk and self.running:
            if self._drop_finishing_in_flight():
                self.batch_is_full = False
            if self.running and self._decode_fits(self.running):
                self._prepare_decode(self.running)
                decode, self.running = self.running, []
        return _Batch(0, list(adder.can_run), decode)

    def _sort_by_longest_prefix(self) -> None:
        """``lpm``: every waiting request's prefix matched in the tree (its whole tokens, in pages);
        one whose hit is at most 32 tokens and that shares 32 or more with an earlier such request
        (a radix tree of their tokens) is deprioritised, as only one of a group of identical-prefix
        newcomers should run first; the queue sorted by matched tokens (at most all but one),
        longest first, deprioritised last, stable."""
        ps = self.page_size
        newcomers = RadixCache(TokenPool(1 << 62))
        matched: dict[int, float] = {}
        for r in self.waiting:
            fill = r.fill_ids()
            r.prefix_len, r.last_node = self.tree.match_prefix(fill[:len(fill) // ps * ps])
            matched[id(r)] = -min(r.prefix_len, len(fill) - 1)
            if r.prefix_len <= IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD:
                if newcomers.match_prefix(fill)[0] >= IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD:
                    matched[id(r)] = float("inf")
                else:
                    newcomers.insert(fill)
        self.waiting.sort(key=lambda r: matched[id(r)])

    def _touch_waiting_prefixes(self) -> None:
        """``SchedulePolicy._touch_waiting_prefixes``: every WAITING_PREFIX_REFRESH_INTERVAL-th pass
        with a waiting queue, the prefixes of its first WAITING_PREFIX_MATCH_MAX requests are
        matched in reverse (the head last, so the most recent in LRU order)."""
        if self.tree is None or not self.waiting:
            return
        calls, self._refresh_calls = self._refresh_calls, self._refresh_calls + 1
        if calls % WAITING_PREFIX_REFRESH_INTERVAL == 0:
            ps = self.page_size
            for r in reversed(self.waiting[:WAITING_PREFIX_MATCH_MAX]):
                fill = r.fill_ids()
                self.tree.match_prefix(fill[:len(fill) // ps * ps])

    def _allocatable(self, running_bs: int, held_rows: int) -> int:
        """``get_num_allocatable_reqs`` (pp 1): rows left, capped by max_running_requests."""
        return min(self.config.max_running_requests - running_bs, self.rows_free + held_rows)

    def _prepare_extend(self, reqs: list[SglReq]) -> None:
        """``prepare_for_extend`` / ``alloc_for_extend``: a row for each request on its first use;
        one eviction for the batch (its extend tokens, paged: plus a page a request, the worst case
        of ``alloc_paged_token_slots_extend``), then each request's new pages (a partial last page is
        filled first)."""
        ceil = self.config.ceil_page
        if self.tree is not None:
            extra = len(reqs) * self.page_size if self.page_size > 1 else 0
            self.tree.evict_to_free(sum(r.extend_end - r.prefix_len for r in reqs) + extra)
        need = sum(ceil(r.extend_end) - ceil(r.prefix_len) for r in reqs)
        if need > self.pool.available:      # SGLang's alloc_for_extend raises and the server stops
            raise ValueError(f"SGLang would stop with 'Prefill out of memory': an extend batch of {len(reqs)} "
                             f"request(s) needs {need} KV slots, {self.pool.available} are free after evicting the "
                             "radix cache (a continuing chunk is not held to the admission budget); give the pool more "
                             "tokens (--mem-fraction-static, --max-total-tokens) or a smaller --chunked-prefill-size")
        self.pool.alloc(need)
        for r in reqs:
            if not r.holds_row:
                r.holds_row = True
                self.rows_free -= 1
                if r.num_cached_tokens < 0:
                    r.num_cached_tokens = r.prefix_len
            r.kv_committed = r.extend_end
            r.status = RequestStatus.RUNNING


class _PrefillAdder:
    """SGLang's ``PrefillAdder`` with ``PrefillBudget`` at page size 1 (see the module docstring)."""

    def __init__(self, sched: SglangScheduler, mixed_decodes: int) -> None:
        cfg = sched.config
        self.sched = sched
        self.rem_input = cfg.max_prefill_tokens - mixed_decodes
        chunk = cfg.chunk_tokens
        self.rem_chunk = None if chunk is None else chunk - mixed_decodes
        self.total_offset = mixed_decodes
        self.current_offset = mixed_decodes
        for r in sched.running:
            self.total_offset += self._running_offset(r)
        self.can_run: list[SglReq] = []
        self.new_chunked: SglReq | None = None
        self.page = cfg.page_size
        self.ceil_page = cfg.ceil_page
        self.req_states: list[tuple[float, int]] | None = None

    def _running_offset(self, r: SglReq) -> float:
        ratio = 1.0 if self.sched.config.ignore_eos else self.sched.new_token_ratio
        return min(r.max_tokens - r.num_output_tokens, CLIP_MAX_NEW_TOKENS) * ratio

    def _free(self) -> int:
        return self.sched.pool.available + self.sched.evictable_size()

    @property
    def rem_total(self) -> float:
        return self._free() - self.total_offset

    @property
    def rem_current(self) -> float:
        return self._free() - self.current_offset

    def state(self) -> str:
        """``budget_state``."""
        if not (self.rem_total > 0 and self.rem_current > 0):
            return "no_token"
        if self.rem_input <= 0 or (self.rem_chunk is not None and self.rem_chunk <= 0):
            return "other"
        return "continue"

    def _charge(self, extend: int, max_new: int) -> None:
        """``_update_prefill_budget`` / ``PrefillBudget.reserve``: the extend in whole pages, plus a
        page."""
        extend = self.ceil_page(extend)
        self.total_offset += extend + self.page + max_new
        self.current_offset += extend + self.page
        self.rem_input -= extend
        if self.rem_chunk is not None:
            self.rem_chunk -= extend

    def add_chunked(self, r: SglReq) -> SglReq | None:
        """``add_chunked_req``: the continuing chunk, as much as the chunk budget allows."""
        rem = self.rem_chunk
        available = min(rem, int(self.rem_total))
        rem = available if available > 0 else rem
        left = r.fill_len - r.prefix_len
        new_len = min(left, rem)
        truncated = left > rem
        r.extend_end = r.prefix_len + new_len
        self.can_run.append(r)
        self._charge(new_len, 0 if truncated else min(r.max_tokens, CLIP_MAX_NEW_TOKENS))
        return r if truncated else None

    def add_one(self, r: SglReq, has_chunked: bool) -> str:
        """``add_one_req`` (radix cache) or ``add_one_req_ignore_eos`` (no tree, ignore_eos)."""
        sched = self.sched
        if sched.tree is None and sched.config.ignore_eos:
            return self._add_ignore_eos(r)
        max_new = min(max(r.max_tokens - r.num_output_tokens, 0), CLIP_MAX_NEW_TOKENS)
        extend = r.fill_len - r.prefix_len
        total = extend + max_new + self.page
        tree = sched.tree
        if r.last_node is not None:
            tree.inc_lock_ref(r.last_node)      # the temporary pin: the prefix is not evictable
        try:
            if not total < self.rem_total:
                return "no_token"
            if self.rem_chunk is None and self.can_run and self.ceil_page(extend) >= self.rem_input:
                return "other"
            max_new_charge, chunked = min(r.max_tokens, CLIP_MAX_NEW_TOKENS), False
            if self.rem_chunk is not None and self.ceil_page(extend) > self.rem_chunk:
                page = self.page      # cut at the chunk budget, ending on a page boundary
                extend = (r.prefix_len + self.rem_chunk // page * page) // page * page - r.prefix_len
                if extend <= 0:
                    return "other"
                chunked, max_new_charge = True, 0
        finally:
            if r.last_node is not None:
                tree.dec_lock_ref(r.last_node)
        r.extend_end = r.prefix_len + extend
        if r.last_node is not None:
            tree.inc_lock_ref(r.last_node)
            r.lock = r.last_node
        self.can_run.append(r)
        if chunked:
            self.new_chunked = r
        self._charge(extend, max_new_charge)
        return self.state()

    def _add_ignore_eos(self, r: SglReq) -> str:
        """``add_one_req_ignore_eos``: admit only if every request can still finish."""
        extend = r.fill_len - r.prefix_len
        paged = self.ceil_page(extend) + self.page
        if not paged <= min(self.rem_current, self.rem_total):
            return "no_token"

        def state_of(x: SglReq) -> tuple[float, int] | None:
            left = x.max_tokens * 1.0 - x.num_output_tokens
            return (left, x.prompt_len + x.num_output_tokens) if left > 0 else None

        if self.req_states is None:
            states = [state_of(x) for x in (r, *self.sched.running, *self.can_run)]
            self.req_states = sorted((s for s in states if s is not None), key=lambda s: s[0])
        else:
            s = state_of(r)
            if s is not None:
                i = 0
                for i in range(len(self.req_states)):
                    if s[0] <= self.req_states[i][0]:
                        break
                self.req_states.insert(i, s)
        cur = self.rem_current - paged
        freed = 0
        for i, (left, occupied) in enumerate(self.req_states):
            bs = len(self.req_states) - i
            if cur + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
                return "no_token"
            freed += occupied
        if self.rem_chunk is None or extend <= self.rem_chunk:
            r.extend_end = r.fill_len
            self.can_run.append(r)
            self._charge(extend, min(r.max_tokens, CLIP_MAX_NEW_TOKENS))
        else:
            if self.rem_chunk <= 0:
                return "other"
            r.extend_end = r.prefix_len + self.rem_chunk
            self.can_run.append(r)
            self.new_chunked = r
            self._charge(self.rem_chunk, 0)
        return self.state()
