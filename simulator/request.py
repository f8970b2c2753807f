"""Requests: the frozen workload input (`RequestSpec`) and the mutable simulator state (`Request`).

`Request` mirrors the fields of `vllm/v1/request.py::Request` that the v1 scheduler and KV cache
manager read. There are no prefill/decode phases: a request has `num_tokens` (prompt + outputs)
and `num_computed_tokens` (tokens whose KV is in the cache); a step grants tokens until the second
catches up with the first.

Content model. The simulator does not generate text. Every sampled output token has the id
`OUTPUT_TOKEN_ID` (the vLLM oracle test feeds the real scheduler the same id). Prompt content is
either explicit (`prompt_token_ids`) or "unique to this request" (`None`), in which case no block of
the request can ever match another request's block.

Block hashes are computed incrementally as blocks fill, exactly when vLLM's block hasher computes
them (`kv_cache_utils.get_request_block_hasher`): at creation for the full prompt blocks, then each
time an appended output token completes a block. Hash chain (block i covers tokens
[i*bs, (i+1)*bs)):

    h_0 = hash((root,    key_0))      key_i = tuple(block tokens)          if prompt_token_ids given
    h_i = hash((h_{i-1}, key_i))      root = None, or ("lora", lora_id) for a LoRA adapter's request
                                      (vLLM puts the adapter's name in every block's extra keys:
                                      requests of different adapters never share a block)
                                      with images (mm_inputs): (h_{i-1}, key_i, ids), ids = the
                                      identifiers of the images whose runs overlap block i
    h_i = hash((("u", content_key), i))                                    if prompt is unique
                                      (content_key: the request's session for a round of a
                                      multi-round session, whose prompt is its previous round's
                                      whole sequence plus new tokens; else the request id)
                                      (unique already: no chain; hashed in bulk, 2 x 64 blocks a
                                      1k prompt per P/D request)

Python's `hash` of an int tuple is deterministic; with a string inside it is stable within one
process, which is all the cache needs (only equality of hashes is used, never their order).
"""

from __future__ import annotations

import enum
from array import array
from itertools import repeat
from dataclasses import dataclass, field

from simulator.encoder_cache import MmInput

OUTPUT_TOKEN_ID = 0
"""Token id of every sampled output token (the simulator never models EOS; outputs end on length)."""


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload.

    prompt_token_ids: explicit prompt content (enables prefix sharing); None = content unique to
    this request. When given, its length must equal `prompt_len`.
    lora_id: the LoRA adapter the request runs (vLLM ``lora_int_id``, >= 1), 0 = the base model.
    session_id: the multi-round session the request is a round of ("" = none): its unique content
        continues the session's earlier rounds (``Request.content_key``), so a round's prompt hits
        the blocks its previous rounds left in the prefix cache.
    images: (height, width) in pixels of each image the request carries after its text, as the
        workload draws them (``prompt_len`` counts the text only until ``simulator.multimodal.
        place_images`` lays them out for a model's vision tower).
    image_ids: the images' content ids, aligned with ``images`` ("" = unique to the request; equal
        ids share an encoder-cache entry and prefix-cache blocks); empty = all unique.
    mm_inputs: the images laid out (their placeholder runs, within ``prompt_len``); empty until then.
    image_tokens: of ``prompt_len``, the laid-out images' tokens (runs and the template's markers);
        the rest is text (what ``vllm bench serve`` counts as the prompt).
    """

    request_id: str
    arrival_s: float
    prompt_len: int
    output_len: int
    priority: int = 0
    prompt_token_ids: tuple[int, ...] | None = None
    lora_id: int = 0
    session_id: str = ""
    images: tuple[tuple[int, int], ...] = ()
    image_ids: tuple[str, ...] = ()
    mm_inputs: tuple[MmInput, ...] = ()
    image_tokens: int = 0

    def __post_init__(self) -> None:
        if self.image_ids and len(self.image_ids) != len(self.images):
            raise ValueError(f"{self.request_id!r}: {len(self.image_ids)} image_ids for {len(self.images)} images")
        if self.session_id and self.prompt_token_ids is not None:
            raise ValueError(f"{self.request_id!r}: a session's round has unique content (no prompt_token_ids)")
        if self.lora_id < 0:
            raise ValueError(f"lora_id={self.lora_id} of {self.request_id!r}; must be >= 0 (0 = the base model)")
        if self.prompt_len < (0 if self.images else 1):     # (images alone make a prompt)
            raise ValueError(f"prompt_len={self.prompt_len} of {self.request_id!r}; must be >= 1")
        if self.output_len < 1:
            raise ValueError(f"output_len={self.output_len} of {self.request_id!r}; must be >= 1")
        if self.arrival_s < 0:
            raise ValueError(f"arrival_s={self.arrival_s} of {self.request_id!r}; must be >= 0")
        if self.prompt_token_ids is not None and len(self.prompt_token_ids) != self.prompt_len:
            raise ValueError(
                f"len(prompt_token_ids)={len(self.prompt_token_ids)} of {self.request_id!r}; "
                f"must equal prompt_len={self.prompt_len}"
            )


class RequestStatus(enum.IntEnum):
    """Same order as vLLM's `RequestStatus`: everything after PREEMPTED is finished."""

    WAITING = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()    # P/D decode side: blocks allocated, KV being pulled
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()


@dataclass(slots=True, eq=False)
class Request:
    """Mutable scheduler state of one request (identity semantics, like vLLM's Request).

    num_computed_tokens: tokens with KV in the cache, advanced optimistically at schedule time.
    num_output_placeholders: async scheduling; outputs scheduled but not yet returned.
    num_in_flight_tokens: tokens scheduled in steps whose output is not processed yet.
    num_stale_output_tokens: in-flight tokens of steps scheduled before a preemption.
    num_cached_tokens: prefix-cache hit tokens at the first admission; -1 before it.
    kv_remote_prefill: P/D decode side (vLLM ``kv_transfer_params["do_remote_prefill"]``): the
        prompt's KV is pulled from a prefill instance at the first admission; cleared then, so
        a later recompute (after a preemption) runs locally, as NixlConnector triggers one
        transfer per request.
    kv_remote_decode: P/D prefill side (``do_remote_decode``): the blocks are kept at finish
        until the decode side has read them (vLLM ``delay_free_blocks``).
    last_sched_seq: P/D async only: sequence number of the last step that scheduled it.
    kv_num_blocks / kv_num_cached_blocks: blocks the KV cache manager holds for it and how many of
        them are hash-registered (the manager keeps them equal to its tables; the scheduler reads
        them per step without a table look-up).
    block_hashes: one hash per full block of its known tokens, always
        ``len(block_hashes) == (num_tokens - hash_lookahead) // block_size`` (hashed as soon as a block
        and the ``hash_lookahead`` tokens after it are known).
    token_times_s: where the caller records the times of its output tokens (the benchmark client
        attaches an array and writes token k's time at [k - 1] from `UpdateResult.token_requests`);
        the scheduler never reads it. Timing is the caller's: the scheduler does not know the time,
        except in lazy decode mode, where it writes the times of lazily processed tokens.
    lazy_start / lazy_end / lazy_ctx / lazy_fill / lazy_free / lazy_visit: lazy decode (`Scheduler.enable_lazy_decode`):
        while ``lazy_start <= step < lazy_end`` the request is a decode whose per-step progress
        the scheduler does not write; num_computed_tokens, num_output_tokens,
        num_output_placeholders, num_in_flight_tokens, last_sched_seq and token_times_s lag
        until the scheduler materialises it (`Scheduler.sync_lazy` for all).
    """

    request_id: str
    arrival_s: float
    prompt_len: int
    max_tokens: int
    block_size: int
    # Read and written per step: declared together (adjacent slots share cache lines).
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_output_placeholders: int = 0
    num_in_flight_tokens: int = 0
    num_stale_output_tokens: int = 0
    is_prefill_chunk: bool = False
    kv_num_blocks: int = 0
    kv_num_cached_blocks: int = 0
    kv_free_at: int = 0                     # hybrid KV: processed tokens that free its next out-of-window block
    token_times_s: array | None = None
    lazy_end: int = 0                       # lazy decode (Scheduler): 0, or the first step not lazy
    lazy_start: int = 0                     # first lazy step (0: not lazy)
    lazy_ctx: int = 0                       # num_computed_tokens before lazy step s is lazy_ctx + s
    lazy_fill: int = 0                      # last lazy step registered to hash the block it fills
    lazy_free: int = 0                      # hybrid KV: last lazy step registered to wake it for a window free
    lazy_visit: int = 0                     # next lazy step the scheduler must visit (its plan)
    # Rarely touched.
    priority: int = 0
    prompt_token_ids: tuple[int, ...] | None = None
    next_decode_eligible_step: int = 0      # async + PP: first schedule() step id that may decode it
    drop_stale_output: bool = False
    num_preemptions: int = 0
    num_cached_tokens: int = -1
    kv_remote_prefill: bool = False
    kv_remote_decode: bool = False
    last_sched_seq: int = 0
    spec_tokens: int = 0                    # speculative decoding: drafts to verify next (vLLM len(spec_token_ids))
    real_drafts: int = 0                    # of those, real ones: drafts the drafter proposed after its last step
    hash_lookahead: int = 0                 # tokens after a block its hash covers (vLLM 1 with an EAGLE drafter)
    lora_id: int = 0                        # LoRA adapter (vLLM lora_int_id), 0 = the base model
    content_key: str = ""                   # unique content's hash key: the session, or (default) the request id
    mm_inputs: tuple[MmInput, ...] = ()     # its images' placeholder runs (simulator.encoder_cache), in order
    block_hashes: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.content_key:
            self.content_key = self.request_id
        self._update_block_hashes()

    @classmethod
    def from_spec(cls, spec: RequestSpec, block_size: int) -> Request:
        return cls(
            request_id=spec.request_id,
            arrival_s=spec.arrival_s,
            prompt_len=spec.prompt_len,
            max_tokens=spec.output_len,
            block_size=block_size,
            priority=spec.priority,
            prompt_token_ids=spec.prompt_token_ids,
            lora_id=spec.lora_id,
            content_key=spec.session_id,
            mm_inputs=spec.mm_inputs,
        )

    @property
    def num_tokens(self) -> int:
        """Prompt tokens + output tokens returned so far (vLLM `num_tokens`; no spec tokens)."""
        return self.prompt_len + self.num_output_tokens

    @property
    def is_finished(self) -> bool:
        return self.status > RequestStatus.PREEMPTED

    def append_output_token(self) -> None:
        """Append one sampled token (`OUTPUT_TOKEN_ID`) and hash any block it completes."""
        self.num_output_tokens += 1
        known = self.prompt_len + self.num_output_tokens
        if (len(self.block_hashes) + 1) * self.block_size + self.hash_lookahead <= known:
            self._update_block_hashes()     # a block just became full (cheap test first: per token)

    def set_hash_lookahead(self, tokens: int) -> None:
        """Hash each block with the ``tokens`` tokens after it (vLLM's ``num_hash_lookahead_tokens``:
        1 with an EAGLE-family drafter and prefix caching): a block is hashed, so cacheable and
        hittable, only once they are known, and a hit needs them to match too."""
        if tokens != self.hash_lookahead:
            self.hash_lookahead = tokens
            self.block_hashes = []
            self._update_block_hashes()

    def _update_block_hashes(self, num_tokens: int = 0) -> None:
        """Hash every full block of the first num_tokens tokens (default: num_tokens) not hashed
        yet, each with the ``hash_lookahead`` tokens after it, which must be among them."""
        bs, hashes = self.block_size, self.block_hashes
        n = len(hashes)
        num_tokens = (num_tokens or self.prompt_len + self.num_output_tokens) - self.hash_lookahead
        if self.prompt_token_ids is None:
            m = num_tokens // bs
            if m == n + 1:                  # one block (an output token filled it): per block
                hashes.append(hash((("u", self.content_key), n)))
            elif m > n:
                hashes += map(hash, zip(repeat(("u", self.content_key)), range(n, m)))
            return
        parent = hashes[-1] if n else (("lora", self.lora_id) if self.lora_id else None)
        mm = self.mm_inputs
        while (n + 1) * bs <= num_tokens:
            key = self._block_key(n)
            parent = hash((parent, key, self._mm_keys(n * bs, (n + 1) * bs)) if mm else (parent, key))
            hashes.append(parent)
            n += 1

    def _block_key(self, i: int) -> tuple:
        """Tokens of block i and the ``hash_lookahead`` after it (explicit prompts; outputs are
        OUTPUT_TOKEN_ID)."""
        bs, p = self.block_size, self.prompt_len
        start, end = i * bs, (i + 1) * bs + self.hash_lookahead
        if end <= p:
            return self.prompt_token_ids[start:end]
        head = self.prompt_token_ids[start:p] if start < p else ()
        return head + (OUTPUT_TOKEN_ID,) * (end - max(start, p))

    def _mm_keys(self, start: int, end: int) -> tuple[str, ...]:
        """Identifiers of the images whose runs overlap tokens [start, end) (vLLM's block extra
        keys: a block holding part of an image hashes the image's content too)."""
        return tuple([m.identifier for m in self.mm_inputs if m.offset < end and m.end > start])

    def __lt__(self, other: Request) -> bool:
        """Priority-queue order of vLLM: (priority, arrival, request_id); lower is served first."""
        if self.priority != other.priority:
            return self.priority < other.priority
        if self.arrival_s != other.arrival_s:
            return self.arrival_s < other.arrival_s
        if self.request_id != other.request_id:
            return self.request_id < other.request_id
        return id(self) < id(other)

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.name}, computed={self.num_computed_tokens}, "
            f"tokens={self.num_tokens}, out={self.num_output_tokens}/{self.max_tokens})"
        )
