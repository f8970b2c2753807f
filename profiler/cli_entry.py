"""Body of ``frontier profile``: parse the flags into layouts, a grid and contexts, then run
(or, with --dry-run, size) the resumable sweep. User errors raise one-line ValueErrors; the CLI
prints them and exits 2.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import pyarrow.parquet as pq
import torch

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from frontier.profile_schema import check_root_version
from profiler import sweep
from profiler.backends import check_backend, runner_for
from profiler.context import TORCH_DTYPES, RankContext
from profiler.grid import SweepGrid
from profiler.timing import TimingConfig

CPU_THREADS = 1   # --device cpu times ops on one thread: the elementwise CPU sweep on a shared 2-core box
                  # measured 16-260 ms for 5-60 us ops with the default OpenMP pool


@dataclass(frozen=True)
class ProfileArgs:
    """The flags of ``frontier profile`` (strings as typed; parsed by `run_profile`)."""

    model: str
    out: Path
    tensor_parallel_size: str = "1"
    expert_parallel_size: str = "1"
    families: str | None = None
    device: str = "cpu"
    dtype: str | None = None
    gpu: str | None = None
    grid: Path | None = None
    backend: str = "torch"
    warmup_ms: float = 20.0
    budget_ms: float = 100.0
    max_chunks: int | None = None
    dry_run: bool = False


def _int_list(flag: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag}={text!r} must be comma-separated positive integers, e.g. 1,2,4,8") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{flag}={text!r} must be comma-separated positive integers, e.g. 1,2,4,8")
    return values


def check_device(device: str) -> None:
    if device != "cpu" and not (device == "cuda" or device.startswith("cuda:")):
        raise ValueError(f"--device={device!r}; valid: cpu, cuda, cuda:N")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {device} but no CUDA GPU is visible (torch {torch.__version__}); use --device cpu")


def check_out_backend(out: Path, gpu: str, families: list[str], backend: str) -> None:
    """Refuse an output folder whose rows of a family came from another backend than this run
    would write for it: one calibration must not average two engines' kernels."""
    for family in families:
        writes = backend if runner_for(family, backend) is not None else "torch"
        for part in sorted(Path(out).glob(f"family={family}/gpu={gpu}/part-*.parquet")):
            found = set(pq.read_table(part, columns=["backend"]).column(0).to_pylist()) - {writes}
            if found:
                raise ValueError(f"--out {out} holds {family} rows of backend {sorted(found)[0]}; this run writes "
                                 f"{writes} (use another folder per backend)")


def _gpu_name(args: ProfileArgs) -> str:
    if not args.device.startswith("cuda"):
        if args.gpu is not None:
            raise ValueError(f"--gpu {args.gpu} with --device cpu would file CPU timings under a GPU; drop --gpu")
        return "cpu"
    if args.gpu is not None:  # pragma: no cover - needs a GPU
        return get_gpu(args.gpu).name
    return get_gpu(torch.cuda.get_device_name(torch.device(args.device))).name  # pragma: no cover


def build_contexts(args: ProfileArgs) -> list[RankContext]:
    """One RankContext per (tp, ep) layout with ep dividing tp (others are skipped: EP spreads the
    experts over the TP ranks); every layout is checked against the model."""
    model = load_model_spec(args.model)
    if model.num_linear_attention_layers:
        raise ValueError(f"{model.name}: the profiler has no Gated DeltaNet operators yet (its "
                         f"{model.num_linear_attention_layers} linear-attention layers); profile another model")
    tps = _int_list("--tensor-parallel-size", args.tensor_parallel_size)
    eps = _int_list("--expert-parallel-size", args.expert_parallel_size)
    if eps != [1] and not model.is_moe:
        raise ValueError(f"--expert-parallel-size {args.expert_parallel_size} needs an MoE model; {model.name} is dense")
    dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"--dtype={dtype!r}; valid: {', '.join(TORCH_DTYPES)}")
    timing = TimingConfig(warmup_s=args.warmup_ms / 1e3, budget_s=args.budget_ms / 1e3)
    gpu = _gpu_name(args)
    pairs = [(tp, ep) for tp in tps for ep in eps if tp % ep == 0]  # EP spreads experts over the TP ranks
    if not pairs:
        raise ValueError(f"no --expert-parallel-size in {eps} divides a --tensor-parallel-size in {tps}")
    return [RankContext(model, ParallelSpec(tp=tp, ep=ep), args.device, dtype, gpu, timing) for tp, ep in pairs]


def run_profile(args: ProfileArgs, stream: TextIO | None = None) -> sweep.SweepResult | None:
    """Validate, plan and run (or size, with dry_run) the sweep. Returns None for a dry run."""
    stream = stream if stream is not None else sys.stderr
    families = [f.strip() for f in args.families.split(",")] if args.families else list(sweep.writable_families())
    sweep.check_families(families)
    check_device(args.device)
    check_backend(args.backend, args.device, families)
    check_root_version(Path(args.out), f"--out {args.out}", " (use another folder)")
    grid = SweepGrid.from_file(args.grid, args.device) if args.grid else SweepGrid.default(args.device)
    contexts = build_contexts(args)
    check_out_backend(Path(args.out), contexts[0].gpu, families, args.backend)
    chunks = sweep.plan(contexts, families, grid, args.backend)
    done = set().union(*(sweep.completed_chunks(Path(args.out), c.gpu) for c in contexts[:1]))
    todo = [c for c in chunks if c.key not in done]
    points = sum(len(c.points) for c in todo)
    print(f"profile {contexts[0].model.name} on {contexts[0].gpu} ({args.device}, {contexts[0].dtype}): "
          f"{len(contexts)} layout(s) x {len(families)} famil{'y' if len(families) == 1 else 'ies'} -> "
          f"{sum(len(c.points) for c in chunks)} points in {len(chunks)} chunks; {len(chunks) - len(todo)} chunks "
          f"already done; {points} points left, estimated {sweep.estimate_s(todo):.0f} s", file=stream)
    if args.dry_run:
        return None
    if not args.device.startswith("cuda"):
        torch.set_num_threads(CPU_THREADS)   # multi-threaded CPU timings swing 10-100x on a shared box
    result = sweep.run(chunks, Path(args.out), args.backend, stream=stream, max_chunks=args.max_chunks)
    print(f"wrote {result.rows} rows in {len(result.written)} part file(s) under {args.out}", file=stream)
    return result
