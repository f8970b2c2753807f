"""Time one operator call in two modes, within a time budget.

``kernel`` — the operator's device time only.
  * CUDA: the call is captured once into a CUDA graph and the graph is replayed between two
    device events (no Python, no launch overhead). With ``cold_l2`` a buffer larger than L2 is
    overwritten before every replay (outside the events), so weights come from HBM as they do
    in a real forward pass. If capture fails (an op that cannot be captured) the eager call is
    timed with device events instead and ``method`` says so.
  * CPU: there is no separate device timeline — the op runs in the calling thread. The best
    approximation is the *lower envelope* of per-call wall times: statistics over the fastest
    20% of samples. It drops OS-scheduler/allocator noise but still includes ATen dispatch
    (a few µs per op). ``method`` = ``cpu_fastest20``.

``launch`` — host-side issue plus execution, eager: per sample, wall time from before the
  Python call to after ``torch.cuda.synchronize()`` (CUDA) or the return (CPU). Includes Python
  and ATen dispatch, kernel launches and (CUDA) one synchronize round trip (~5-10 µs).

Both modes: warm up for ``warmup_s`` (at least one call), then sample until ``budget_s`` is
spent or ``max_reps`` samples are taken (at least ``min_reps``). Median, p10, p90 in seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

TIMING_MODES = ("kernel", "launch")
_L2_FLUSH_BYTES = 256 << 20  # > L2 of every current GPU (H100/H200: 50-60 MiB, B200: 126 MiB)


@dataclass(frozen=True)
class TimingConfig:
    """Time budget per (operator, mode): warm-up seconds, sampling seconds, sample bounds."""

    warmup_s: float = 0.02
    budget_s: float = 0.1
    min_reps: int = 5
    max_reps: int = 200

    def __post_init__(self) -> None:
        if self.warmup_s < 0 or self.budget_s <= 0:
            raise ValueError(f"TimingConfig warmup_s={self.warmup_s}, budget_s={self.budget_s}; "
                             "need warmup_s >= 0 and budget_s > 0")
        if not 1 <= self.min_reps <= self.max_reps:
            raise ValueError(f"TimingConfig min_reps={self.min_reps}, max_reps={self.max_reps}; "
                             "need 1 <= min_reps <= max_reps")

    def estimate_s(self) -> float:
        """Upper-bound-ish wall time of one (operator, mode) measurement, for --dry-run."""
        return self.warmup_s + self.budget_s


@dataclass(frozen=True)
class Timing:
    """Latency statistics of one (operator, mode), seconds."""

    mode: str
    median_s: float
    p10_s: float
    p90_s: float
    num_samples: int
    method: str


def _stats(mode: str, samples_s: list[float], method: str) -> Timing:
    arr = np.asarray(samples_s, dtype=float)
    return Timing(mode, float(np.median(arr)), float(np.percentile(arr, 10)),
                  float(np.percentile(arr, 90)), int(arr.size), method)


def _sample(one: Callable[[], float], cfg: TimingConfig) -> list[float]:
    start = time.perf_counter()
    while True:  # warm-up: at least one call
        one()
        if time.perf_counter() - start >= cfg.warmup_s:
            break
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < cfg.max_reps:
        samples.append(one())
        if len(samples) >= cfg.min_reps and time.perf_counter() - start >= cfg.budget_s:
            break
    return samples


def time_launch(fn: Callable[[], object], device: torch.device, cfg: TimingConfig) -> Timing:
    """Eager, launch-inclusive wall time per call (see module docstring)."""
    cuda = device.type == "cuda"

    def one() -> float:
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    if cuda:
        torch.cuda.synchronize(device)
    method = "eager_wall_sync" if cuda else "cpu_wall"
    return _stats("launch", _sample(one, cfg), method)


def time_kernel(fn: Callable[[], object], device: torch.device, cfg: TimingConfig,
                cold_l2: bool = False) -> Timing:
    """Device time per call: CUDA-graph replay between events, or the CPU lower envelope."""
    if device.type != "cuda":
        samples = sorted(_sample(lambda: _wall(fn), cfg))
        fastest = samples[: max(1, len(samples) // 5)]
        return _stats("kernel", fastest, "cpu_fastest20")
    return _time_cuda_kernel(fn, device, cfg, cold_l2)


def _wall(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _time_cuda_kernel(fn: Callable[[], object], device: torch.device, cfg: TimingConfig,
                      cold_l2: bool) -> Timing:  # pragma: no cover - needs a GPU
    flush = torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.float32, device=device) if cold_l2 else None
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()  # warm caches/allocator before capture, as vLLM does
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run, method = graph.replay, "cuda_graph_replay"
    except RuntimeError:
        torch.cuda.synchronize(device)
        run, method = fn, "cuda_events_eager"
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def one() -> float:
        if flush is not None:
            flush.zero_()
        begin.record()
        run()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    samples = _sample(one, cfg)
    return _stats("kernel", samples, method + ("+cold_l2" if cold_l2 else ""))


def time_both(fn: Callable[[], object], device: torch.device, cfg: TimingConfig,
              cold_l2: bool = False) -> list[Timing]:
    """[kernel, launch] timings of one operator call."""
    return [time_kernel(fn, device, cfg, cold_l2), time_launch(fn, device, cfg)]
