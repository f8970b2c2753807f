"""Kernel backends beyond plain torch: detection, and the hook where their runners plug in.

"torch" is always available. "flashinfer" and "vllm" are offered only when the package imports
AND the device is CUDA; the profiler never depends on them. A runner takes (RankContext, point)
and returns ``(callable, kernel_name)`` exactly like the torch path in the ops modules, so rows
differ only in ``backend`` / ``kernel_source``.

Runners for these packages are not written yet: selecting one raises a one-line ValueError.
To add one, implement e.g. ``_flashinfer_attention(ctx, point)`` (BatchPrefill/Decode wrappers
over the same paged layout as ops_attention) and list it in ``_RUNNERS``.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

BACKENDS = ("torch", "flashinfer", "vllm")
_RUNNERS: dict[tuple[str, str], Callable[..., Any]] = {}


def installed(backend: str) -> bool:
    """True when the backend's package can be imported (torch always)."""
    if backend == "torch":
        return True
    return importlib.util.find_spec(backend) is not None


def check_backend(backend: str, device: str) -> None:
    """Raise ValueError (one line) when `backend` cannot run on `device`."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if backend == "torch":
        return
    if not device.startswith("cuda"):
        raise ValueError(f"backend {backend!r} needs --device cuda; on {device} use torch")
    if not installed(backend):
        raise ValueError(f"backend {backend!r} is not installed; valid here: torch")


def attention_runner(backend: str, ctx: Any, point: dict[str, Any]) -> tuple[Callable[[], object], str]:
    """The (callable, kernel name) of `backend` for one attention point."""
    runner = _RUNNERS.get(("attention", backend))
    if runner is None:
        raise ValueError(f"attention backend {backend!r} has no runner yet; valid: torch")
    return runner(ctx, point)
