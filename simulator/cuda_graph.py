"""CUDA-graph runtime adapter: capture sizes and per-step dispatch, as vLLM 0.33 does it.

Mirrors `VllmConfig._set_cudagraph_sizes` (vllm/config/vllm.py), the default
FULL_AND_PIECEWISE mode and the dispatch of model runner V2, the 0.33 default
(`CudaGraphManager._init_candidates` / `dispatch` in vllm/v1/worker/gpu/cudagraph_utils.py;
for one token per decode request it agrees with V1's `CudagraphDispatcher`). With
speculative decoding V2 keeps the PIECEWISE sizes as they are and captures FULL decode
graphs at each size rounded up to a multiple of q (V1 would instead round the whole list).
Sizes count tokens. User-given `--cudagraph-capture-sizes` / `--max-cudagraph-capture-size`
and `cudagraph_mode` (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE) follow the
same code (`resolve_capture_sizes`), and so does `--performance-mode interactivity` (every size from
1 to 32 captured). Not modelled: dynamic speculative tiers, LoRA keys, attention backends or
models that lower the mode.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from frontier.gpu import is_sm100_family
from simulator.vllm_version import CAPTURE_APPENDS_BATCH_TOKENS, CAPTURE_UNIFORM_DECODE, SEMANTICS, SM100_CAPTURE_1024

DEFAULT_MAX_CAPTURE = 512
INTERACTIVITY_MAX = 32      # --performance-mode interactivity: every capture size 1..32
SM100_MAX_CAPTURE = 1024    # datacenter Blackwell (B200/GB200/B300): capture ceiling 1024
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
DEFAULT_CUDAGRAPH_MODE = "FULL_AND_PIECEWISE"   # -O2, vllm serve's default optimization level


def _grid(max_size: int, interactivity: bool = False) -> list[int]:
    """[1,2,4] (``--performance-mode interactivity``: every size 1..32) + multiples of 8 below 256 +
    multiples of 16 from 256, all <= max_size (unsorted, may repeat: callers sort and dedupe)."""
    sizes = list(range(1, min(max_size, INTERACTIVITY_MAX) + 1)) if interactivity else [n for n in (1, 2, 4)
                                                                                        if n <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    return sizes


def _grid_with_batch_tokens(max_size: int, max_num_batched_tokens: int, vllm_version: tuple[int, int],
                            interactivity: bool = False) -> list[int]:
    """The default grid up to ``max_size`` tokens, plus max_num_batched_tokens when it fits under
    it (from vLLM 0.21, so the largest batch is captured even off-stride)."""
    sizes = _grid(max_size, interactivity)
    if (vllm_version >= CAPTURE_APPENDS_BATCH_TOKENS and max_num_batched_tokens <= max_size
            and max_num_batched_tokens not in sizes):
        sizes.append(max_num_batched_tokens)
    return sizes


def vllm_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, sm_version: int,
                       num_spec_tokens: int = 0, vllm_version: tuple[int, int] = SEMANTICS,
                       interactivity: bool = False) -> tuple[int, ...]:
    """Capture sizes exactly as vLLM 0.33 `_set_cudagraph_sizes` derives the default, or as the
    release ``vllm_version`` (major, minor) did (``simulator.vllm_version``): the 1024 ceiling of
    the sm_100 family from 0.28 (512 before), max_num_batched_tokens appended from 0.21, the
    uniform-decode sizes from 0.29. ``interactivity``: ``--performance-mode interactivity`` (0.17+)
    starts the grid with every size from 1 to 32 instead of 1, 2, 4."""
    sm100 = is_sm100_family(sm_version) and vllm_version >= SM100_CAPTURE_1024
    ceiling = SM100_MAX_CAPTURE if sm100 else DEFAULT_MAX_CAPTURE
    q = 1 + num_spec_tokens
    max_size = min(max_num_seqs * q * 2, ceiling)
    decode_sizes: list[int] = []
    if vllm_version >= CAPTURE_UNIFORM_DECODE:
        if q > 1:
            max_reqs = min(max_num_seqs, ceiling)
            counts = sorted(set(_grid(max_reqs) + [max_reqs]))
            decode_sizes = sorted({n * q for n in counts if n * q <= max_size})
        elif max_num_seqs <= max_size:
            decode_sizes = [max_num_seqs]
    sizes = _grid_with_batch_tokens(min(max_num_batched_tokens, max_size), max_num_batched_tokens, vllm_version,
                                    interactivity)
    sizes += [s for s in decode_sizes if s <= max_num_batched_tokens]
    sizes = sorted(set(sizes))
    return tuple(sizes)


def _check_user_sizes(capture_sizes: tuple[int, ...] | None, max_capture_size: int | None) -> None:
    def bad_int(v: object) -> bool:
        return not isinstance(v, int) or isinstance(v, bool) or v < 1
    if max_capture_size is not None and bad_int(max_capture_size):
        raise ValueError(f"--max-cudagraph-capture-size must be a positive integer, got {max_capture_size!r}")
    if capture_sizes is not None:
        if len(capture_sizes) == 0:
            raise ValueError("--cudagraph-capture-sizes should contain at least one element when using "
                             "cuda graph; give positive integers, e.g. 1 2 4 8")
        wrong = [v for v in capture_sizes if bad_int(v)]
        if wrong:
            raise ValueError(f"--cudagraph-capture-sizes must be positive integers, got {wrong[0]!r} "
                             f"in {list(capture_sizes)}")


def resolve_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, sm_version: int,
                          num_spec_tokens: int = 0, cudagraph_capture_sizes: tuple[int, ...] | None = None,
                          max_cudagraph_capture_size: int | None = None,
                          vllm_version: tuple[int, int] = SEMANTICS, interactivity: bool = False) -> tuple[int, ...]:
    """Capture sizes (tokens) as vLLM 0.33 `_set_cudagraph_sizes` with the user's two flags.

    Neither flag: the default (`vllm_capture_sizes`). Sizes given: deduplicated, those above
    max_num_batched_tokens dropped, sorted (the platform ceiling does not apply). Only the
    max given: the default grid up to min(max, max_num_batched_tokens), plus
    max_num_batched_tokens when it fits, without the uniform-decode sizes. Both given: the
    max must equal the largest kept size, else ValueError with vLLM's message. ``vllm_version``:
    the release whose default grid to derive (``vllm_capture_sizes``; no max_num_batched_tokens
    appended before 0.21); ``interactivity``: the grid of ``--performance-mode interactivity``
    (user-given sizes stay as given).
    """
    _check_user_sizes(cudagraph_capture_sizes, max_cudagraph_capture_size)
    if cudagraph_capture_sizes is None and max_cudagraph_capture_size is None:
        return vllm_capture_sizes(max_num_seqs, max_num_batched_tokens, sm_version, num_spec_tokens, vllm_version,
                                  interactivity)
    if cudagraph_capture_sizes is not None:
        sizes = sorted({s for s in cudagraph_capture_sizes if s <= max_num_batched_tokens})
    else:
        sizes = sorted(set(_grid_with_batch_tokens(min(max_num_batched_tokens, max_cudagraph_capture_size),
                                                   max_num_batched_tokens, vllm_version, interactivity)))
    valid_max = sizes[-1] if sizes else 0
    if (cudagraph_capture_sizes is not None and max_cudagraph_capture_size is not None
            and max_cudagraph_capture_size != valid_max):
        raise ValueError(f"customized max_cudagraph_capture_size(={max_cudagraph_capture_size}) should be "
                         f"consistent with the max value of cudagraph_capture_sizes(={valid_max}) "
                         f"(sizes above max_num_batched_tokens={max_num_batched_tokens} are dropped)")
    return tuple(sizes)


@dataclass(frozen=True)
class CudaGraphConfig:
    """Which shapes run as CUDA graphs. Empty `capture_sizes` (or enforce_eager) = eager."""

    enforce_eager: bool
    capture_sizes: tuple[int, ...]
    max_num_seqs: int
    num_spec_tokens: int = 0
    mode: str = DEFAULT_CUDAGRAPH_MODE     # vLLM CompilationConfig.cudagraph_mode

    def __post_init__(self) -> None:
        if self.mode not in CUDAGRAPH_MODES:
            raise ValueError(f"cudagraph_mode {self.mode!r} is not one of {', '.join(CUDAGRAPH_MODES)}")
        if self.max_num_seqs <= 0:
            raise ValueError(f"max_num_seqs must be > 0, got {self.max_num_seqs}")
        if self.num_spec_tokens < 0:
            raise ValueError(f"num_spec_tokens must be >= 0, got {self.num_spec_tokens}")
        if any(s <= 0 for s in self.capture_sizes) or list(self.capture_sizes) != sorted(set(self.capture_sizes)):
            raise ValueError(f"capture_sizes must be positive, strictly ascending; got {self.capture_sizes}")
        object.__setattr__(self, "_full", self.full_sizes)

    @classmethod
    def from_vllm(cls, max_num_seqs: int, max_num_batched_tokens: int, enforce_eager: bool = False,
                  sm_version: int = 90, num_spec_tokens: int = 0,
                  cudagraph_capture_sizes: tuple[int, ...] | None = None,
                  max_cudagraph_capture_size: int | None = None,
                  cudagraph_mode: str | None = None, vllm_version: tuple[int, int] = SEMANTICS,
                  interactivity: bool = False) -> CudaGraphConfig:
        """As VllmConfig (of release ``vllm_version``; ``interactivity``: --performance-mode
        interactivity's grid): enforce_eager or mode NONE capture nothing (user sizes ignored)."""
        if max_num_seqs <= 0 or max_num_batched_tokens <= 0:
            raise ValueError(f"max_num_seqs={max_num_seqs} and max_num_batched_tokens="
                             f"{max_num_batched_tokens} must both be > 0")
        mode = DEFAULT_CUDAGRAPH_MODE if cudagraph_mode is None else str(cudagraph_mode).upper()
        if mode not in CUDAGRAPH_MODES:
            raise ValueError(f"cudagraph_mode {cudagraph_mode!r} is not one of {', '.join(CUDAGRAPH_MODES)}")
        _check_user_sizes(cudagraph_capture_sizes, max_cudagraph_capture_size)
        if enforce_eager:
            mode = "NONE"
        sizes = () if mode == "NONE" else resolve_capture_sizes(
            max_num_seqs, max_num_batched_tokens, sm_version, num_spec_tokens,
            cudagraph_capture_sizes, max_cudagraph_capture_size, vllm_version, interactivity)
        return cls(enforce_eager=enforce_eager, capture_sizes=sizes, max_num_seqs=max_num_seqs,
                   num_spec_tokens=num_spec_tokens, mode=mode)

    @property
    def max_capture_size(self) -> int:
        return self.capture_sizes[-1] if self.capture_sizes else 0

    @property
    def uniform_decode_query_len(self) -> int:
        return 1 + self.num_spec_tokens

    @property
    def piecewise_sizes(self) -> tuple[int, ...]:
        """Token counts of the PIECEWISE graphs: the capture sizes when the mode has them."""
        return self.capture_sizes if self.mode in ("PIECEWISE", "FULL_AND_PIECEWISE") else ()

    @property
    def full_sizes(self) -> tuple[int, ...]:
        """Token counts of the FULL graphs. FULL mode: the capture sizes (any batch). With a
        separate decode routine (FULL_AND_PIECEWISE, FULL_DECODE_ONLY): the uniform-decode
        graphs, each capture size rounded up to a multiple of q, kept when <= min(q *
        max_num_seqs, max capture size). PIECEWISE / NONE: none."""
        if self.mode == "FULL":
            return self.capture_sizes
        if self.mode not in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
            return ()
        q, top = self.uniform_decode_query_len, self.max_capture_size
        limit = min(q * self.max_num_seqs, top)
        return tuple(sorted({-(-s // q) * q for s in self.capture_sizes if -(-s // q) * q <= limit}))

    def dispatch(self, num_tokens: int, num_reqs: int, uniform_decode: bool) -> tuple[str, int]:
        """(mode, padded_tokens) for one step, as `CudagraphDispatcher.dispatch`.

        Above the largest capture size, or eager: ("NONE", num_tokens). Else the step
        is padded: a uniform decode batch (every request has q tokens) runs FULL at the
        smallest FULL size >= num_tokens when one exists; anything else runs PIECEWISE at
        the smallest capture size >= num_tokens (attention eager on the real tokens).
        Other modes: FULL pads every step to a FULL graph; PIECEWISE has no FULL graphs;
        FULL_DECODE_ONLY runs what is not a FULL uniform decode eager.
        """
        if num_tokens <= 0 or num_reqs <= 0 or num_reqs > num_tokens:
            raise ValueError(f"dispatch needs 0 < num_reqs <= num_tokens, got {num_reqs}, {num_tokens}")
        if (self.enforce_eager or self.mode == "NONE" or not self.capture_sizes
                or num_tokens > self.capture_sizes[-1]):
            return "NONE", num_tokens
        padded = self.capture_sizes[bisect.bisect_left(self.capture_sizes, num_tokens)]
        if self.mode == "FULL":
            return "FULL", padded
        q = self.uniform_decode_query_len
        if self.mode != "PIECEWISE" and uniform_decode and num_tokens == q * num_reqs:
            full = self._full
            i = bisect.bisect_left(full, num_tokens)
            if i < len(full):
                return "FULL", full[i]
        if self.mode == "FULL_DECODE_ONLY":
            return "NONE", num_tokens
        return "PIECEWISE", padded
