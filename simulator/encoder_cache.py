"""The scheduler's side of multimodal inputs: vLLM 0.33's encoder budget and encoder cache.

A request's images are placeholder runs in its prompt (``MmInput``, ``Request.mm_inputs``). A
step that schedules prompt tokens overlapping a run must have the run's embeddings: computed by
the vision tower in that step (every embedding of the item at once: the tower's attention is
bidirectional) or already in the encoder cache (computed in an earlier chunk's step, or by another
request with the same image). ``EncoderScheduler`` mirrors, for one scheduler:

* ``try_schedule``: ``Scheduler._try_schedule_encoder_inputs`` - which items of the window
  [computed, computed + n) to encode this step, within the step's encoder compute budget and
  the cache's room (evicting unreferenced entries oldest first); when an item cannot be, the
  window stops before it (or, when it has started already, the request gets nothing this step);
  with ``disable_chunked_mm_input`` a window that would cover only part of an item stops before
  it;
* ``allocate`` (``_allocate_encoder_inputs``), ``free_done`` (``_free_encoder_inputs``, after a
  step: items whose run is wholly computed drop the request's reference) and ``free`` (finish /
  preemption);
* the cache itself: vLLM's ``EncoderCacheManager`` (``vllm/v1/core/encoder_cache_manager.py``):
  capacity in embeddings, entries keyed by the item's identifier and shared by the requests that
  hold them, unreferenced entries kept until room is needed (LRU by the order they became free).

Both budgets (``SchedulerConfig.encoder_budget``) are vLLM's ``compute_mm_encoder_budget``:
max(max_num_batched_tokens, the tower's largest item).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MmInput:
    """One multimodal item of a request's prompt (vLLM ``MultiModalFeatureSpec``).

    offset / length: its placeholder run in the prompt (tokens). num_embeds: the embeddings the
    tower computes for it, at tokens [offset + lead, offset + lead + num_embeds) of the run (the
    rest are marker tokens: Gemma 3's newlines and image start / end). patches: the tower's work
    (patches its blocks run over). identifier: its content hash (vLLM ``mm_hash``); equal
    identifiers share one encoder-cache entry and prefix-cache blocks.
    """

    offset: int
    length: int
    num_embeds: int
    patches: int
    identifier: str

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def lead(self) -> int:
        return (self.length - self.num_embeds) // 2


class EncoderScheduler:
    """Encoder budget and cache of one scheduler (module docstring)."""

    def __init__(self, budget: int, disable_chunked_mm_input: bool = False) -> None:
        if budget < 1:
            raise ValueError(f"encoder budget={budget}; must be >= 1")
        self.disable_chunked = disable_chunked_mm_input
        self.num_free_slots = budget          # the cache's room (embeddings), as big as the step's budget
        self.num_freeable_slots = budget
        self.cached: dict[str, set[str]] = {}        # identifier -> ids of the requests holding it
        self.num_embeds_by_id: dict[str, int] = {}
        self.request_inputs: dict[str, set[int]] = {}   # request id -> its item indices referenced
        self.freeable: OrderedDict[str, int] = OrderedDict()
        self.num_encoded = 0        # items the tower encoded (allocations), and entries evicted
        self.num_evicted = 0

    # ---- cache (EncoderCacheManager) ------------------------------------------------------
    def _check_and_update(self, request_id: str, item: MmInput, i: int) -> bool:
        ident = item.identifier
        holders = self.cached.get(ident)
        if holders is None:
            return False
        if not holders:
            self.num_freeable_slots -= self.freeable.pop(ident)
        holders.add(request_id)
        self.request_inputs.setdefault(request_id, set()).add(i)
        return True

    def _can_allocate(self, num_embeds: int, budget: int, scheduled: int) -> bool:
        if num_embeds > budget:
            return False
        num_embeds += scheduled
        if num_embeds <= self.num_free_slots:
            return True
        if num_embeds > self.num_freeable_slots:
            return False
        while num_embeds > self.num_free_slots:
            ident, n = self.freeable.popitem(last=False)
            del self.cached[ident]
            del self.num_embeds_by_id[ident]
            self.num_free_slots += n
            self.num_evicted += 1
        return True

    def _allocate(self, request_id: str, item: MmInput, i: int) -> None:
        ident = item.identifier
        self.cached.setdefault(ident, set()).add(request_id)
        self.num_embeds_by_id.setdefault(ident, item.num_embeds)
        self.request_inputs.setdefault(request_id, set()).add(i)
        self.num_free_slots -= item.num_embeds
        self.num_freeable_slots -= item.num_embeds

    def _free_input(self, request_id: str, items: tuple[MmInput, ...], i: int) -> None:
        ids = self.request_inputs.get(request_id)
        ident = items[i].identifier
        if ids is not None and i in ids:
            ids.remove(i)
            if not ids:
                del self.request_inputs[request_id]
        if not self.cached.get(ident):
            return
        if any(items[j].identifier == ident for j in self.request_inputs.get(request_id, ())):
            return              # another item of the request holds the same content
        holders = self.cached[ident]
        holders.discard(request_id)
        if not holders:
            n = self.num_embeds_by_id[ident]
            self.freeable[ident] = n
            self.num_freeable_slots += n

    # ---- scheduler side -------------------------------------------------------------------
    def try_schedule(self, request_id: str, items: tuple[MmInput, ...], computed: int, n: int,
                     budget: int) -> tuple[list[int], int, int, list[int]]:
        """vLLM ``_try_schedule_encoder_inputs`` for a request whose window is [computed,
        computed + n): (items to encode this step, the tokens it may schedule, the encoder
        budget left after them, items repeated within the step). Items already cached gain the
        request's reference here, as vLLM's ``check_and_update_cache`` does."""
        if n == 0 or not items:
            return [], n, budget, []
        end = computed + n
        to_schedule: list[int] = []
        duplicates: list[int] = []
        this_step: set[str] = set()
        embeds = 0
        for i, item in enumerate(items):
            if item.end <= computed:
                continue
            if item.offset >= end:
                break
            start = item.offset
            if self.disable_chunked and computed <= start and end < item.end:
                n = max(0, start - computed)
                break
            if item.identifier in this_step:
                duplicates.append(i)
                continue
            if self._check_and_update(request_id, item, i):
                continue
            if not self._can_allocate(item.num_embeds, budget, embeds):
                n = min(n, start - computed) if computed < start else 0
                break
            lo = max(0, computed - start)
            hi = min(item.length, end - start)
            if min(hi, item.lead + item.num_embeds) - max(lo, item.lead) <= 0:
                continue            # the window covers only marker tokens of the run
            embeds += item.num_embeds
            budget -= item.num_embeds
            this_step.add(item.identifier)
            to_schedule.append(i)
        return to_schedule, n, budget, duplicates

    def allocate(self, request_id: str, items: tuple[MmInput, ...], scheduled: list[int],
                 duplicates: list[int]) -> None:
        """vLLM ``_allocate_encoder_inputs``: cache room for the items encoded this step."""
        for i in scheduled:
            self._allocate(request_id, items[i], i)
        self.num_encoded += len(scheduled)
        for i in duplicates:
            self._check_and_update(request_id, items[i], i)

    def free_done(self, request_id: str, items: tuple[MmInput, ...], processed: int) -> None:
        """vLLM ``_free_encoder_inputs`` after a step: drop the request's reference to every item
        whose run ends at or before ``processed`` (num_computed_tokens less async placeholders)."""
        ids = self.request_inputs.get(request_id)
        if not ids:
            return
        for i in sorted(ids):
            if items[i].end <= processed:
                self._free_input(request_id, items, i)

    def free(self, request_id: str, items: tuple[MmInput, ...]) -> None:
        """Drop every reference the request holds (finish, preemption: vLLM ``free``)."""
        for i in sorted(self.request_inputs.get(request_id, ())):
            self._free_input(request_id, items, i)
