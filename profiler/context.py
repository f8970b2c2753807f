"""What every operator module needs to build and time one rank's operators, and the common
(provenance) columns of a profile row.

A `RankContext` is one (model, parallel layout, device, dtype) combination: the operators built
from it are those ONE rank of that shard runs; collectives are not run (stubbed out).
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from frontier.model_spec import ModelSpec
from frontier.parallel import ParallelSpec
from frontier.profile_schema import SCHEMA_VERSION
from profiler.timing import Timing, TimingConfig

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SOURCE = "frontier-profiler"


@dataclass(frozen=True)
class RankContext:
    """One rank of `model` sharded by `parallel`, on `device`, computing in `dtype` (schema name).

    gpu: the partition name rows are written under (catalogue name, or "cpu").
    """

    model: ModelSpec
    parallel: ParallelSpec
    device: str = "cpu"
    dtype: str = "fp32"
    gpu: str = "cpu"
    timing: TimingConfig = TimingConfig()

    def __post_init__(self) -> None:
        if self.dtype not in TORCH_DTYPES:
            raise ValueError(f"dtype={self.dtype!r} not supported by the profiler; valid: {', '.join(TORCH_DTYPES)}")
        if self.model.is_mla:
            raise ValueError(f"{self.model.name} uses MLA attention, which the profiler does not build yet")
        self.parallel.check_model(self.model)

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.dtype]

    @property
    def heads_per_rank(self) -> int:
        return self.model.num_attention_heads // self.parallel.tp

    @property
    def kv_heads_per_rank(self) -> int:
        """vLLM replicates KV heads when tp > kv heads."""
        return max(1, self.model.num_kv_heads // self.parallel.tp)

    def generator(self, seed: int = 0) -> torch.Generator:
        """A seeded generator ON the device: tensors are drawn where they live (a decode KV cache
        at TP1 is gigabytes; drawing it on the host would dominate the sweep)."""
        return torch.Generator(device=self.torch_device).manual_seed(seed)

    def randn(self, gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
        """Standard-normal tensor of `shape` x `scale` in the context's device and dtype."""
        t = torch.randn(*shape, generator=gen, device=self.torch_device, dtype=self.torch_dtype)
        return t.mul_(scale) if scale != 1.0 else t

    def layout_key(self) -> dict[str, Any]:
        """Identity of this context inside a grid-point hash."""
        p = self.parallel
        return {"model": self.model.name, "tp": p.tp, "ep": p.ep, "moe_tp": p.moe_tp,
                "device": self.device, "dtype": self.dtype, "gpu": self.gpu}


@functools.lru_cache(maxsize=None)
def _versions(device: str) -> dict[str, Any]:
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    return {
        "device_name": torch.cuda.get_device_name(torch.device(device)) if cuda else "cpu",
        "driver_version": _driver_version() if cuda else None,
        "cuda_version": torch.version.cuda if cuda else None,
        "torch_version": torch.__version__,
        "git_sha": _git_sha(),
    }


def _driver_version() -> str | None:  # pragma: no cover - needs a GPU
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             timeout=10, cwd=Path(__file__).resolve().parent, check=True)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def common_row(ctx: RankContext, family: str, timing: Timing | None, backend: str, kernel: str) -> dict[str, Any]:
    """COMMON columns of one row. `kernel_source` = "<kernel> [<timing method>]"."""
    row: dict[str, Any] = {
        "family": family, "gpu": ctx.gpu, "framework": "torch", "framework_version": torch.__version__,
        "backend": backend, "source": SOURCE, "source_table": None, "schema_version": SCHEMA_VERSION,
        "timing_mode": None, "latency_s_median": None, "latency_s_p10": None, "latency_s_p90": None,
        "num_samples": None, "kernel_source": kernel,
    }
    row.update(_versions(ctx.device))
    if timing is not None:
        row.update(timing_mode=timing.mode, latency_s_median=timing.median_s, latency_s_p10=timing.p10_s,
                   latency_s_p90=timing.p90_s, num_samples=timing.num_samples,
                   kernel_source=f"{kernel} [{timing.method}]")
    return row
