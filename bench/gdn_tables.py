"""The gated delta rule's roofline (``GdnOp`` in ``RooflineCostModel``) against AIConfigurator's
measured vLLM 0.24 GDN kernel tables, and the fit its constants come from.

    .venv/bin/python bench/gdn_tables.py [--systems h100_sxm,h200_sxm] [--fit h100_sxm]

For each system's ``linear_attention/vllm/0.24.0/gdn_perf.parquet`` (Qwen3.5 shapes: batch size,
sequence length and per-rank key / value heads; latency in ms, the median of each shape's
repeats taken), prices every row of the two core kernels as the simulator does:
``fused_recurrent_gated_delta_rule_packed_decode`` as a GdnOp of ``batch_size`` decodes,
``chunk_gated_delta_rule_flashinfer`` as one of ``batch_size`` prefills of ``seq_len`` tokens
(fp32 state: Qwen3.5's ``mamba_ssm_dtype``), and prints per kernel the rows, the absolute
percentage error (mean, p50, p95) and the median ratio priced / measured. ``--fit SYSTEM``
also prints the least-squares fit (on relative error), on that system's rows, of a fixed time +
a time per 64-token chunk of the longest sequence + FLOPs / (bf16 peak x efficiency) for the
chunked kernel and of a fixed time + bytes / (HBM x efficiency) for the recurrent one: the
constants ``simulator/cost_model.py`` holds (GDN_*). Data:
``FRONTIER_AIC_DATA`` or ``/work/shared/datasets/aiconfigurator``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import pandas as pd

from frontier.gpu import get_gpu
from frontier.ops import GDN_CHUNK_TOKENS, GdnOp
from simulator.cost_model import RooflineCostModel

KERNELS = {"fused_recurrent_gated_delta_rule_packed_decode": "recurrent",
           "chunk_gated_delta_rule_flashinfer": "chunked"}
GPUS = {"h100_sxm": "H100", "h200_sxm": "H200"}
SHAPE = ["kernel_source", "batch_size", "seq_len", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"]


def load(root: Path, system: str) -> pd.DataFrame:
    path = root / "systems" / "data" / system / "linear_attention" / "vllm" / "0.24.0" / "gdn_perf.parquet"
    if not path.is_file():
        raise SystemExit(f"error: no GDN table {path}; set FRONTIER_AIC_DATA to AIConfigurator's data folder")
    df = pd.read_parquet(path)
    df = df[df.kernel_source.isin(list(KERNELS))]
    return df.groupby(SHAPE, as_index=False)["latency"].median()


def op_of(r) -> GdnOp:
    shape = (int(r.num_v_heads), int(r.head_k_dim), int(r.head_v_dim), int(r.num_k_heads), 4.0, 2.0)
    if KERNELS[r.kernel_source] == "recurrent":
        return GdnOp((), int(r.batch_size), *shape)
    return GdnOp((int(r.seq_len),) * int(r.batch_size), 0, *shape)


def report(df: pd.DataFrame, gpu: str) -> None:
    roofline = RooflineCostModel(get_gpu(gpu))
    for kernel, kind in KERNELS.items():
        d = df[df.kernel_source == kernel]
        priced = np.array([roofline.kernel_time_s(op_of(r)) for r in d.itertuples()])
        ratio = priced / (d.latency.to_numpy() * 1e-3)
        ape = 100 * np.abs(ratio - 1)
        print(f"  {kind:<9} {len(d):>5} rows: APE mean {ape.mean():5.1f} %  p50 {np.median(ape):5.1f} %  "
              f"p95 {np.percentile(ape, 95):5.1f} %  median priced / measured {np.median(ratio):.3f}")


def fit(df: pd.DataFrame, gpu: str) -> None:
    g = get_gpu(gpu)
    for kernel, kind in KERNELS.items():
        d = df[df.kernel_source == kernel]
        ops = [op_of(r) for r in d.itertuples()]
        t = d.latency.to_numpy() * 1e-3
        if kind == "recurrent":
            a = np.c_[np.ones_like(t), [op.recurrent_work[1] / g.hbm_bw_bytes_per_s for op in ops]]
            (fixed, slope), *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
            print(f"  fit {kind:<9}: {1e6 * fixed:.2f} us + bytes / (HBM x {1 / slope:.4f})")
            continue
        a = np.c_[np.ones_like(t), [-(-max(op.prefill_new) // GDN_CHUNK_TOKENS) for op in ops],
                  [op.prefill_work[0] / g.bf16_flops for op in ops]]
        (fixed, step, slope), *_ = np.linalg.lstsq(a / t[:, None], np.ones_like(t), rcond=None)
        print(f"  fit {kind:<9}: {1e6 * fixed:.2f} us + {1e6 * step:.3f} us per chunk of the longest sequence "
              f"+ FLOPs / (bf16 peak x {1 / slope:.4f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--systems", default="h100_sxm,h200_sxm")
    parser.add_argument("--fit", default=None, help="a system whose rows to fit the constants on")
    args = parser.parse_args()
    root = Path(os.environ.get("FRONTIER_AIC_DATA", "/work/shared/datasets/aiconfigurator"))
    for system in args.systems.split(","):
        if system not in GPUS:
            parser.error(f"--systems {system!r}; valid: {', '.join(GPUS)}")
        print(f"{system} (vLLM 0.24.0), the simulator's roofline:")
        report(load(root, system), GPUS[system])
    if args.fit:
        if args.fit not in GPUS:
            parser.error(f"--fit {args.fit!r}; valid: {', '.join(GPUS)}")
        print(f"least squares on {args.fit}'s rows:")
        fit(load(root, args.fit), GPUS[args.fit])


if __name__ == "__main__":
    main()
