"""Time one operator call in two modes, within a time budget.

``kernel`` — the operator's device time only.
  * CUDA: the call is captured into a CUDA graph R times over (``graph_reps``: R copies make
    a replay about 200 us of work, at most 20; 1 for long ops) and the graph is replayed
    between two device events; a sample is the replay's time / R (no Python; the replay's own
    launch, a few us between the events, is spread over the R copies as it is over a whole
    forward in vLLM's graphs: with R = 1 an H200 timed a 1-token GEMM over 4096 x 512 bf16
    weights at 7.1 us where AIConfigurator's table has 3.5). With ``cold_l2`` every copy is
    preceded by overwriting a buffer twice the L2, so weights come from HBM as they do in a
    real forward pass; a second graph of the R overwrites alone is replayed too and its time
    subtracted. ``method`` = ``cuda_graph_replay_x<R>``. If capture fails (an op that cannot
    be captured) the eager call is timed with device events instead and ``method`` says so.
  * CPU: there is no separate device timeline — the op runs in the calling thread. The best
    approximation is the *lower envelope* of per-call wall times: statistics over the fastest
    20% of samples. It drops OS-scheduler/allocator noise but still includes ATen dispatch
    (a few µs per op). ``method`` = ``cpu_fastest20``.

``launch`` — host-side issue plus execution, eager: per sample, wall time from before the
  Python call to after ``torch.cuda.synchronize()`` (CUDA) or the return (CPU). Includes Python
  and ATen dispatch, kernel launches and (CUDA) one synchronize round trip (~5-10 µs).

Each mode: warm up for ``warmup_s`` (at least one call), then sample until ``budget_s`` is
spent or ``max_reps`` samples are taken (at least ``min_reps``). Median, p10, p90 in seconds.
``time_both`` (what the sweeps call) takes the two modes' samples in turn, a kernel sample then
a launch sample, within twice the budget, so that both see the same clocks and temperatures.
Timed one mode after the other, the first H200 sweeps (datasets/profiles/h200) measured launch
below kernel on 3 of 1,032 shapes (ops of 1.5-13 ms, by 1.4-6 %); the interleaved order has not
run on a GPU yet.
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
    return _sample_modes([one], cfg)[0]


def _sample_modes(ones: list[Callable[[], float]], cfg: TimingConfig) -> list[list[float]]:
    """Samples of each sampler, taken in turn (one of each per round), so that every mode sees
    the same clocks and temperatures: warm up for ``warmup_s`` (at least one round), then sample
    until ``len(ones) x budget_s`` is spent with at least ``min_reps`` each, or ``max_reps`` each."""
    start = time.perf_counter()
    while True:
        for one in ones:
            one()
        if time.perf_counter() - start >= cfg.warmup_s:
            break
    samples: list[list[float]] = [[] for _ in ones]
    start = time.perf_counter()
    while len(samples[0]) < cfg.max_reps:
        for one, got in zip(ones, samples):
            got.append(one())
        if len(samples[0]) >= cfg.min_reps and time.perf_counter() - start >= len(ones) * cfg.budget_s:
            break
    return samples


def _launch_sampler(fn: Callable[[], object], device: torch.device) -> tuple[Callable[[], float], str]:
    """Eager, launch-inclusive wall time of one call, and the method's name."""
    cuda = device.type == "cuda"

    def one() -> float:
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        return time.perf_counter() - t0

    if cuda:
        torch.cuda.synchronize(device)
    return one, "eager_wall_sync" if cuda else "cpu_wall"


def _kernel_sampler(fn: Callable[[], object], device: torch.device,
                    cold_l2: bool) -> tuple[Callable[[], float], str]:
    """Device time of one call (CPU: its wall time, of which `_kernel_timing` keeps the fastest)."""
    if device.type != "cuda":
        return (lambda: _wall(fn)), "cpu_fastest20"
    return _cuda_kernel_sampler(fn, device, cold_l2)


def _kernel_timing(samples: list[float], method: str) -> Timing:
    if method == "cpu_fastest20":
        samples = sorted(samples)[: max(1, len(samples) // 5)]
    return _stats("kernel", samples, method)


def time_launch(fn: Callable[[], object], device: torch.device, cfg: TimingConfig) -> Timing:
    """Eager, launch-inclusive wall time per call (see module docstring)."""
    one, method = _launch_sampler(fn, device)
    return _stats("launch", _sample(one, cfg), method)


def time_kernel(fn: Callable[[], object], device: torch.device, cfg: TimingConfig,
                cold_l2: bool = False) -> Timing:
    """Device time per call: CUDA-graph replay between events, or the CPU lower envelope."""
    one, method = _kernel_sampler(fn, device, cold_l2)
    return _kernel_timing(_sample(one, cfg), method)


def _wall(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _cuda_kernel_sampler(fn: Callable[[], object], device: torch.device,
                         cold_l2: bool) -> tuple[Callable[[], float], str]:  # pragma: no cover - needs a GPU
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()  # warm caches/allocator before capture, as vLLM does
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    flush = _flush_buffer(device) if cold_l2 else None
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(run: Callable[[], object]) -> float:
        begin.record()
        run()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    reps = graph_reps(timed(fn))
    try:
        graph = _capture(fn, flush, reps)
        base = _capture(None, flush, reps) if flush is not None else None
        method = f"cuda_graph_replay_x{reps}"
    except RuntimeError:
        torch.cuda.synchronize(device)
        graph, base, reps, method = None, None, 1, "cuda_events_eager"

    def one() -> float:
        if graph is None:
            if flush is not None:
                flush.zero_()
            return timed(fn)
        t = timed(graph.replay)
        if base is not None:
            t -= timed(base.replay)
        return max(t / reps, 0.0)

    return one, method + ("+cold_l2" if cold_l2 else "")


GRAPH_TARGET_S = 200e-6   # a replay's work when the op is short ...
GRAPH_MAX_REPS = 20       # ... made of at most this many copies of it


def graph_reps(one_call_s: float) -> int:
    """Copies of the op captured in one graph: enough that a replay runs about GRAPH_TARGET_S
    (at most GRAPH_MAX_REPS), so that the replay's own launch (a few us between the events)
    is spread over the copies, as it is over a whole forward in vLLM's graphs; 1 for long ops."""
    if one_call_s <= 0:
        return GRAPH_MAX_REPS
    return int(min(GRAPH_MAX_REPS, max(1, -(-GRAPH_TARGET_S // one_call_s))))


def _flush_buffer(device: torch.device) -> torch.Tensor:  # pragma: no cover - needs a GPU
    """A buffer twice the device's L2 (``_L2_FLUSH_BYTES`` when the size is not reported)."""
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or _L2_FLUSH_BYTES // 2
    return torch.empty(2 * l2 // 4, dtype=torch.float32, device=device)


def _capture(fn: Callable[[], object] | None, flush: torch.Tensor | None,
             reps: int) -> torch.cuda.CUDAGraph:  # pragma: no cover - needs a GPU
    """One graph of `reps` x (L2 flush if `flush`, then `fn` if given)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            if flush is not None:
                flush.zero_()
            if fn is not None:
                fn()
    return graph


def time_both(fn: Callable[[], object], device: torch.device, cfg: TimingConfig,
              cold_l2: bool = False) -> list[Timing]:
    """[kernel, launch] timings of one operator call, their samples taken in turn."""
    kernel, kernel_method = _kernel_sampler(fn, device, cold_l2)
    launch, launch_method = _launch_sampler(fn, device)
    kernel_s, launch_s = _sample_modes([kernel, launch], cfg)
    return [_kernel_timing(kernel_s, kernel_method), _stats("launch", launch_s, launch_method)]
