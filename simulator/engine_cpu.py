"""The engine core's CPU time per step: what synchronous scheduling leaves on the critical path.

vLLM's engine core does CPU work around every forward: ``schedule()``, the model runner's input
preparation, the sampler's host side and ``update_from_output``. With synchronous scheduling
(``EngineCore.step``, the default before vLLM 0.14) the GPU waits for it, so a step cycle is
CPU time + GPU time; with asynchronous scheduling (``step_with_batch_queue``, the default from
0.14) step N+1's CPU work overlaps step N's forward and only the excess over the GPU time
shows. ``Replica`` starts each step no earlier than its CPU time after it was scheduled.

The CPU time of a step is ``fixed_s + per_request_s x`` the requests it schedules (the one
dependence the measurements show). ``MEASURED`` is fitted on the only measured engine CPU
times at hand, Vidur's ``cpu_overheads.csv`` (../shared/datasets/vidur,
``legacy/6d98aa8/data/profiling/a100``: Sarathi-Serve on a DGX A100 host, medians of
schedule + sampler + prepare-inputs + process-outputs per step, batch sizes 8-128): its 26
single-GPU rows (Llama-2-7b, phi-2), least squares, 0.813 ms + 0.0423 ms per request, every
row within 0.07 ms (``fit_cpu_overheads`` refits it; tests compare). The rows of 2-4 GPUs add
0.6-1.8 ms of Ray broadcast, which vLLM's default multiprocessing executor does not use; they
are left out. These are an older engine's costs on an A100 host, not vLLM 0.12's own (which
no data here measures); what they do to the silicon rows that ran synchronously is in
bench/README.md. One part can be timed without a GPU: vLLM 0.33's own ``Scheduler``
(``bench/scheduler_cpu.py``, the test oracle's install): ``schedule()`` + ``update_from_output()``
of a decode step take ~24 us for 1 request and ~11-13 us per request from 8 to 512 on this
project's 2-core host (2026-12-01), where Sarathi-Serve's ``schedule_median`` was ~16 us per request;
the model runner's input preparation and the output path stay unmeasured, so ``MEASURED`` stands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VIDUR_CPU_COLUMNS = ("schedule_median", "sampler_e2e_median", "prepare_inputs_e2e_median",
                     "process_model_outputs_median")   # ms per step, Vidur's cpu_overheads.csv


@dataclass(frozen=True)
class EngineCpu:
    """CPU seconds of one engine step: ``fixed_s + per_request_s x`` scheduled requests."""

    fixed_s: float
    per_request_s: float

    def __post_init__(self) -> None:
        for name in ("fixed_s", "per_request_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0.0:
                raise ValueError(f"EngineCpu {name}={value!r} must be a number >= 0 (seconds)")

    def step_s(self, num_reqs: int) -> float:
        """CPU seconds of a step that schedules ``num_reqs`` requests."""
        return self.fixed_s + self.per_request_s * num_reqs


MEASURED = EngineCpu(fixed_s=0.813e-3, per_request_s=0.0423e-3)


def fit_cpu_overheads(df, tensor_parallel: int = 1) -> EngineCpu:
    """Least-squares ``EngineCpu`` of Vidur's ``cpu_overheads.csv`` rows of ``tensor_parallel``
    GPUs: per step, the sum of ``VIDUR_CPU_COLUMNS`` (ms) against ``batch_size``."""
    rows = df[df["tensor_parallel_degree"] == tensor_parallel]
    if len(rows) < 2 or rows["batch_size"].nunique() < 2:
        raise ValueError(f"cpu_overheads rows of tensor_parallel_degree={tensor_parallel}: need two batch sizes, "
                         f"have {sorted(rows['batch_size'].unique().tolist())}")
    slope, intercept = np.polyfit(rows["batch_size"].to_numpy(float),
                                  rows[list(VIDUR_CPU_COLUMNS)].sum(axis=1).to_numpy(float), 1)
    return EngineCpu(fixed_s=float(intercept) * 1e-3, per_request_s=float(slope) * 1e-3)
