"""Our H200 profiles (``datasets/profiles/h200``, torch kernels, ``scripts/profile_h200.sh``)
against AIConfigurator's public H200 vLLM tables, on the same shapes.

    .venv/bin/python bench/profile_vs_aic.py [--profiles datasets/profiles/h200] [--aic PATH]
        [--bundle B]

Kernel-mode rows only (AIC's tables are kernel times). Prints, per family and operator, the
number of shapes and the ratio ours / AIC (median, p10, p90):

1. measured vs measured, where both hold the shape: GEMMs by (m, n, k, bf16) and single-request
   prefills by (heads, KV heads, head dim, prefill length). Our decode and mixed batches draw
   their contexts (not uniform), so no AIC row has their shape;
2. measured vs the AIC bundle's prediction for every kernel row of our profiles (the bundle
   ``frontier simulate --predictor-bundle auto --gpu H200`` uses; ``--bundle`` for another);
   rows outside the bundle's data range are counted apart.

What to expect: GEMMs run cuBLAS through torch in both (vLLM's unquantized linear is
``F.linear``); attention is torch's SDPA (flash-attention 2 for prefill, a padded gather plus
SDPA for paged decode) against vLLM's own flash-attention kernels; MoE is a per-expert loop of
``aten::mm`` against vLLM's fused Triton MoE; elementwise ops are unfused torch expressions
against vLLM's fused kernels. A ratio is what running the torch backend costs beside vLLM's.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.auto_bundle import ensure_bundle
from calibration.bundle import load_bundle
from calibration.features import canon_from_rows
from calibration.importers.aiconfigurator import import_aiconfigurator
from frontier.profile_schema import read_profiles

FAMILIES = ("linear", "attention", "moe", "elementwise")


def _ratio_line(label: str, ratio: np.ndarray, extra: str = "") -> str:
    if len(ratio) == 0:
        return f"  {label:<34} {0:>5}"
    p10, p50, p90 = np.percentile(ratio, [10, 50, 90])
    return f"  {label:<34} {len(ratio):>5}  {p50:6.2f}  {p10:6.2f}  {p90:6.2f}{extra}"


def same_shape(ours: dict[str, pd.DataFrame], aic_root: Path) -> list[str]:
    """Lines of part 1: measured / measured on shapes both hold."""
    lines = []
    lin = ours["linear"]
    aic = read_profiles(aic_root, "linear", "H200")
    keys = ["m", "n", "k", "dtype"]
    j = _ratios(lin, aic, keys)
    for op, g in j.groupby("op_name"):
        lines.append(_ratio_line(f"linear {op}", g["ratio"].to_numpy()))
    lines.append(_ratio_line("linear (all)", j["ratio"].to_numpy()))
    att = ours["attention"]
    one = att[(att["op_name"] == "context") & (att["num_prefill"] == 1)]
    aic = read_profiles(aic_root, "attention", "H200")
    aic = aic[(aic["op_name"] == "context") & (aic["batch_size"] == 1) & ~aic["is_mla"].astype(bool)
              & (aic["attn_dtype"] == "bf16") & (aic["kv_dtype"] == "bf16") & (aic["window_size"] == 0)]
    keys = ["num_heads", "num_kv_heads", "head_dim", "prefill_len_max"]
    lines.append(_ratio_line("attention context, 1 request", _ratios(one, aic.drop_duplicates(keys), keys)["ratio"].to_numpy()))
    return lines


def _ratios(ours: pd.DataFrame, aic: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Our rows that AIC's rows share ``keys`` with, and ``ratio`` = our latency / AIC's."""
    j = ours.merge(aic[keys + ["latency_s_median"]], on=keys, suffixes=("", "_aic"))
    return j.assign(ratio=j["latency_s_median"] / j["latency_s_median_aic"])


def against_bundle(ours: dict[str, pd.DataFrame], bundle) -> list[str]:
    """Lines of part 2: measured / the AIC bundle's prediction, per family and operator."""
    lines = []
    for family in FAMILIES:
        df = ours[family]
        if df.empty or family not in bundle.predictors:
            continue
        canon = canon_from_rows(df, family)
        pred, oor = bundle.predictor(family).predict_canon(canon, "kernel")
        ratio = df["latency_s_median"].to_numpy() / pred
        ops = df["op_name"].to_numpy()
        for op in sorted(set(ops)):
            sel = ops == op
            lines.append(_ratio_line(f"{family} {op}", ratio[sel & ~oor], f"   (+{int((sel & oor).sum())} out of range)"))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", type=Path, default=Path("datasets/profiles/h200"))
    ap.add_argument("--aic", type=Path, default=None, help="AIC data folder (default: the installed aiconfigurator_core)")
    ap.add_argument("--bundle", type=Path, default=None, help="bundle to compare with (default: the H200 auto bundle)")
    args = ap.parse_args(argv)
    if not args.profiles.is_dir():
        print(f"error: --profiles {args.profiles} is not a folder; give a profile root such as "
              f"datasets/profiles/h200", file=sys.stderr)
        return 2
    ours = {}
    for family in FAMILIES:
        df = read_profiles(args.profiles, family, "H200")
        ours[family] = df[df["timing_mode"] == "kernel"].reset_index(drop=True) if len(df) else df
    if all(df.empty for df in ours.values()):
        print(f"error: no H200 profile rows under {args.profiles}", file=sys.stderr)
        return 2
    rows = {f: len(d) for f, d in ours.items()}
    print(f"our kernel-mode H200 rows: {rows} ({args.profiles})")
    print(f"  {'':<34} {'n':>5}  {'p50':>6}  {'p10':>6}  {'p90':>6}   ratio ours / AIC")
    with tempfile.TemporaryDirectory() as tmp:
        import_aiconfigurator(args.aic, Path(tmp), gpus=["H200"], families=["linear", "attention"])
        print("1. measured / AIC measured, same shape:")
        print("\n".join(same_shape(ours, Path(tmp))))
    bundle_path = args.bundle or ensure_bundle("H200", args.aic)
    bundle = load_bundle(bundle_path)
    print(f"2. measured / AIC bundle prediction ({bundle_path}):")
    print("\n".join(against_bundle(ours, bundle)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
