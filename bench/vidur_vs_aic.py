"""Vidur's fp16 GEMM profiles against AIConfigurator's bf16 vLLM tables, on the same shapes.

    .venv/bin/python bench/vidur_vs_aic.py --vidur ../shared/datasets/vidur [--aic PATH]

A bundle fitted on Vidur's profiles (fp16, Sarathi-Serve, 2024) prices the simulator's bf16 ops
from its fp16 sub-models (``calibration.predictors.base.float16_twin``). This prints what that
stands on: for each GPU both sources time (A100-80GB: AIC's vLLM 0.14.0 tables, H100-SXM: 0.24.0),
the GEMM shapes (m, n, k) both hold and the ratio Vidur fp16 / AIC bf16 (median, p10, p90), in
all and per band of m. Both are kernel times of one rank's GEMM (cuBLAS through torch).

Then what AIC's tables lack: elementwise kernels (AIC bundles price norms, RoPE and the SiLU
activation with the roofline). Per kernel and token count, the roofline's time
(``simulator.cost_model.RooflineCostModel``) over Vidur's measured one, median over the
models' widths and TP degrees, on each GPU.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.importers.aiconfigurator import import_aiconfigurator
from calibration.importers.vidur import import_vidur
from frontier.profile_schema import read_profiles

GPUS = ("A100-80GB", "H100-SXM")
M_BANDS = (0, 16, 128, 1024, 1 << 20)


def _line(label: str, ratio: np.ndarray) -> str:
    p10, p50, p90 = np.percentile(ratio, [10, 50, 90])
    return f"  {label:<24} {len(ratio):>5}  {p50:6.2f}  {p10:6.2f}  {p90:6.2f}"


def gemm_ratios(vidur: pd.DataFrame, aic: pd.DataFrame) -> pd.Series:
    """Vidur fp16 / AIC bf16 median latency per (m, n, k) both hold (medians over repeated rows)."""
    v = vidur[vidur["dtype"] == "fp16"].groupby(["m", "n", "k"])["latency_s_median"].median()
    a = aic[aic["dtype"] == "bf16"].groupby(["m", "n", "k"])["latency_s_median"].median()
    both = pd.concat([v.rename("v"), a.rename("a")], axis=1, join="inner")
    return (both["v"] / both["a"]).rename("ratio")


def report(vidur_root: Path, aic_root: Path) -> list[str]:
    lines = [f"  {'GPU, m band':<24} {'shapes':>5}  {'median':>6}  {'p10':>6}  {'p90':>6}   (Vidur fp16 / AIC bf16)"]
    for gpu in GPUS:
        aic = read_profiles(aic_root, "linear", gpu)
        ratio = gemm_ratios(read_profiles(vidur_root, "linear", gpu), aic)
        version = ", ".join(sorted(aic["framework_version"].astype(str).unique()))
        lines.append(_line(f"{gpu} (vLLM {version})", ratio.to_numpy()))
        m = ratio.index.get_level_values("m")
        for lo, hi in zip(M_BANDS, M_BANDS[1:]):
            sel = (m > lo) & (m <= hi)
            if sel.any():
                lines.append(_line(f"  m {lo + 1}-{hi if hi < 1 << 20 else 'max'}", ratio.to_numpy()[sel]))
    return lines


ELEMENTWISE_TOKENS = (1, 64, 512, 4096)


def elementwise_lines(vidur_root: Path) -> list[str]:
    """Roofline / Vidur measured time of each elementwise kernel (median per token count)."""
    from calibration.features import ELEMENTWISE_PASSES
    from frontier.gpu import get_gpu
    from frontier.ops import ElementwiseOp
    from simulator.cost_model import RooflineCostModel
    lines = [f"  {'GPU, kernel':<28} " + "".join(f"{t:>8}" for t in ELEMENTWISE_TOKENS)
             + "   (roofline / Vidur measured, by tokens)"]
    for gpu in GPUS:
        rows = read_profiles(vidur_root, "elementwise", gpu)
        roof = RooflineCostModel(get_gpu(gpu))
        rows = rows[rows.num_tokens.isin(ELEMENTWISE_TOKENS)]
        ratio = [roof.kernel_time_s(ElementwiseOp("x", int(t), int(w), ELEMENTWISE_PASSES[k] * 2 * int(w))) / lat
                 for k, t, w, lat in zip(rows.op_name, rows.num_tokens, rows.hidden_size, rows.latency_s_median)]
        med = rows.assign(ratio=ratio).groupby(["op_name", "num_tokens"])["ratio"].median()
        for kernel in sorted(rows.op_name.unique()):
            lines.append(f"  {gpu + ' ' + kernel:<28} " + "".join(f"{med[(kernel, t)]:>8.2f}" for t in ELEMENTWISE_TOKENS))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur", type=Path, required=True, help="the Vidur dataset folder (data/profiling inside)")
    ap.add_argument("--aic", type=Path, default=None, help="AIC data folder (default: the installed aiconfigurator_core)")
    args = ap.parse_args(argv)
    if not args.vidur.is_dir():
        print(f"error: --vidur {args.vidur} is not a directory; give the Vidur dataset folder", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vidur_vs_aic_") as tmp:
        vidur_root, aic_root = Path(tmp) / "vidur", Path(tmp) / "aic"
        import_vidur(args.vidur, vidur_root)
        import_aiconfigurator(args.aic, aic_root, gpus=list(GPUS), families=["linear"])
        print("\n".join(report(vidur_root, aic_root)))
        print("\n".join(elementwise_lines(vidur_root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
