"""Kernel backends: which kernels time a family's operators, and the checks before a sweep.

    torch       always; the torch paths inside the ops modules (cuBLAS GEMMs, SDPA, a
                per-expert loop, unfused elementwise expressions).
    vllm        vLLM's own kernels (profiler/backend_vllm.py): elementwise (rms_norm,
                fused_add_rms_norm, rotary_embedding, silu_and_mul, reshape_and_cache_flash),
                attention (reshape_and_cache_flash + vLLM's flash-attn varlen), moe
                (fused_experts). vLLM's unquantized linear layer is torch's F.linear, so
                linear stays on torch.
    flashinfer  FlashInfer's paged attention wrappers (profiler/backend_flashinfer.py).

A non-torch backend needs its package importable AND a CUDA device. A runner takes
(RankContext, point) and returns ``(callable, kernel name)``; a family the backend has no
runner for is timed by torch and its rows say backend "torch", so every row names the
backend and the kernel that produced it.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Callable

BACKENDS = ("torch", "flashinfer", "vllm")
# (family, backend) -> "module:function" of the runner; imported only when a sweep uses it.
RUNNERS: dict[tuple[str, str], str] = {
    ("elementwise", "vllm"): "profiler.backend_vllm:elementwise",
    ("attention", "vllm"): "profiler.backend_vllm:attention",
    ("moe", "vllm"): "profiler.backend_vllm:moe",
    ("attention", "flashinfer"): "profiler.backend_flashinfer:attention",
}

Runner = Callable[[Any, dict[str, Any]], tuple[Callable[[], object], str]]


def installed(backend: str) -> bool:
    """True when the backend's package can be imported (torch always)."""
    if backend == "torch":
        return True
    return importlib.util.find_spec(backend) is not None


def families_of(backend: str) -> tuple[str, ...]:
    """Families `backend` has its own kernels for (torch: none listed, it is the default)."""
    return tuple(f for f, b in RUNNERS if b == backend)


def check_backend(backend: str, device: str, families: list[str] | None = None) -> None:
    """Raise ValueError (one line) when `backend` cannot run on `device`, or would time none
    of `families` with its own kernels."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if backend == "torch":
        return
    if not device.startswith("cuda"):
        raise ValueError(f"backend {backend!r} needs --device cuda; on {device} use torch")
    if not installed(backend):
        raise ValueError(f"backend {backend!r} is not installed (pip install {backend}); valid here: torch")
    if families is not None and not set(families) & set(families_of(backend)):
        raise ValueError(f"backend {backend!r} has kernels for {', '.join(families_of(backend))}, none of "
                         f"--families {','.join(families)}; use --backend torch")


def runner_for(family: str, backend: str) -> Runner | None:
    """The runner of (family, backend), or None when torch times that family."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    target = RUNNERS.get((family, backend))
    if target is None:
        return None
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)
