"""Scheduler configuration and the narrow results the scheduler hands to its caller."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.request import Request


@dataclass(frozen=True)
class SchedulerConfig:
    """vLLM 0.33 scheduler knobs (defaults as in `vllm/config/scheduler.py` where one exists).

    max_num_seqs: cap on running requests (checked at admission).
    max_num_batched_tokens: token budget of one step (prefill chunks + decodes).
    max_model_len: context cap; a request stops at num_tokens >= max_model_len.
    long_prefill_token_threshold: cap on one request's tokens per step (0 = off); ignored in a
        step where only one request is running or waiting (0.33).
    policy: "fcfs" or "priority" (lower priority value served first).
    async_scheduling: mirror `AsyncScheduler` (vLLM 0.33 default on); see `Scheduler` docstring.
    watermark: fraction of blocks kept free at admission when something runs (``--watermark``).
    max_num_active_seqs: cap on requests admitted into RUNNING (None: max_num_seqs); the model
        runner keeps max_num_seqs slots (``--max-num-active-seqs``, vLLM 0.31+).
    long_prefill_token_threshold_adaptive: the threshold is at least max_num_batched_tokens //
        (running + waiting) requests (``--long-prefill-token-threshold-adaptive``, vLLM 0.31+).
    scheduler_reserve_full_isl: admit a request only when its whole prompt's blocks fit, not just
        its first chunk's (``--no-scheduler-reserve-full-isl`` turns it off; vLLM 0.19+).
    prefill_schedule_interval: admit or continue prefills only once every N executed steps while
        something decodes, unless the last release step left requests it could not admit (vLLM's
        local prefill cadence, ``--prefill-schedule-interval``, 0.24+; 1 = every step).
    debug: check invariants every step and raise (also on with env FRONTIER_SCHED_DEBUG=1).
    pipeline_parallel_size: async + PP > 1 (model runner V2): a request decoded in step N is
        next eligible to decode in step N + pp (``AsyncScheduler.decode_stagger``), so the pp
        steps in flight carry disjoint decode micro-batches.
    num_speculative_tokens: drafts proposed per request and step (``--speculative-config``'s
        num_speculative_tokens; 0 = no speculative decoding). A decode step then verifies 1 + k
        tokens per request; rejected drafts roll num_computed_tokens back.
    num_lookahead_tokens: KV slots reserved past the scheduled tokens for the drafter's own KV
        (vLLM ``VllmConfig.num_lookahead_tokens``: k for EAGLE-family drafters and draft models).
    num_draft_slots: input rows the drafter adds per scheduled request (vLLM 0.33
        ``SpeculativeConfig.max_num_new_slots_for_drafting``: 1 for a draft model, whose first
        pass takes the request's tokens plus the sampled one; 0 for the EAGLE family): each
        scheduled request costs its tokens plus these of max_num_batched_tokens (vLLM's
        ``input_budget``), and scheduling stops once no more than these are left.
    eagle_drafter: the drafter reads the target's hidden states (vLLM ``use_eagle()``: EAGLE,
        EAGLE-3, MTP): with prefix caching a block's hash covers the token after it, and behind a
        KV connector a prefix hit drops its last block (``use_eagle_block_drop``). False for a
        draft model, which has neither.
    max_loras: LoRA adapters at most in the batch (``--max-loras`` with ``--enable-lora``; 0 = LoRA
        off): the adapters of the running requests count, and a waiting request of another
        adapter is skipped (left in place, in order) while they number max_loras.
    encoder_budget: images (``simulator.encoder_cache``): the embeddings the vision tower may
        compute in one step and the encoder cache's size, both vLLM's max(max_num_batched_tokens,
        the tower's largest item); 0 = no vision tower (requests carry no images).
    disable_chunked_mm_input: a step's window never covers part of an image it starts before
        (``--disable-chunked-mm-input``); it stops before the image instead.
    """

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    long_prefill_token_threshold: int = 0
    policy: str = "fcfs"
    async_scheduling: bool = True
    enable_chunked_prefill: bool = True
    watermark: float = 0.0
    max_num_active_seqs: int | None = None
    long_prefill_token_threshold_adaptive: bool = False
    scheduler_reserve_full_isl: bool = True
    prefill_schedule_interval: int = 1
    block_size: int = 16
    enable_prefix_caching: bool = True
    debug: bool = False
    pipeline_parallel_size: int = 1
    num_speculative_tokens: int = 0
    num_lookahead_tokens: int = 0
    num_draft_slots: int = 0
    eagle_drafter: bool = True
    max_loras: int = 0
    encoder_budget: int = 0
    disable_chunked_mm_input: bool = False

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "block_size",
                     "pipeline_parallel_size", "prefill_schedule_interval"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)}; must be >= 1")
        for name in ("num_speculative_tokens", "num_lookahead_tokens", "num_draft_slots", "max_loras",
                     "encoder_budget"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)}; must be >= 0")
        if self.num_lookahead_tokens and self.max_num_batched_tokens <= self.num_lookahead_tokens:
            raise ValueError(f"max_num_batched_tokens={self.max_num_batched_tokens}; must be > "
                             f"num_lookahead_tokens={self.num_lookahead_tokens} (vLLM: no slot left to schedule a token)")
        k = self.num_speculative_tokens
        if self.num_draft_slots and not k:
            raise ValueError(f"num_draft_slots={self.num_draft_slots} without speculative decoding "
                             "(num_speculative_tokens=0); the drafter's slots need a drafter")
        if k and 0 < self.long_prefill_token_threshold < 1 + k:
            raise ValueError(f"long_prefill_token_threshold={self.long_prefill_token_threshold} with "
                             f"num_speculative_tokens={k}: must be 0 or >= {1 + k} (vLLM 0.33 stops on an assertion "
                             "when the threshold cuts a newly admitted decode padded to 1 + k tokens)")
        if self.policy not in ("fcfs", "priority"):
            raise ValueError(f"policy={self.policy!r}; valid: 'fcfs', 'priority'")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"watermark={self.watermark}; must be in [0, 1)")
        if self.max_num_active_seqs is not None and not 1 <= self.max_num_active_seqs <= self.max_num_seqs:
            raise ValueError(f"max_num_active_seqs={self.max_num_active_seqs}; must be in [1, "
                             f"max_num_seqs={self.max_num_seqs}]")
        if not 0 <= self.long_prefill_token_threshold <= self.max_model_len:
            raise ValueError(
                f"long_prefill_token_threshold={self.long_prefill_token_threshold}; "
                f"must be in [0, max_model_len={self.max_model_len}]"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens}; must be >= "
                f"max_num_seqs={self.max_num_seqs}"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens}; must be >= "
                f"max_model_len={self.max_model_len} when chunked prefill is off"
            )

    @property
    def debug_checks(self) -> bool:
        return self.debug or os.environ.get("FRONTIER_SCHED_DEBUG", "") not in ("", "0")


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """One step's plan. Per-request tuples are aligned and in vLLM's scheduling order
    (running requests in list order, then newly admitted/resumed ones).

    context_lens: num_computed_tokens before the step (prefix hits included for admissions).
    samples: whether the step reaches the end of the request's known tokens, so the forward pass
        produces an output token for it (False for a partial prefill chunk).
    requests: the scheduled `Request` objects, aligned with request_ids (the scheduler's own
        handle for update_from_output; not part of equality or repr).
    """

    step_id: int
    request_ids: tuple[str, ...]
    num_scheduled_tokens: tuple[int, ...]
    context_lens: tuple[int, ...]
    samples: tuple[bool, ...]
    new_request_ids: tuple[str, ...]
    resumed_request_ids: tuple[str, ...]
    preempted_request_ids: tuple[str, ...]
    total_num_scheduled_tokens: int
    remote_kv_request_ids: tuple[str, ...] = ()   # P/D consumer: admitted for a KV pull this step
    requests: tuple[Request, ...] = field(default=(), compare=False, repr=False)
    # Speculative decoding only (else empty): drafts each request verifies this step, aligned with
    # request_ids (vLLM ``len(scheduled_spec_decode_tokens[id])``; 0 for none), and how many of them
    # are real drafts the target may accept (the rest are -1 placeholders, always rejected: a newly
    # admitted decode's padding, or async placeholders after a step that proposed none).
    spec_tokens: tuple[int, ...] = ()
    real_spec_tokens: tuple[int, ...] = ()
    skip_drafts: bool = False   # no request of the step can use drafts proposed after it: none are
    lora_ids: tuple[int, ...] = ()  # LoRA (max_loras > 0): the scheduled requests' adapters, distinct, ascending
    # images: the items the tower encodes this step, as (request id, item index) in scheduling
    # order (vLLM ``scheduled_encoder_inputs``)
    encoder_inputs: tuple[tuple[str, int], ...] = ()

    @property
    def encoder_patches(self) -> tuple[int, ...]:
        """Patches of each item the tower encodes this step (its work), in ``encoder_inputs``' order."""
        if not self.encoder_inputs:
            return ()
        by_id = dict(zip(self.request_ids, self.requests))
        return tuple([by_id[rid].mm_inputs[k].patches for rid, k in self.encoder_inputs])

    @property
    def num_loras(self) -> int:
        """Distinct adapters among the scheduled requests (0 without LoRA)."""
        return len(self.lora_ids)

    def as_dict(self) -> dict[str, int]:
        return dict(zip(self.request_ids, self.num_scheduled_tokens))


@dataclass(frozen=True, slots=True)
class UpdateResult:
    """What processing one step's output produced, for the caller to time.

    token_request_ids: requests that received one output token (includes first tokens and the
        stale token of a request preempted while that step was in flight).
    first_token_request_ids: subset receiving their first output token.
    finished_request_ids: requests that finished (their blocks are already freed).
    token_requests: the `Request` objects of token_request_ids, aligned (not part of equality).
    num_new_tokens: speculative decoding only (else empty): tokens each of token_request_ids
        received (1 + accepted drafts, trimmed at a stop), aligned.
    aborted_request_ids: requests the engine aborted since the last result (SGLang: the last
        request of a decode batch whose next token does not fit even alone); the client counts
        them as failed.
    """

    token_request_ids: tuple[str, ...]
    first_token_request_ids: tuple[str, ...]
    finished_request_ids: tuple[str, ...]
    token_requests: tuple[Request, ...] = field(default=(), compare=False, repr=False)
    num_new_tokens: tuple[int, ...] = ()
    aborted_request_ids: tuple[str, ...] = ()
