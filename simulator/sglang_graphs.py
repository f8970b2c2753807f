"""SGLang 0.5.23's CUDA graphs: capture sizes and per-step dispatch (``arg_groups/cuda_graph_hook.py``).

* Decode graphs (backend FULL): batch sizes ``[1, 2, 4, 8, 12] + 16..256 step 8 + 272..496 step 16
  + 512..max_bs step 32``, cut at ``max_bs``, plus ``max_bs``. A decode batch of at most ``max_bs``
  requests replays the graph of the smallest size >= its batch (FULL: kernel-only timing).
* Prefill graphs (backend "breakable": the graph breaks around attention, which runs eagerly, as
  vLLM's PIECEWISE graphs do): token buckets ``4..32 step 4, 48..256 step 16, 288..512 step 32,
  576..1024 step 64, 1280..4096 step 256, 4608..max step 512``, max = ``chunked_prefill_size`` (at
  most 8192 for MLA models). An extend batch (mixed decodes included) of at most max tokens is
  padded to the smallest bucket >= its tokens and priced as PIECEWISE.
* Anything larger, or ``--disable-cuda-graph``: eager (launch-inclusive timing).

The object answers the batch engine as ``simulator.cuda_graph.CudaGraphConfig`` does (``dispatch``,
``mode``, ``enforce_eager``, ``capture_sizes``, ``uniform_decode_query_len``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


def decode_capture_sizes(max_bs: int) -> tuple[int, ...]:
    """``generate_decode_cuda_graph_batch_sizes`` without speculative decoding."""
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    sizes = [s for s in sizes if s <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return tuple(sorted(sizes))


def prefill_capture_sizes(max_tokens: int) -> tuple[int, ...]:
    """``generate_prefill_cuda_graph_batch_sizes``: token buckets up to ``max_tokens``."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + list(range(576, 1025, 64))
             + list(range(1280, 4097, 256)) + list(range(4608, max_tokens + 1, 512)))
    return tuple(s for s in sizes if s <= max_tokens)


@dataclass(frozen=True)
class SglangGraphs:
    """Decode and prefill capture sizes (empty when disabled) and the step dispatch."""

    decode_sizes: tuple[int, ...]
    prefill_sizes: tuple[int, ...]
    uniform_decode_query_len: int = 1

    @property
    def enforce_eager(self) -> bool:
        return not self.decode_sizes and not self.prefill_sizes

    @property
    def mode(self) -> str:
        return "NONE" if self.enforce_eager else "FULL_AND_PIECEWISE"

    @property
    def capture_sizes(self) -> tuple[int, ...]:
        return self.decode_sizes

    def dispatch(self, num_tokens: int, num_reqs: int, uniform_decode: bool) -> tuple[str, int]:
        """(mode, padded tokens) of a step: FULL for a decode batch within the decode graphs,
        PIECEWISE for an extend batch within the prefill buckets, else NONE (eager)."""
        if num_tokens <= 0 or num_reqs <= 0 or num_reqs > num_tokens:
            raise ValueError(f"dispatch needs 0 < num_reqs <= num_tokens, got {num_reqs}, {num_tokens}")
        if uniform_decode and num_tokens == num_reqs:
            sizes = self.decode_sizes
            if sizes and num_tokens <= sizes[-1]:
                return "FULL", sizes[bisect.bisect_left(sizes, num_tokens)]
            return "NONE", num_tokens
        sizes = self.prefill_sizes
        if sizes and num_tokens <= sizes[-1]:
            return "PIECEWISE", sizes[bisect.bisect_left(sizes, num_tokens)]
        return "NONE", num_tokens
