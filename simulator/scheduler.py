"""vLLM 0.33 v1 `Scheduler` / `AsyncScheduler` mirror (vllm/v1/core/sched/{scheduler,async_scheduler}.py).

Scope: generative decoder, one full-attention KV group, no structured output, no EOS
(outputs end on max_tokens / max_model_len). Speculative decoding (``num_speculative_tokens`` k > 0):
see "Speculative decoding" below. KV connector: only the P/D
disaggregation of NixlConnector (pull mode), as two clearly separated paths selected by
``kv_role`` (None = no connector: the co-located scheduler, untouched):

  "producer" (prefill instance): a request added with ``remote_decode=True`` (the proxy sends it
      with max_tokens=1) is scheduled as any other; at finish its blocks are NOT freed
      (``request_finished`` -> ``delay_free_blocks``) until ``finish_sending_kv(id)`` reports
      that the decode side has read them; then they are freed as a normal finish frees them.
  "consumer" (decode instance): a request added with ``remote_prefill=True`` is, at admission,
      given blocks for its whole prompt (``get_num_new_matched_tokens`` = prompt - local hit,
      async; fit check against free blocks minus in-flight prefill reservations), status
      WAITING_FOR_REMOTE_KVS, not in ``running``; it sits in ``kv_holding_waiting`` (served before
      ``waiting``) and is skipped until ``finish_remote_kv(id)``; the next schedule() then caches
      its blocks, sets num_computed_tokens = num_tokens - 1 and admits it as a 1-token step that
      produces the first token (``_update_waiting_for_remote_kv``). The ids admitted this way in
      a step are in ``SchedulerOutput.remote_kv_request_ids`` (the worker starts the pull then).

  With Gated DeltaNet state groups (``kv.num_state_groups``) NixlConnector backs off one token
  (``_prefill_backoff``): the producer cuts a remote-decode prompt's last token at add_request
  (``_truncate_request_for_prefill``: its state h(N - 1) is what D needs), and the consumer loads
  all but the prompt's last token (``_get_remote_prefill_token_count``), which its 1-token step
  recomputes. In vLLM's "align" mamba cache mode the consumer cuts a local prefill (a preempted
  request's recompute) to block boundaries as the co-located waiting loop does (``kv.split_chunk``).

Driving protocol (the caller owns time):

  sync (`async_scheduling=False`, vLLM `EngineCore.step`):
      while s.has_requests(): out = s.schedule(); <run forward of out>; s.update_from_output(out)

  async (default, vLLM `EngineCore.step_with_batch_queue` with a batch queue of depth 2):
      queue = deque()
      loop:
          if s.has_requests():
              out = s.schedule(); launch(out); queue.appendleft(out)
              if len(queue) < 2 and (out.total_num_scheduled_tokens > 0 or s.has_requests()):
                  continue                       # do not wait for the GPU yet
          elif not queue: break
          s.update_from_output(queue.pop())      # blocks until the oldest step finished

      CPU  sched1 sched2 ......... upd1 sched3 ......... upd2 sched4 ...
      GPU         [ step 1       ][ step 2            ][ step 3           ]
                               ^ step 1 ends: its tokens are processed while step 2 runs

  Step N+1 is scheduled before step N's output is processed. A request that was scheduled in
  step N (not a partial prefill) carries one output *placeholder*, so it is scheduled again in
  N+1 with one token without waiting; its finish is seen one step late, but a request sure to
  reach max_tokens is not given the extra step. First tokens still come from the step that
  completes the prompt. `scheduler_trace.run_scheduler_only` implements both loops.

Speculative decoding (vLLM 0.33, EAGLE-family drafter, model runner V2): a request that sampled
holds k drafts (``Request.spec_tokens``: sync, set after its step's output by ``_propose_drafts``
as vLLM's ``update_draft_token_ids``; async, k placeholders set at schedule time). A running
request is scheduled ``num_tokens + drafts + placeholders - computed`` tokens (capped as usual), the
drafts it carries into the step listed in ``SchedulerOutput.spec_tokens``; KV slots are allocated
for ``num_lookahead_tokens`` more. When the step's output is processed, ``accept_drafts(request,
context_len, drafts)`` (the caller's acceptance model) says how many drafts the target accepted;
the rejected ones roll num_computed_tokens (and async placeholders) back, and 1 + accepted tokens
are appended, trimmed at max_tokens / max_model_len. A request admitted from waiting with one
token left is padded to 1 + k rows with k placeholder drafts (never accepted) when nothing else
in the step is a prefill. With an EAGLE-family drafter and prefix caching a block is hashed with
the token after it; behind a KV connector (P/D) the hashes stay plain and a prefix hit drops its
last block instead (neither with a draft model: ``SchedulerConfig.eagle_drafter``). A draft
model's first pass takes one input row more per request, so every scheduled request costs one
slot of max_num_batched_tokens besides its tokens (``SchedulerConfig.num_draft_slots``, vLLM's
``input_budget``). Behind a KV connector a
remote-KV pull reserves no lookahead slots but keeps one verify step's blocks free beside the
in-flight pulls', and a pulled request's first step is a padded verify. Lazy decode is off.
Followed: vLLM 0.33's ``Scheduler`` / ``AsyncScheduler`` (tests/oracle/test_spec_parity.py and
test_pd_parity.py run both side by side).

Images (``SchedulerConfig.encoder_budget`` > 0): a request's image runs (``Request.mm_inputs``)
go through vLLM's encoder budget and cache (``simulator.encoder_cache.EncoderScheduler``) wherever
vLLM's loops call ``_try_schedule_encoder_inputs``: after the token count (and the "align" split)
of a running or waiting request, before its KV allocation; an image the encoder cannot take stops
the window before it (a running request with no tokens left is passed over, a waiting one requeued
behind). A scheduled request's items are the step's ``encoder_inputs``; a request holding cache
references is not made lazy, so each processed step drops those whose runs are computed. Followed:
tests/oracle/test_mm_parity.py.

Lazy decode (`enable_lazy_decode`, turned on by `simulator.replica.Replica`): a decode is
listed in each step's output from arrays aligned with ``running`` and skipped by
update_from_output; only its block events (allocate, hash, cache) touch it, and its counters and
token times are written once, before its last token or when anything else needs them. Plans,
finishes, KV state and token times are those of the per-request path (tests/simulator/
test_lazy_decode.py runs both side by side); what a caller sees differently: the fields of a lazy
request lag until `sync_lazy()`, and UpdateResult lists only the tokens it processed itself.
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import replace
from itertools import compress

from simulator.encoder_cache import EncoderScheduler
from simulator.kv_cache.manager import KVCacheManager
from simulator.request import Request, RequestSpec, RequestStatus
from simulator.request_queue import make_request_queue
from simulator.scheduler_config import SchedulerConfig, SchedulerOutput, UpdateResult
from simulator.spec_decode import SpecDecodingStats

_RUNNING, _PREEMPTED = RequestStatus.RUNNING, RequestStatus.PREEMPTED
_NOTHING = UpdateResult((), (), (), ())         # a processed step that produced nothing to report


def _drafts_unused(r: Request, computed: int, n: int) -> bool:
    """vLLM ``Scheduler._drafts_unused``: the drafts proposed for r after a step that schedules n
    tokens on ``computed`` are sure to go unused: the step is a non-final prefill chunk, or it
    samples r's last output token (counting one more in flight with async placeholders)."""
    if computed + n < r.num_tokens:
        return True
    return r.num_output_tokens + 1 + (r.num_output_placeholders > 0) >= r.max_tokens


class _StepState:
    """Scratch state of one schedule() call: the scheduled requests as aligned lists, in order."""

    __slots__ = ("token_budget", "slots", "reqs", "ids", "num_sched", "ctx", "new_ids", "resumed_ids", "preempted",
                 "remote_ids", "samples", "prefills_done", "lazy_out", "defer_prefills", "prefill_admitted",
                 "spec", "prefill_scheduled", "running_scheduled", "drafts_needed", "enc_budget", "encoder")

    def __init__(self, token_budget: int, slots: int = 0, enc_budget: int = 0) -> None:
        self.token_budget = token_budget     # vLLM's input_budget: tokens plus the drafter's slots
        self.enc_budget = enc_budget         # images: embeddings the tower may still compute this step
        self.encoder: dict[str, list[int]] = {}     # request id -> its items encoded this step
        self.slots = slots                   # drafter input slots per scheduled request (num_draft_slots)
        self.defer_prefills = False          # --prefill-schedule-interval holds prefill this step
        self.prefill_admitted = False        # a waiting request was admitted with prompt to compute
        self.reqs: list[Request] = []        # scheduling order (a request at most once)
        self.ids: list[str] = []             # their request ids
        self.num_sched: list[int] = []       # tokens of each this step
        self.ctx: list[int] = []             # num_computed_tokens of each before the step
        self.new_ids: list[str] = []
        self.resumed_ids: list[str] = []
        self.preempted: list[Request] = []
        self.remote_ids: list[str] = []  # P/D consumer: admitted for an async KV pull this step
        # The leading len(samples) requests were already advanced by _schedule_running (its fast
        # path); prefills_done: those of them that end an in-flight prefill (left to discard).
        self.samples: list[bool] = []
        self.prefills_done: list[Request] = []
        self.lazy_out: list[int] = []   # lazy decode: a0, b0, a1, b1...: ranges [a, b) of reqs listed lazily
        # speculative decoding: request id -> drafts it verifies this step (vLLM
        # scheduled_spec_decode_tokens), and whether the running pass scheduled a request that was
        # mid-prefill (vLLM prefill_scheduled) or any
        self.spec: dict[str, int] = {}
        self.prefill_scheduled = False
        self.running_scheduled = False
        self.drafts_needed = False      # some request of the step can use the drafts proposed after it

    def list_lazy(self, a: int, b: int) -> None:
        """reqs[a:b] were listed lazily: a range of lazy_out (merged with one ending at a)."""
        lazy_out = self.lazy_out
        if lazy_out and lazy_out[-1] == a:
            lazy_out[-1] = b
        else:
            lazy_out += (a, b)

    def add(self, r: Request, n: int, context_len: int) -> None:
        self.reqs.append(r)
        self.ids.append(r.request_id)
        self.num_sched.append(n)
        self.ctx.append(context_len)
        self.token_budget -= n + self.slots

    def undo(self, r: Request) -> None:
        """Drop r (scheduled earlier in this step, now preempted) and give its tokens back."""
        i = self.reqs.index(r)
        del self.reqs[i], self.ids[i], self.ctx[i]
        self.token_budget += self.num_sched.pop(i) + self.slots
        self.spec.pop(r.request_id, None)
        for k in self.encoder.pop(r.request_id, ()):    # its encoder budget back (vLLM restores it too)
            self.enc_budget += r.mm_inputs[k].num_embeds


class Scheduler:
    """Token-budget scheduler over running (admission order) and waiting requests."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, *, kv_role: str | None = None) -> None:
        if kv.block_size != config.block_size:
            raise ValueError(f"kv block_size={kv.block_size}; must equal config.block_size={config.block_size}")
        if kv.max_model_len != config.max_model_len:
            raise ValueError(f"kv max_model_len={kv.max_model_len}; must equal {config.max_model_len}")
        self.config = config
        self.kv = kv
        self.requests: dict[str, Request] = {}
        self.running: list[Request] = []
        self.waiting = make_request_queue(config.policy)
        self._finished_req_ids: set[str] = set()
        self._step_id = 0
        # --prefill-schedule-interval (vLLM's local prefill cadence; 1 = off): steps that scheduled
        # tokens, the last one that carried prefill, whether the last release step left requests it
        # could not admit, and the waiting requests a pass skipped (vLLM's deferred_waiting)
        self._prefill_interval = config.prefill_schedule_interval
        self._num_executed_steps = 0
        self._last_prefill_step = -self._prefill_interval
        self._prefill_capacity_bound = False
        self._deferred_waiting: set[str] = set()
        # vLLM V2+PP+async: ``AsyncScheduler.decode_stagger`` = pp (0 = off: pp 1 or sync)
        pp = config.pipeline_parallel_size
        self._decode_stagger = pp if pp > 1 and config.async_scheduling else 0
        self._priority = config.policy == "priority"
        self._debug = config.debug_checks
        # Gated DeltaNet state groups in vLLM's "align" mode: prefill chunks end on block
        # boundaries (kv.split_chunk, vLLM _mamba_block_aligned_split, with the budget or the
        # configured long-prefill threshold as its per-chunk cap)
        self._split = kv.split_chunk if kv.aligned_prefill else None
        thr = config.long_prefill_token_threshold
        self._max_prefill = min(config.max_num_batched_tokens, thr) if thr > 0 else config.max_num_batched_tokens
        if kv_role not in (None, "producer", "consumer"):
            raise ValueError(f"kv_role={kv_role!r}; valid: None, 'producer', 'consumer'")
        self.kv_role = kv_role
        # P/D (vLLM KV connector state); empty and unused without a connector.
        self.kv_holding_waiting = make_request_queue(config.policy)
        self._finished_recving: set[str] = set()           # consumer: pulls done, not yet promoted
        self._inflight_prefills: set[Request] = set()      # consumer: vLLM _inflight_prefills
        self._delayed_free: dict[str, Request] = {}        # producer: finished, blocks kept for D
        # vLLM with a kv_both connector (NixlConnector as deployed): with async scheduling a freed
        # request's blocks return to the pool only after the steps that scheduled it are processed
        # (defer_block_free), and a preempted request's in-flight output is dropped
        # (requires_kv_delivery -> drop_stale_output).
        self._defer_block_free = kv_role is not None and config.async_scheduling
        # NixlConnector's prefill backoff (vLLM `_prefill_backoff`): with Gated DeltaNet state groups
        # the prefill instance computes a prompt but its last token (add_request) and ships the
        # state h(N - 1); the decode instance loads those tokens and recomputes the last one.
        self._backoff = 1 if kv_role is not None and kv.num_state_groups else 0
        self._drop_stale_on_preempt = kv_role is not None
        self._sched_step_seq = 0
        self._processed_step_seq = 0
        # Lazy decode (enable_lazy_decode): off by default.
        self._lazy = False
        self._end_s = array("d")        # [s - 1]: time step s's output was processed
        self._processed_step = 0        # step id of the last processed output
        # Aligned with self.running (lazy decode only): request ids, the next step that must visit
        # each request (0: not lazy; see _plan) and lazy_ctx, so a step lists its lazy requests
        # without touching them.
        self._run_ids: list[str] = []
        self._run_end = array("q")
        self._run_ctx = array("q")
        self._masks: dict[int, list[bool] | bool] = {}  # step -> which of its requests are not lazy (False: none)
        self._late: dict[int, list[Request]] = {}       # step -> lazy in it, materialised before its update
        self._fills: dict[int, list[Request]] = {}      # step -> lazy requests whose token fills a block
        self._wake: list[Request] = []                  # lazy requests the next schedule() must visit
        self._free_wakes: dict[int, list[Request]] = {}  # step -> lazy requests whose window free is due after it
        # Speculative decoding (see the module docstring): drafts per request and step, KV lookahead
        # slots, and the acceptance model the caller sets: accept_drafts(request, context_len,
        # drafts) -> accepted drafts (0..drafts), asked once per processed step that verified some.
        self._k = config.num_speculative_tokens
        self._lookahead = config.num_lookahead_tokens
        self.accept_drafts = None
        self.spec_stats = SpecDecodingStats(self._k)
        # vLLM hashes a block with the token after it for an EAGLE drafter (add_request), except
        # behind a KV connector, which keeps the plain hashes: a prefix hit then drops its last block
        kv.drop_last_hit_block = bool(self._k) and kv_role is not None and config.eagle_drafter
        # Images (simulator.encoder_cache): the encoder budget and cache; None without a vision tower
        self.encoder = (EncoderScheduler(config.encoder_budget, config.disable_chunked_mm_input)
                        if config.encoder_budget else None)

    # ------------------------------------------------------------------ lazy decode
    def enable_lazy_decode(self) -> bool:
        """Stop writing the per-step progress of plain decode requests (same plans and results).

        A running decode (1 token a step, nothing stale, not a prefill in flight) becomes *lazy*
        until the step before its last token (`Request.lazy_start`..`lazy_end`): schedule()
        lists it (1 token, context ``lazy_ctx + step``) from arrays aligned with ``running``
        without touching it, and update_from_output() skips its token. Only block events visit
        it: the step that needs a new block and the steps until a filled block is cached
        (`_visit`, `_plan`: the fast path's allocation and caching, in running order), and the
        processing of a token that fills a block (hashed); with sliding-window or chunked KV groups
        (`HybridKVCacheManager`) also the first step after the processing of the step that moves
        its window past a block (`HybridKVCacheManager.grow_running` frees it). Its counters and
        token times are written once (`_materialize`): when the window ends, its block does not
        fit (the general path, preemption), a step's budget does not reach it, it is a preemption
        victim, or `sync_lazy()`. The caller must give update_from_output() the time (``now_s``):
        the skipped tokens' times are written into ``Request.token_times_s`` from those, and
        UpdateResult does not list them. Off under priority policy, PP decode stagger and debug
        checks. Call it before the first schedule(). Returns whether it is on.
        """
        if self._step_id:
            raise ValueError(f"enable_lazy_decode() after {self._step_id} schedule() calls; "
                             "call it before the first")
        self._lazy = not (self._priority or self._decode_stagger or self._debug or self._k)
        return self._lazy

    def _materialize(self, r: Request, last: int) -> None:
        """Write r's lazy steps lazy_start..last (scheduled; those processed so far also
        sampled a token each); r is no longer lazy.

            step:        lazy_start ........ processed ........ last
            scheduled:   c += 1 each ----------------------------->
            processed:   one token each -------->  (times: self._end_s)
        """
        j = r.lazy_start
        ns = last - j + 1
        p = self._processed_step
        if last > p:                # its lazy steps p+1..last are in flight: processed in full
            late = self._late
            for s in range(max(j, p + 1), last + 1):
                late.setdefault(s, []).append(r)
        np_ = (p if p < last else last) - j + 1
        if np_ > 0:
            k = r.num_output_tokens
            r.num_output_tokens = k + np_
            tt = r.token_times_s
            if tt is not None:
                tt[k:k + np_] = self._end_s[j - 1:j - 1 + np_]
        else:
            np_ = 0
        r.num_computed_tokens += ns
        r.num_in_flight_tokens += ns - np_
        if self.config.async_scheduling:
            r.num_output_placeholders += ns - np_
        if self._defer_block_free:
            r.last_sched_seq = self._sched_step_seq     # the last step that scheduled r: `last`
        r.is_prefill_chunk = False
        r.lazy_start = r.lazy_end = r.lazy_fill = r.lazy_free = 0

    def _visit(self, r: Request, step: int) -> bool:
        """Lazy step `step` of r, when it needs more than listing: the fast path's block
        allocation and caching, with r's token count derived. False if the block does not fit
        (r must take the general path)."""
        kv = self.kv
        bs = kv.block_size
        need = r.lazy_ctx + step + 1
        if not kv.inline_allocation:    # hybrid groups: frees on the processed basis, then blocks in every group
            j, p = r.lazy_start, self._processed_step
            processed = r.num_computed_tokens - r.num_in_flight_tokens + (p - j + 1 if p >= j else 0)
            if kv.enable_caching and self.config.async_scheduling and processed // bs > r.kv_num_cached_blocks:
                # what update_from_output caches of a processed step (async), before the free
                kv.cache_blocks(r, processed // bs * bs)
            if kv.grow_running(r, need, processed) is None:
                return False
        elif need > r.kv_num_blocks * bs:
            blocks = kv.req_to_blocks[r.request_id]
            num_new = -(-need // bs) - len(blocks)
            if num_new > kv.pool.free_queue.num_free_blocks:
                return False
            blocks.extend(kv.pool.get_new_blocks(num_new))
            r.kv_num_blocks = len(blocks)
        if kv.enable_caching:
            j, p = r.lazy_start, self._processed_step
            known = r.prompt_len + r.num_output_tokens + (p - j + 1 if p >= j else 0)
            if (num_full := (need if need < known else known) // bs) > r.kv_num_cached_blocks:
                kv.cache_blocks(r, num_full * bs)
        return True

    def _plan(self, r: Request, step: int) -> int:
        """After lazy step `step` of r: register the next step whose token fills a block (hashed
        when that step is processed) and return the next step that must visit r (also kept in
        ``r.lazy_visit``): a block to allocate, the window end, (prefix caching) a filled
        block to cache, which is possible at the first schedule() after its token's step is
        processed, or (hybrid KV groups) a window free, due at the first schedule() after the
        step that brings its processed tokens to ``kv_free_at`` is processed. Those steps are
        guessed as the fill (or free) step + the current lag between scheduled and processed
        steps (async 2, sync 1); when the guess is late, update_from_output wakes r (`_wake`)
        as it processes that step, so no visit is ever missed.

            lazy step t: context x = lazy_ctx + t; needs a block when x + 1 > kv_num_blocks * bs;
                         its token fills a block when (x + 2) % bs == 0
        """
        bs, ctx0, end = self.kv.block_size, r.lazy_ctx, r.lazy_end
        fill = step + -(ctx0 + step + 2) % bs
        registered = r.lazy_fill
        if registered < fill < end:
            self._fills.setdefault(fill, []).append(r)
            r.lazy_fill = fill
        nxt = r.kv_num_blocks * bs - ctx0
        if self.kv.enable_caching:
            p = self._processed_step
            full = (ctx0 + step + 2) // bs         # full blocks once this step's token is known
            cached = r.kv_num_cached_blocks
            if cached < full:                       # full block(s) not cached yet
                f = full * bs - ctx0 - 2            # the step whose token fills the last one
                if cached + 1 < full or f <= p or (f != registered and f != r.lazy_fill):
                    r.lazy_visit = step + 1         # known already, or no wake-up: next step
                    return step + 1
                fill = f                            # in flight, registered: wakes r when processed
            if fill + step - p < nxt:               # step - p >= 1; fill > p if pending
                nxt = fill + step - p
        if not self.kv.inline_allocation:       # hybrid groups: the next window free (grow_running)
            p = self._processed_step
            f = r.kv_free_at - ctx0 - 1         # processed tokens lazy_ctx + p + 1 reach kv_free_at after step f
            if p < r.lazy_start - 1 or f <= p:  # r's steps before it went lazy still in flight, or due now
                due = step + 1
            else:
                due = f + step - p              # the guess: f processed as late as the steps before it
                if f < end and f != r.lazy_free:
                    self._free_wakes.setdefault(f, []).append(r)   # wakes r when processed, if planned later
                    r.lazy_free = f
            if due < nxt:
                nxt = due
        if nxt > end:
            nxt = end
        r.lazy_visit = nxt
        return nxt

    def sync_lazy(self) -> None:
        """Materialise every lazy request (its fields as without lazy decode); between steps."""
        run_end = self._run_end
        for k, r in enumerate(self.running):
            if r.lazy_end:
                self._materialize(r, self._step_id)
                run_end[k] = 0

    # ------------------------------------------------------------------ requests
    def add_request(self, request: RequestSpec | Request, *, remote_prefill: bool = False,
                    remote_decode: bool = False) -> Request:
        """Queue a request (a `RequestSpec` is turned into a fresh `Request`).

        remote_prefill (consumer only): pull the prompt's KV from a prefill instance.
        remote_decode (producer only): keep the blocks at finish until `finish_sending_kv`.
        """
        if request.lora_id and not self.config.max_loras:
            raise ValueError(f"request {request.request_id!r} runs LoRA adapter {request.lora_id}, but the engine "
                             "serves none: add --enable-lora (vLLM answers 404 for an unknown model name)")
        if remote_decode and self._backoff and request.prompt_len > self._backoff:
            if not isinstance(request, RequestSpec):
                raise ValueError(f"{request.request_id!r}: a prefill instance with Gated DeltaNet state groups "
                                 "takes a RequestSpec (its prompt is cut before the Request is built)")
            ids = request.prompt_token_ids      # vLLM `_truncate_request_for_prefill`
            request = replace(request, prompt_len=request.prompt_len - self._backoff,
                              prompt_token_ids=None if ids is None else ids[:-self._backoff])
        if isinstance(request, RequestSpec):
            if request.images and not request.mm_inputs:
                raise ValueError(f"request {request.request_id!r} carries images not laid out for a vision tower "
                                 "(simulator.multimodal.place_images)")
            request = Request.from_spec(request, self.config.block_size)
        if request.mm_inputs and self.encoder is None:
            raise ValueError(f"request {request.request_id!r} carries images but the engine has no vision tower "
                             "(encoder_budget=0)")
        if self._k and self.config.enable_prefix_caching and self.kv_role is None and self.config.eagle_drafter:
            request.set_hash_lookahead(1)   # vLLM: the EAGLE drafter reads the token after a block
        if remote_prefill and self.kv_role != "consumer":
            raise ValueError(f"remote_prefill needs kv_role='consumer', this scheduler has {self.kv_role!r}")
        if remote_decode and self.kv_role != "producer":
            raise ValueError(f"remote_decode needs kv_role='producer', this scheduler has {self.kv_role!r}")
        if request.block_size != self.config.block_size:
            raise ValueError(f"block_size={request.block_size} of {request.request_id!r}; must equal the "
                             f"scheduler's block_size={self.config.block_size}")
        request.kv_remote_prefill = remote_prefill
        request.kv_remote_decode = remote_decode
        if request.request_id in self.requests:
            raise ValueError(f"request_id={request.request_id!r} is already in the scheduler")
        if request.prompt_len >= self.config.max_model_len:
            raise ValueError(
                f"prompt_len={request.prompt_len} of {request.request_id!r}; must be < "
                f"max_model_len={self.config.max_model_len}"
            )
        self.requests[request.request_id] = request
        self.waiting.add_request(request)
        return request

    def has_unfinished_requests(self) -> bool:
        return bool(self.running) or bool(self.waiting) or bool(self.kv_holding_waiting)

    def has_requests(self) -> bool:
        """vLLM `has_requests`: unfinished requests, or finishes not yet reported by a schedule()."""
        return (bool(self.running) or bool(self.waiting) or bool(self.kv_holding_waiting)
                or bool(self._finished_req_ids))

    def num_unfinished(self) -> int:
        """Running + waiting (kv_holding_waiting included): the ``least_loaded`` router's load."""
        return len(self.running) + len(self.waiting) + len(self.kv_holding_waiting)

    def get_request_counts(self) -> tuple[int, int]:
        """(running, waiting); waiting includes kv_holding_waiting, as vLLM counts it."""
        return len(self.running), len(self.waiting) + len(self.kv_holding_waiting)

    # ------------------------------------------------------------------ P/D (KV connector)
    def finish_remote_kv(self, request_id: str) -> None:
        """Consumer: the KV pull of ``request_id`` finished (vLLM ``finished_recving``).

        As vLLM, only recorded here; the next schedule() promotes the request when it meets it
        in ``kv_holding_waiting`` (``_update_waiting_for_remote_kv``).
        """
        r = self.requests.get(request_id)
        if r is None or r.status != RequestStatus.WAITING_FOR_REMOTE_KVS:
            raise ValueError(f"request {request_id!r} is not waiting for remote KV")
        self._finished_recving.add(request_id)

    def finish_sending_kv(self, request_id: str) -> None:
        """Producer: the decode side has read ``request_id``'s blocks; free them now (tail first)."""
        r = self._delayed_free.pop(request_id, None)
        if r is None:
            raise ValueError(f"request {request_id!r} holds no blocks waiting for a KV read")
        self._free_request_blocks(r)

    def num_delayed_free_requests(self) -> int:
        """Producer: finished requests whose blocks wait for the decode side's read."""
        return len(self._delayed_free)

    def _free_request_blocks(self, r: Request) -> None:
        """vLLM `_free_request_blocks`: free now, or once the last step that scheduled r is processed."""
        if not self._defer_block_free or r.last_sched_seq <= self._processed_step_seq:
            self.kv.free(r)
        else:
            self.kv.defer_free(r, self._sched_step_seq)

    def _update_waiting_for_remote_kv(self, r: Request) -> None:
        """vLLM: cache the pulled blocks; a whole-prompt load recomputes the last token."""
        self.kv.cache_blocks(r, r.num_computed_tokens)
        if r.num_computed_tokens == r.num_tokens:
            r.num_computed_tokens = r.num_tokens - 1
        self._finished_recving.discard(r.request_id)

    def _inflight_prefill_reserved_blocks(self) -> int:
        """vLLM: blocks in-flight prefills still need to hold their full sequence (and, with
        speculative decoding, their first verify step: 1 + k tokens and k lookahead slots)."""
        extra = 1 + self._k + self._lookahead if self._k else 0
        remaining = self.kv.remaining_blocks
        return sum(remaining(r, extra) for r in self._inflight_prefills)

    def _spec_decode_step_blocks(self) -> int:
        """vLLM ``_spec_decode_step_blocks``: blocks of one verify step (1 + k tokens and the k
        lookahead slots); 0 without speculative decoding."""
        return -(-(1 + self._k + self._lookahead) // self.config.block_size) if self._k else 0

    def _padded_rows(self, st: _StepState, r: Request, computed: int) -> int | None:
        """Speculative decoding: the tokens of r's admission on ``computed`` tokens when vLLM pads
        it (a 1-token decode, nothing in the step mid-prefill, something running scheduled or
        tokens computed, room for 1 + k rows and the sampled token): 1 + k; 0 when not padded;
        None when the padded rows do not fit the budget (vLLM then admits nobody more)."""
        k = self._k
        if (not k or r.num_tokens - computed != 1 or st.prefill_scheduled
                or not (st.running_scheduled or computed > 0) or computed + k + 2 > self.config.max_model_len):
            return 0
        return None if 1 + k > st.token_budget - st.slots else 1 + k

    # ------------------------------------------------------------------ schedule
    def schedule(self) -> SchedulerOutput:
        """Plan one step: running requests first (list order), then admissions if nobody was preempted."""
        self._step_id += 1
        if not self.running and not self.waiting and not self.kv_holding_waiting:
            # Only finishes to report (vLLM's has_requests): what the passes below give, at once.
            self._finished_req_ids = set()
            out = SchedulerOutput(step_id=self._step_id, request_ids=(), num_scheduled_tokens=(),
                                  context_lens=(), samples=(), new_request_ids=(), resumed_request_ids=(),
                                  preempted_request_ids=(), total_num_scheduled_tokens=0)
            if self._debug:
                self.check_invariants(out)
            return out
        st = _StepState(self.config.max_num_batched_tokens, self.config.num_draft_slots, self.config.encoder_budget)
        if self._split is not None:
            self.kv.new_step_starts()
        interval = self._prefill_interval
        if interval > 1:        # hold prefill until the interval since the last prefill step has passed
            st.defer_prefills = (not self._prefill_capacity_bound
                                 and self._num_executed_steps + 1 - self._last_prefill_step < interval
                                 and any(not r.is_prefill_chunk for r in self.running))
            chunks = {id(r) for r in self.running if r.is_prefill_chunk}    # mid-prefill before this step
        n_eligible = len(self.running) + len(self.waiting) + len(self.kv_holding_waiting)
        thr = self.config.long_prefill_token_threshold if n_eligible > 1 else 0
        if thr and self.config.long_prefill_token_threshold_adaptive:    # a fair share of the budget at least
            thr = max(thr, self.config.max_num_batched_tokens // n_eligible)
        if self._k:
            self._schedule_running_spec(st, thr)
        else:
            self._schedule_running(st, thr)
        if interval > 1:
            prefill_scheduled = any(id(r) in chunks for r in st.reqs)
        if not st.preempted:
            if self.kv_role == "consumer":
                self._schedule_waiting_kv_consumer(st, thr)
            else:
                self._schedule_waiting(st, thr)
            if interval > 1 and not st.defer_prefills:     # a release step: could it admit everyone?
                waiting = len(self.waiting) + len(self.kv_holding_waiting)
                self._prefill_capacity_bound = waiting > len(self._deferred_waiting)
        if self._defer_block_free and st.reqs:
            self._sched_step_seq += 1       # _update_after_schedule stamps r.last_sched_seq
        out = self._update_after_schedule(st)
        if interval > 1:
            if out.total_num_scheduled_tokens > 0:
                self._num_executed_steps += 1
            if prefill_scheduled or st.prefill_admitted:
                self._last_prefill_step = self._num_executed_steps
        if self._debug:
            self.check_invariants(out)
        return out

    def _schedule_running(self, st: _StepState, thr: int) -> None:
        """Running requests in list order. Runs per running request per step, so it is written
        out: a request that holds blocks and whose new blocks (if any) are free takes the inline
        allocation (= `KVCacheManager._allocate_running`); anything else, the general path
        (`allocate_slots`, preempting from the tail, or by priority, until it fits)."""
        running, step_id = self.running, self._step_id
        budget = st.token_budget                    # kept local; st.token_budget synced around st.add
        lazy = self._lazy
        if lazy:
            # Positions of the requests that are not lazy this step; the runs between them are
            # listed in bulk (1 token each, context lazy_ctx + step) from the arrays aligned with
            # running. Only the tail of running is removed during the loop (preemption), so the
            # positions stay valid.
            run_ids, run_end, run_ctx = self._run_ids, self._run_end, self._run_ctx
            if self._wake:                          # filled blocks now cacheable, window frees due (_plan)
                for r in self._wake:
                    if r.lazy_end and r.lazy_visit > step_id:
                        run_end[run_ids.index(r.request_id)] = r.lazy_visit = step_id
                self._wake.clear()
            eager_at = [k for k, e in enumerate(run_end) if e <= step_id]   # (faster than compress/map)
            i = 0
            if budget >= len(running):                # (always: budget >= max_num_seqs by config)
                # Most steps: every request that needs a visit stays lazy (its block fits). Visit
                # those in order; the lazy requests up to the first one that does not (i) are
                # listed in one go, 1 token each, and the loop below takes over from there.
                visit, plan = self._visit, self._plan
                for k in eager_at:
                    r = running[k]
                    if not (step_id < r.lazy_end and visit(r, step_id)):
                        i = k                           # (a failed visit changed nothing)
                        break
                    run_end[k] = plan(r, step_id)
                else:
                    i = len(running)
                if i:
                    st.reqs += running[:i]
                    st.ids += run_ids[:i]
                    st.ctx += [c + step_id for c in run_ctx[:i]]     # (faster than map)
                    st.num_sched += [1] * i
                    st.samples += [True] * i
                    st.list_lazy(0, i)
                    budget -= i
                    if i == len(running):
                        st.token_budget = budget
                        return
            eager_at.append(len(running))
            p = 0
        else:
            i = 0
        kv = self.kv
        max_len = self.config.max_model_len
        stagger = self._decode_stagger
        bs, held_map, pool = kv.block_size, kv.req_to_blocks, kv.pool
        allocate_running = None if kv.inline_allocation else kv.allocate_running   # sliding-window groups
        split = self._split
        free_queue, caching = pool.free_queue, kv.enable_caching
        add_req, add_id, add_num, add_ctx = st.reqs.append, st.ids.append, st.num_sched.append, st.ctx.append
        # Fused _update_after_schedule: while every request scheduled so far took the fast path
        # (and without priority preemption, which may undo a scheduled request), advance each
        # one here. Nothing later in schedule() reads what this writes; the in-flight prefill
        # set is only read, so its discards wait for _update_after_schedule.
        fuse = not self._priority
        add_sample, is_async, inflight = st.samples.append, self.config.async_scheduling, self._inflight_prefills
        defer, seq = self._defer_block_free, self._sched_step_seq + 1    # schedule() bumps the seq
        while i < len(running) and budget > 0:
            if lazy:
                while eager_at[p] < i:
                    p += 1
                b = eager_at[p]
                if b > len(running):                # the tail was preempted
                    b = len(running)
                if b > i:                           # running[i:b] are lazy decodes
                    if b - i > budget:
                        b = i + budget
                    o = len(st.reqs)
                    st.reqs += running[i:b]
                    st.ids += run_ids[i:b]
                    st.ctx += [c + step_id for c in run_ctx[i:b]]
                    ones = b - i
                    st.list_lazy(o, o + ones)
                    st.num_sched += [1] * ones
                    if fuse:
                        st.samples += [True] * ones
                    budget -= ones
                    i = b
                    continue
            r = running[i]
            if r.lazy_end:
                if step_id < r.lazy_end and self._visit(r, step_id):     # still lazy
                    run_end[i] = self._plan(r, step_id)
                    o = len(st.reqs)
                    add_req(r)
                    add_id(r.request_id)
                    add_num(1)
                    add_ctx(r.lazy_ctx + step_id)
                    if fuse:
                        add_sample(True)
                    st.list_lazy(o, o + 1)
                    budget -= 1
                    i += 1
                    continue
                self._materialize(r, step_id - 1)   # its window ended, or its block does not fit
                run_end[i] = 0
            c = r.num_computed_tokens
            ph = r.num_output_placeholders
            if ph > 0 and c + 2 - ph >= r.prompt_len + r.max_tokens:
                i += 1  # async: the in-flight step already reaches max_tokens
                continue
            if stagger and step_id < r.next_decode_eligible_step:
                i += 1  # V2+PP+async: pp steps between the same request's decodes
                continue
            if st.defer_prefills and r.is_prefill_chunk:
                i += 1  # --prefill-schedule-interval: this prefill chunk waits for a release step
                continue
            known = r.prompt_len + r.num_output_tokens
            n = known + ph - c
            if 0 < thr < n:
                n = thr
            if n > budget:
                n = budget
            if n > max_len - c - 1:
                n = max_len - c - 1
            if split is not None and n > 0:
                n = split(r, c, n, self._max_prefill)
            enc = None
            if r.mm_inputs and c < r.mm_inputs[-1].end:     # images in the window: the encoder's say
                enc = self.encoder.try_schedule(r.request_id, r.mm_inputs, c, n, st.enc_budget)
                n = enc[1]
            if n == 0:
                i += 1
                continue
            # The inline allocation (= KVCacheManager._allocate_running; running: no watermark).
            need = c + n                            # < max_len when n > 0: n <= max_len - c - 1
            if n > 0 and need <= r.kv_num_blocks * bs and (allocate_running is None
                                                           or c - r.num_in_flight_tokens < r.kv_free_at):
                fits = True                         # its blocks hold the new tokens (and no window free is due)
            elif allocate_running is not None:     # HybridKVCacheManager: every group
                fits = n > 0 and allocate_running(r, n) is not None
            elif (n > 0 and (blocks := held_map.get(r.request_id)) is not None
                  and (num_new := -(-need // bs) - len(blocks)) <= free_queue.num_free_blocks):
                blocks.extend(pool.get_new_blocks(num_new))
                r.kv_num_blocks = len(blocks)
                fits = True
            else:
                fits = False                        # the general path (preempts until it fits)
            if fits:
                if enc is not None:
                    self._encoder_scheduled(st, r, enc)
                # full blocks to cache: min(need, known) // bs (the Request hashes every full block)
                if caching and (num_full := (need if need < known else known) // bs) > r.kv_num_cached_blocks:
                    kv.cache_blocks(r, num_full * bs)
                add_req(r)
                add_id(r.request_id)
                add_num(n)
                add_ctx(c)
                budget -= n
                i += 1
                if fuse:
                    if lazy and n == 1 and need == known + ph and (known > r.prompt_len or ph) \
                            and not r.num_stale_output_tokens and not (inflight and r in inflight) \
                            and not (r.mm_inputs and r.request_id in self.encoder.request_inputs):
                        # Lazy from this step for `last` steps (enable_lazy_decode). Here
                        # known + ph - c = 1, so lazy step k (0 <= k < last) has context c+k and
                        # its token makes known = c+k+2, which must not stop it or reach
                        # max_len (nor, async, be skipped as the last): c+k+2 < max_len and
                        # c+k+2 - prompt < max_tokens. Blocks to allocate, hash and cache on the
                        # way are events (_visit, _plan, update_from_output).
                        last = max_len - c - 2
                        if (m := r.max_tokens + r.prompt_len - c - 2) < last:
                            last = m
                        if last >= 2:
                            r.lazy_start = step_id
                            r.lazy_end = step_id + last
                            r.lazy_ctx = run_ctx[i - 1] = c - step_id
                            run_end[i - 1] = self._plan(r, step_id)
                            o = len(st.reqs)
                            st.list_lazy(o - 1, o)
                            add_sample(True)
                            continue
                    if defer:
                        r.last_sched_seq = seq
                    r.num_computed_tokens = need
                    r.num_in_flight_tokens += n
                    chunk = need < known + ph
                    r.is_prefill_chunk = chunk
                    add_sample(not chunk)
                    if not chunk:
                        if is_async:
                            r.num_output_placeholders = ph + 1
                            if stagger:
                                r.next_decode_eligible_step = step_id + stagger
                        if inflight and r in inflight:
                            st.prefills_done.append(r)
                continue
            fuse = False
            st.token_budget = budget
            reqs = st.reqs
            while True:
                blocks = kv.allocate_slots(r, n)
                if blocks is not None:
                    break
                victim = max(running, key=lambda q: (q.priority, q.arrival_s)) if self._priority else running[-1]
                if victim.lazy_end:                 # not scheduled this step yet (the tail)
                    self._materialize(victim, step_id - 1)
                    run_end[-1] = 0
                if self._defer_block_free and victim.last_sched_seq > self._processed_step_seq:
                    break  # P/D async: a deferred free would not help this allocation
                if self._priority:
                    vi = running.index(victim)
                    del running[vi]
                    if vi < i:
                        i -= 1
                    if victim in reqs:          # already scheduled this step: undo
                        st.undo(victim)
                else:
                    running.pop()
                    if lazy:
                        run_ids.pop()
                        run_end.pop()
                        run_ctx.pop()
                self._preempt(victim)
                st.preempted.append(victim)
                if victim is r:
                    break
            budget = st.token_budget                # st.undo may have given tokens back
            if blocks is None:
                if self._priority and r.status == RequestStatus.PREEMPTED:
                    continue  # r preempted itself; later (higher-priority) requests may still fit
                break
            st.add(r, n, r.num_computed_tokens)
            if enc is not None:
                self._encoder_scheduled(st, r, enc)
            budget -= n
            i += 1
        st.token_budget = budget
        if lazy:
            for k in range(i, len(running)):        # not scheduled this step: no longer lazy
                if run_end[k]:
                    self._materialize(running[k], step_id - 1)
                    run_end[k] = 0

    def _schedule_running_spec(self, st: _StepState, thr: int) -> None:
        """`_schedule_running` with speculative decoding: vLLM's running loop request by request
        (no inline allocation, no lazy decode). A request's drafts and async placeholders count
        among the tokens it is due; the drafts that fit are the step's ``spec`` for it (vLLM
        ``scheduled_spec_decode_tokens``), the rest are dropped; every allocation reserves the
        drafter's lookahead slots."""
        running, kv, step_id = self.running, self.kv, self._step_id
        max_len, stagger, priority = self.config.max_model_len, self._decode_stagger, self._priority
        i = 0
        while i < len(running) and st.token_budget > st.slots:
            r = running[i]
            c, ph = r.num_computed_tokens, r.num_output_placeholders
            if ph > 0 and c + 2 - ph >= r.prompt_len + r.max_tokens:
                i += 1  # async: the in-flight step reaches max_tokens even if every draft is rejected
                continue
            if stagger and step_id < r.next_decode_eligible_step:
                i += 1
                continue
            if st.defer_prefills and r.is_prefill_chunk:
                i += 1
                continue
            known = r.prompt_len + r.num_output_tokens
            n = known + r.spec_tokens + ph - c
            if 0 < thr < n:
                n = thr
            n = min(n, st.token_budget - st.slots, max_len - c - 1)
            if self._split is not None and n > 0:
                n = self._split(r, c, n, self._max_prefill)
            enc = None
            if r.mm_inputs and c < r.mm_inputs[-1].end:
                enc = self.encoder.try_schedule(r.request_id, r.mm_inputs, c, n, st.enc_budget)
                n = enc[1]
            if n == 0:
                i += 1
                continue
            while True:
                blocks = kv.allocate_slots(r, n, num_lookahead_tokens=self._lookahead)
                if blocks is not None:
                    break
                victim = max(running, key=lambda q: (q.priority, q.arrival_s)) if priority else running[-1]
                if self._defer_block_free and victim.last_sched_seq > self._processed_step_seq:
                    break  # P/D async: a deferred free would not help this allocation
                if priority:
                    vi = running.index(victim)
                    del running[vi]
                    if vi < i:
                        i -= 1
                    if victim in st.reqs:       # already scheduled this step: undo
                        st.undo(victim)
                else:
                    running.pop()
                self._preempt(victim)
                st.preempted.append(victim)
                if victim is r:
                    break
            if blocks is None:
                if priority and r.status == RequestStatus.PREEMPTED:
                    continue  # r preempted itself; later (higher-priority) requests may still fit
                break
            st.prefill_scheduled |= r.is_prefill_chunk
            st.add(r, n, c)
            if enc is not None:
                self._encoder_scheduled(st, r, enc)
            st.drafts_needed = st.drafts_needed or not _drafts_unused(r, c, n)
            if r.spec_tokens:
                drafts = n + c - known - ph
                if drafts > 0:
                    st.spec[r.request_id] = drafts
                r.spec_tokens = 0       # new drafts come with this step's output (or placeholders)
            i += 1
        st.running_scheduled = bool(st.reqs)

    def _append_running(self, r: Request) -> None:
        """Admit r at the tail of running (and of the lazy arrays aligned with it)."""
        self.running.append(r)
        if self._lazy:
            self._run_ids.append(r.request_id)
            self._run_end.append(0)
            self._run_ctx.append(0)

    def _admission_tokens(self, r: Request, computed: int, thr: int, budget: int, padded: int = 0) -> int | None:
        """Tokens a waiting request gets at admission; None when it must wait (no chunking).
        ``padded``: its tokens when padded to a speculative decode's rows (0: not padded)."""
        n = padded or r.num_tokens - computed
        if 0 < thr < n:
            n = thr
        if not self.config.enable_chunked_prefill and n > budget:
            return None
        return min(n, budget)

    def _schedule_waiting(self, st: _StepState, thr: int) -> None:
        cfg, kv, running, waiting = self.config, self.kv, self.running, self.waiting
        if not waiting:
            return                          # most steps: nothing to admit
        skipped: deque[Request] = deque()
        max_active = cfg.max_num_active_seqs or cfg.max_num_seqs
        max_loras = cfg.max_loras
        # LoRA: the adapters of every running request, scheduled this step or not (vLLM scheduled_loras)
        loras = {q.lora_id for q in running if q.lora_id} if max_loras else None
        while st.token_budget > st.slots and waiting:
            if len(running) >= max_active:
                break
            r = waiting.peek_request()
            if (r.num_stale_output_tokens and not r.drop_stale_output  # in-flight output of a preempted step
                    or loras is not None and r.lora_id and len(loras) == max_loras and r.lora_id not in loras):
                skipped.appendleft(waiting.pop_request())      # (or another adapter than max_loras running)
                if self._prefill_interval > 1:
                    self._deferred_waiting.add(r.request_id)
                continue
            hit_blocks, hit = kv.get_computed_blocks(r)
            if st.defer_prefills and hit < r.num_tokens - 1:
                break       # --prefill-schedule-interval: its prompt waits for a release step
            pad = self._padded_rows(st, r, hit)
            if pad is None:
                break           # vLLM: rather not schedule than schedule un-padded
            n = self._admission_tokens(r, hit, thr, st.token_budget - st.slots, pad)
            if n is None:
                break
            if self._split is not None:
                n = self._split(r, hit, n, self._max_prefill)
                if n == 0:
                    break       # no block-aligned chunk fits: admission ends for the step
            enc = None
            if r.mm_inputs and hit < r.mm_inputs[-1].end:
                enc = self.encoder.try_schedule(r.request_id, r.mm_inputs, hit, n, st.enc_budget)
                n = enc[1]
                if n == 0:      # the encoder cannot take its image: requeued behind (vLLM skip_request)
                    skipped.appendleft(waiting.pop_request())
                    if self._prefill_interval > 1:
                        self._deferred_waiting.add(r.request_id)
                    continue
            blocks = kv.allocate_slots(
                r, n, hit, hit_blocks, num_lookahead_tokens=self._lookahead,
                full_sequence_must_fit=cfg.scheduler_reserve_full_isl, has_scheduled_reqs=bool(running))
            if blocks is None:
                if r.mm_inputs and self.encoder is not None:
                    self.encoder.free(r.request_id, r.mm_inputs)    # vLLM untouches it in the encoder cache
                break  # head-of-line blocking
            if self._k:
                self._admitted_spec(st, r, hit, n, pad)
            kv.record_prefix_cache_stats(r, hit)
            waiting.pop_request()
            if self._prefill_interval > 1:
                self._deferred_waiting.discard(r.request_id)
                st.prefill_admitted |= hit < r.num_tokens - 1
            self._append_running(r)
            (st.new_ids if r.status == RequestStatus.WAITING else st.resumed_ids).append(r.request_id)
            if r.num_preemptions == 0:
                r.num_cached_tokens = hit
            st.add(r, n, hit)
            if enc is not None:
                self._encoder_scheduled(st, r, enc)
            r.status = RequestStatus.RUNNING
            r.num_computed_tokens = hit
            if loras is not None and r.lora_id:
                loras.add(r.lora_id)
        if skipped:
            waiting.prepend_requests(skipped)

    def _encoder_scheduled(self, st: _StepState, r: Request, enc: tuple[list[int], int, int, list[int]]) -> None:
        """r was scheduled with the encoder's plan ``enc`` (``EncoderScheduler.try_schedule``): its
        items to encode are the step's, their embeddings off the step's encoder budget, and they
        (with the step's repeats) take their room in the cache (vLLM ``_allocate_encoder_inputs``)."""
        items, _, budget, duplicates = enc
        if items:
            st.encoder[r.request_id] = items
            st.enc_budget = budget
            self.encoder.allocate(r.request_id, r.mm_inputs, items, duplicates)

    def _admitted_spec(self, st: _StepState, r: Request, computed: int, n: int, pad: int) -> None:
        """Speculative decoding: r admitted on ``computed`` tokens with n of them (``pad``: padded
        to a verify of placeholder drafts); no real drafts were proposed for it."""
        if pad:
            st.spec[r.request_id] = self._k
        r.real_drafts = 0
        st.drafts_needed = st.drafts_needed or not _drafts_unused(r, computed, n)

    def _schedule_waiting_kv_consumer(self, st: _StepState, thr: int) -> None:
        """`_schedule_waiting` of a P/D decode instance: vLLM's waiting loop with a KV connector.

        kv_holding_waiting is drained first. A request still pulling its KV is skipped (put
        back, in order, at the head of its queue after the pass); one whose pull finished is
        promoted (`_update_waiting_for_remote_kv`) and scheduled like a resumed request. A
        fresh remote-prefill request gets blocks for its whole prompt and no tokens
        (WAITING_FOR_REMOTE_KVS); a request without remote KV is scheduled as usual.
        """
        holding, waiting = self.kv_holding_waiting, self.waiting
        if not waiting and not self._finished_recving and (not holding or all(
                r.status == RequestStatus.WAITING_FOR_REMOTE_KVS for r in holding)):
            return      # most steps: nothing to admit (every holding request is skipped, in order)
        cfg, kv, running = self.config, self.kv, self.running
        skipped_holding: deque[Request] = deque()
        skipped_waiting: deque[Request] = deque()

        def skip(queue) -> None:
            r = queue.pop_request()
            holds = r.num_computed_tokens > 0 or r.status == RequestStatus.WAITING_FOR_REMOTE_KVS
            (skipped_holding if holds else skipped_waiting).appendleft(r)

        max_active = cfg.max_num_active_seqs or cfg.max_num_seqs
        while st.token_budget > st.slots:
            queue = holding if holding else waiting
            if not queue or len(running) >= max_active:
                break
            r = queue.peek_request()
            if r.status == RequestStatus.WAITING_FOR_REMOTE_KVS:
                if r.request_id not in self._finished_recving:
                    skip(queue)
                    continue
                self._update_waiting_for_remote_kv(r)
                r.status = RequestStatus.PREEMPTED if r.num_preemptions else RequestStatus.WAITING
            if r.num_stale_output_tokens and not r.drop_stale_output:
                skip(queue)
                continue
            lookup = r.num_computed_tokens == 0
            ext = 0
            if lookup:
                hit_blocks, hit = kv.get_computed_blocks(r)
                if r.kv_remote_prefill:     # NixlConnector.get_num_new_matched_tokens (less the backoff)
                    remote = r.prompt_len - self._backoff if r.prompt_len > self._backoff else r.prompt_len
                    ext = max(remote - hit, 0)
                computed = hit + ext
            else:
                hit_blocks, hit, computed = [], 0, r.num_computed_tokens
            load_async = ext > 0
            pad = 0
            if load_async:
                n = 0                       # loading remote KV: no forward work this step
            else:
                pad = self._padded_rows(st, r, computed)
                if pad is None:
                    break
                n = self._admission_tokens(r, computed, thr, st.token_budget - st.slots, pad)
                if n is None:
                    break
                if self._split is not None:
                    n = self._split(r, computed, n, self._max_prefill)
                    if n == 0:
                        break       # no block-aligned chunk fits: admission ends for the step
                    if pad and n != pad:
                        n, pad = 1, 0   # a promoted request's padded verify cut by the split: unpadded
            enc = None
            if n and r.mm_inputs and computed < r.mm_inputs[-1].end:
                enc = self.encoder.try_schedule(r.request_id, r.mm_inputs, computed, n, st.enc_budget)
                n = enc[1]
                if n == 0:
                    skip(queue)
                    continue
            blocks = kv.allocate_slots(      # an async load reserves no lookahead slots (vLLM)
                r, n, hit, hit_blocks, num_lookahead_tokens=0 if load_async else self._lookahead,
                full_sequence_must_fit=cfg.scheduler_reserve_full_isl,
                has_scheduled_reqs=bool(running), num_external_computed_tokens=ext, delay_cache_blocks=load_async,
                reserved_blocks=(self._inflight_prefill_reserved_blocks() + self._spec_decode_step_blocks()
                                 if load_async else 0))
            if blocks is None:
                if r.mm_inputs and self.encoder is not None:
                    self.encoder.free(r.request_id, r.mm_inputs)
                break  # head-of-line blocking
            r.kv_remote_prefill = False     # update_state_after_alloc: one transfer per request
            if lookup:
                kv.record_prefix_cache_stats(r, hit)
                if r.num_preemptions == 0:
                    r.num_cached_tokens = hit
            if load_async:
                r.status = RequestStatus.WAITING_FOR_REMOTE_KVS
                r.num_computed_tokens = computed
                self._inflight_prefills.add(r)
                st.remote_ids.append(r.request_id)
                skip(queue)
                continue
            if self._k:
                self._admitted_spec(st, r, computed, n, pad)
            queue.pop_request()
            self._append_running(r)
            (st.new_ids if r.status == RequestStatus.WAITING else st.resumed_ids).append(r.request_id)
            st.add(r, n, computed)
            if enc is not None:
                self._encoder_scheduled(st, r, enc)
            r.status = RequestStatus.RUNNING
            r.num_computed_tokens = computed
            if computed + n < r.num_tokens:
                self._inflight_prefills.add(r)
        if skipped_holding:
            holding.prepend_requests(skipped_holding)
        if skipped_waiting:
            waiting.prepend_requests(skipped_waiting)

    def _preempt(self, r: Request) -> None:
        self._free_request_blocks(r)
        if r.mm_inputs and self.encoder is not None:
            self.encoder.free(r.request_id, r.mm_inputs)
        self._inflight_prefills.discard(r)
        r.status = RequestStatus.PREEMPTED
        r.num_computed_tokens = 0
        r.spec_tokens = 0
        r.drop_stale_output = self._drop_stale_on_preempt or (r.drop_stale_output and r.num_stale_output_tokens > 0)
        r.num_stale_output_tokens = r.num_in_flight_tokens
        r.num_output_placeholders = 0
        r.num_preemptions += 1
        self.waiting.prepend_request(r)

    def _update_after_schedule(self, st: _StepState) -> SchedulerOutput:
        """Advance num_computed_tokens optimistically; async: one placeholder per sampling request."""
        samples = st.samples
        inflight = self._inflight_prefills
        for r in st.prefills_done:
            inflight.discard(r)
        k = len(samples)                        # already advanced by _schedule_running
        if k < len(st.reqs):
            is_async = self.config.async_scheduling
            stagger = self._decode_stagger
            next_eligible = self._step_id + stagger
            defer, seq = self._defer_block_free, self._sched_step_seq
            add_sample = samples.append
            k_spec, spec = self._k, st.spec
            for r, n in zip(st.reqs[k:], st.num_sched[k:]) if k else zip(st.reqs, st.num_sched):
                if r.lazy_end:                      # scheduled lazily (after a general-path request)
                    add_sample(True)
                    continue
                if defer:
                    r.last_sched_seq = seq          # P/D async: the step that last scheduled r
                c = r.num_computed_tokens + n
                r.num_computed_tokens = c
                r.num_in_flight_tokens += n
                chunk = c < r.prompt_len + r.num_output_tokens + r.num_output_placeholders
                r.is_prefill_chunk = chunk
                add_sample(not chunk)
                if not chunk:
                    if is_async:
                        if k_spec:      # the sampled token and the drafts verified; k new draft placeholders
                            r.num_output_placeholders += 1 + spec.get(r.request_id, 0)
                            r.spec_tokens = k_spec
                        else:
                            r.num_output_placeholders += 1
                        if stagger:
                            r.next_decode_eligible_step = next_eligible
                    if inflight:
                        inflight.discard(r)
        real = ()
        if self._k:     # the drafts the drafter really proposed; it proposes again after this step
            spec, proposed = st.spec, 0 if not st.drafts_needed else self._k
            real = tuple([min(spec.get(r.request_id, 0), r.real_drafts) for r in st.reqs])
            for r in st.reqs:
                r.real_drafts = proposed
        lo = st.lazy_out
        if lo:                                  # for update_from_output: skip the lazy ones
            n = len(st.reqs)
            if lo[1] == n and lo[0] == 0:       # (0, n): every request of the step is lazy
                self._masks[self._step_id] = False
            else:
                mask = [True] * n
                for a, b in zip(lo[::2], lo[1::2]):
                    mask[a:b] = [False] * (b - a)
                self._masks[self._step_id] = mask
        self._finished_req_ids = set()
        nums = st.num_sched
        return SchedulerOutput(
            step_id=self._step_id,
            request_ids=tuple(st.ids),
            num_scheduled_tokens=tuple(nums),
            context_lens=tuple(st.ctx),
            samples=tuple(samples),
            new_request_ids=tuple(st.new_ids),
            resumed_request_ids=tuple(st.resumed_ids),
            preempted_request_ids=tuple([r.request_id for r in st.preempted]) if st.preempted else (),
            total_num_scheduled_tokens=sum(nums),
            remote_kv_request_ids=tuple(st.remote_ids),
            requests=tuple(st.reqs),
            spec_tokens=tuple([st.spec.get(i, 0) for i in st.ids]) if self._k else (),
            real_spec_tokens=real,
            skip_drafts=bool(self._k) and not st.drafts_needed,
            lora_ids=tuple(sorted({r.lora_id for r in st.reqs} - {0})) if self.config.max_loras else (),
            encoder_inputs=tuple([(r.request_id, k) for r in st.reqs for k in st.encoder.get(r.request_id, ())])
            if st.encoder else (),
        )

    # ------------------------------------------------------------------ update
    def update_from_output(self, output: SchedulerOutput, now_s: float | None = None) -> UpdateResult:
        """Process a finished step: one sampled token per request whose step sampled.

        now_s: the time the step's output is processed; required in lazy decode mode, where the
        tokens of lazy requests are skipped here (not in the result; their times are written
        from these when they are materialised).

        Stops on max_tokens or max_model_len (FINISHED_LENGTH_CAPPED); finished requests are freed.
        Runs per scheduled request per step, so `Request.append_output_token` and the
        `KVCacheManager.cache_blocks` guard are written out here.
        """
        if self._k:
            return self._update_spec(output)
        kv = self.kv
        caching = kv.enable_caching
        if self._defer_block_free and output.total_num_scheduled_tokens > 0:
            self._processed_step_seq += 1       # every write of this and earlier steps is done
            kv.drain_deferred_frees(self._processed_step_seq)
        step = output.step_id
        entries = zip(output.requests, output.num_scheduled_tokens, output.samples)
        if self._lazy:
            if now_s is None or step != len(self._end_s) + 1:
                raise ValueError(f"lazy decode: update_from_output(step {step}, now_s={now_s!r}) needs the time "
                                 f"and the outputs in order (next: step {len(self._end_s) + 1})")
            self._end_s.append(now_s)
            self._processed_step = step
            # A lazy step of a request is not processed here (materialised later), unless the
            # request was materialised since this step was scheduled (self._late; rare: a window
            # ends before the last token): then in its place.
            mask = self._masks.pop(step, None)     # False: every request of the step was lazy
            if mask is not None:
                late = self._late.pop(step, None)
                if late:
                    if mask is False:
                        mask = [False] * len(output.requests)
                    index = output.requests.index
                    for r in late:
                        mask[index(r)] = True
                if mask is False or True not in mask:
                    mask = False                    # nothing to process but the fills below
                else:
                    entries = compress(entries, mask)
            frees = self._free_wakes.pop(step, None)
            if frees:                               # hybrid: a window free is due at the next schedule()
                nxt = self._step_id + 1
                for r in frees:
                    if r.lazy_end and r.lazy_free == step and r.lazy_visit > nxt:
                        self._wake.append(r)
            fills = self._fills.pop(step, None)
            if fills:                               # lazy tokens that fill a block: hash it
                nxt = self._step_id + 1             # the next schedule() may cache the block
                for r in fills:
                    j = r.lazy_start
                    if 0 < j <= step:
                        r._update_block_hashes(r.prompt_len + r.num_output_tokens + step - j + 1)
                        if caching and r.lazy_visit > nxt:
                            self._wake.append(r)    # its planned visit is too late (_plan)
            if mask is False:
                return _NOTHING                     # every request of the step was lazy
        tokens: list[str] = []
        token_reqs: list[Request] = []
        firsts: list[str] = []
        finished: list[str] = []
        stopped_running: set[Request] = set()
        stopped_waiting: set[Request] = set()
        max_len, requests, bs = self.config.max_model_len, self.requests, kv.block_size
        add_token, add_token_req = tokens.append, token_reqs.append
        for r, n, samples in entries:
            # A request leaves self.requests exactly when it finishes: skip it then.
            status_before = r.status
            if status_before > _PREEMPTED:
                continue
            rid = r.request_id
            r.num_in_flight_tokens -= n
            stale = False
            if r.num_stale_output_tokens > 0:
                stale = True
                r.num_stale_output_tokens -= n
                if r.drop_stale_output:
                    continue
            if r.mm_inputs:
                self._free_computed_images(r)
            if not samples:
                continue
            ph = r.num_output_placeholders
            k = r.num_output_tokens + 1                 # r.append_output_token(), written out:
            r.num_output_tokens = k
            known = r.prompt_len + k
            if known % r.block_size == 0:               # a block just filled: hash it
                r._update_block_hashes()
            stopped = known >= max_len or k >= r.max_tokens
            if stopped:
                r.status = RequestStatus.FINISHED_LENGTH_CAPPED
            if not stale and ph > 0:
                r.num_output_placeholders = ph - 1
                if status_before == _RUNNING and caching:
                    # kv.cache_blocks(r, processed tokens): full blocks min(done, known) // bs
                    done = r.num_computed_tokens - r.num_in_flight_tokens
                    if (num_full := (done if done < known else known) // bs) > r.kv_num_cached_blocks:
                        kv.cache_blocks(r, num_full * bs)
            add_token(rid)
            add_token_req(r)
            if k == 1:
                firsts.append(rid)
            if stopped:
                self._finish(r)
                finished.append(rid)
                (stopped_running if status_before == _RUNNING else stopped_waiting).add(r)
        self._drop_stopped(stopped_running, stopped_waiting)
        return UpdateResult(tuple(tokens), tuple(firsts), tuple(finished), tuple(token_reqs))

    def _free_computed_images(self, r: Request) -> None:
        """After a processed step of r (a request with images): its references to the images whose
        runs are computed, less the async placeholders' tokens, go (vLLM ``_free_encoder_inputs``)."""
        self.encoder.free_done(r.request_id, r.mm_inputs, r.num_computed_tokens - r.num_output_placeholders)

    def _finish(self, r: Request) -> None:
        """r stopped: report it, free its blocks (P/D producer: once D has read them), forget it."""
        rid = r.request_id
        self._finished_req_ids.add(rid)
        self._inflight_prefills.discard(r)
        if r.mm_inputs and self.encoder is not None:
            self.encoder.free(rid, r.mm_inputs)
        if self.kv_role is not None:
            self.kv.connector_finished(r)   # a sliding group frees what lies before its window
        if r.kv_remote_decode:
            self._delayed_free[rid] = r     # P/D producer: D reads the blocks first
        else:
            self._free_request_blocks(r)
        del self.requests[rid]

    def _drop_stopped(self, stopped_running: set[Request], stopped_waiting: set[Request]) -> None:
        """Remove the requests a processed step stopped from running / waiting (end of update)."""
        if stopped_running:                     # a few of running: deleted in place, last first
            running = self.running
            gone = sorted(map(running.index, stopped_running), reverse=True)
            if self._lazy:
                run_ids, run_end, run_ctx = self._run_ids, self._run_end, self._run_ctx
                for k in gone:
                    del running[k], run_ids[k], run_end[k], run_ctx[k]
            else:
                for k in gone:
                    del running[k]
        if stopped_waiting:
            self._deferred_waiting.difference_update(r.request_id for r in stopped_waiting)
            self.waiting.remove_requests(stopped_waiting)
            if self.kv_holding_waiting:
                self.kv_holding_waiting.remove_requests(stopped_waiting)
        if self._debug:
            self.kv.check_invariants(self.requests.values())

    def _update_spec(self, output: SchedulerOutput) -> UpdateResult:
        """``update_from_output`` with speculative decoding (vLLM 0.33's, request by request).

        A request whose step sampled gets 1 + accepted drafts (``accept_drafts``; placeholder
        drafts are never accepted); the rejected drafts roll back num_computed_tokens (when > 0)
        and the async placeholders, unless the output is stale (the request was preempted while
        the step ran). Tokens are appended one by one until a stop (max_tokens / max_model_len),
        which trims the rest and takes them off num_computed_tokens. Sync: the drafter then
        proposes k drafts for every request of the step still running past its prompt
        (``_propose_drafts``)."""
        kv, bs, max_len = self.kv, self.kv.block_size, self.config.max_model_len
        caching, accept = kv.enable_caching, self.accept_drafts
        if self._defer_block_free and output.total_num_scheduled_tokens > 0:
            self._processed_step_seq += 1       # every write of this and earlier steps is done
            kv.drain_deferred_frees(self._processed_step_seq)
        tokens: list[str] = []
        token_reqs: list[Request] = []
        counts: list[int] = []
        firsts: list[str] = []
        finished: list[str] = []
        stopped_running: set[Request] = set()
        stopped_waiting: set[Request] = set()
        for r, n, samples, drafts, real, ctx in zip(output.requests, output.num_scheduled_tokens, output.samples,
                                                    output.spec_tokens, output.real_spec_tokens, output.context_lens):
            status_before = r.status
            if status_before > _PREEMPTED:
                continue
            r.num_in_flight_tokens -= n
            stale = False
            if r.num_stale_output_tokens > 0:
                stale = True
                r.num_stale_output_tokens -= n
                if r.drop_stale_output:
                    continue
            if not samples:
                if r.mm_inputs:
                    self._free_computed_images(r)
                continue
            m = 1
            if drafts:
                accepted = accept(r, ctx, real) if real else 0      # placeholders are always rejected
                if not 0 <= accepted <= real:
                    raise ValueError(f"accept_drafts gave {accepted} accepted drafts of {real} for "
                                     f"{r.request_id!r}; must be in [0, {real}]")
                self.spec_stats.observe(drafts, accepted)
                if not stale:
                    rejected = drafts - accepted
                    if r.num_computed_tokens > 0:
                        r.num_computed_tokens -= rejected
                    if r.num_output_placeholders > 0:
                        r.num_output_placeholders -= rejected
                m += accepted
            if r.mm_inputs:
                self._free_computed_images(r)
            has_placeholders = r.num_output_placeholders > 0
            k0 = r.num_output_tokens
            got, stopped = m, False
            for j in range(1, m + 1):           # vLLM _update_request_with_output: stop checks per token
                r.append_output_token()
                if r.num_tokens >= max_len or r.num_output_tokens >= r.max_tokens:
                    stopped, got = True, j
                    if not stale:
                        r.num_computed_tokens -= m - j
                    break
            if not stale and has_placeholders:
                r.num_output_placeholders -= m  # every returned token, the trimmed ones too
            if stopped:
                r.status = RequestStatus.FINISHED_LENGTH_CAPPED
            if not stale and status_before == _RUNNING and caching:
                done, known = r.num_computed_tokens - r.num_in_flight_tokens, r.num_tokens
                if (num_full := (done if done < known else known) // bs) > r.kv_num_cached_blocks:
                    kv.cache_blocks(r, num_full * bs)
            tokens.append(r.request_id)
            token_reqs.append(r)
            counts.append(got)
            if k0 == 0:
                firsts.append(r.request_id)
            if stopped:
                self._finish(r)
                finished.append(r.request_id)
                (stopped_running if status_before == _RUNNING else stopped_waiting).add(r)
        self._drop_stopped(stopped_running, stopped_waiting)
        if not self.config.async_scheduling and output.total_num_scheduled_tokens > 0:
            self._propose_drafts(output)
        return UpdateResult(tuple(tokens), tuple(firsts), tuple(finished), tuple(token_reqs), tuple(counts))

    def _propose_drafts(self, output: SchedulerOutput) -> None:
        """Sync: the drafter's proposals after a step (vLLM ``update_draft_token_ids``): k drafts
        for each request of the step that is still running and not mid-prefill, none when the
        step skipped drafting (every request mid-prefill or finishing: no schedule changes)."""
        k = 0 if output.skip_drafts else self._k
        for r in output.requests:
            if r.status <= _PREEMPTED and r.request_id in self.requests:
                r.spec_tokens = 0 if r.is_prefill_chunk else k

    # ------------------------------------------------------------------ debug
    def check_invariants(self, out: SchedulerOutput | None = None) -> None:
        """Raise AssertionError if blocks or tokens are not conserved."""
        self.kv.check_invariants(self.requests.values())
        cfg = self.config
        if out is not None and out.total_num_scheduled_tokens > cfg.max_num_batched_tokens:
            raise AssertionError(f"step {out.step_id} scheduled {out.total_num_scheduled_tokens} tokens")
        if len(self.running) > cfg.max_num_seqs:
            raise AssertionError(f"{len(self.running)} running > max_num_seqs={cfg.max_num_seqs}")
        for r in self.running:      # (drafts in flight, up to k, are computed beyond the known tokens)
            if r.num_computed_tokens > r.num_tokens + r.num_output_placeholders + self._k:
                raise AssertionError(f"{r}: computed beyond known tokens")
            if r.num_computed_tokens > cfg.max_model_len:
                raise AssertionError(f"{r}: computed beyond max_model_len")
            if r.status != RequestStatus.RUNNING:
                raise AssertionError(f"{r} in running list")
        for r in self.waiting:
            if r.request_id in self.kv.req_to_blocks and self.kv.req_to_blocks[r.request_id]:
                raise AssertionError(f"waiting {r} holds blocks")
