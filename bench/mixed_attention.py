"""What pricing a mixed batch from uniform-batch rows costs in error, measured on profiles that
time mixed batches too.

    .venv/bin/python bench/mixed_attention.py [--profiles datasets/profiles/h200] [--gpu H200]
        [--holdout-fraction 0.2] [--split-seed 0] [--json]

AIConfigurator's attention tables hold uniform batches only (every request a prefill of one
length, or every request a decode at one context). A bundle fitted on them prices a mixed batch
(prefills and decodes in one step, as chunked prefill makes most steps) as the sum of its prefill
part and its decode part, each priced from its own length statistics
(``calibration.predictors.attention``). Profiles written by ``frontier profile`` also time mixed
batches (``op_name`` "mixed"), so the cost of that mapping can be measured on them. Per timing
mode, the attention rows of ``--gpu`` under ``--profiles``:

* sum rule, every mixed row: the attention predictor fitted on the uniform rows alone prices each
  mixed row as prefill part + decode part; APE p50 / p95 / mean and the median predicted /
  measured ratio (above 1: the sum counts twice what the parts share, e.g. a fixed cost per
  kernel, the KV-cache write);
* held out: ``--holdout-fraction`` of the mixed rows (drawn with ``--split-seed``) priced three
  ways: the sum rule above, a predictor fitted on the uniform rows plus the other mixed rows
  (what a bundle fitted on such profiles does), and the token-count baseline fitted on the same
  rows (``calibration.evaluate.baseline_predict``).

The figures hold for the backend that was profiled: the torch backend runs a mixed batch as its
prefills' kernels plus its decodes' kernels, much as the sum rule assumes; vLLM's FlashAttention
backend runs one varlen kernel over the whole batch, which only profiles of ``--backend vllm``
can measure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from calibration import features as F
from calibration.evaluate import ape, baseline_predict, holdout_mask
from calibration.predictors import make_predictor
from frontier.profile_schema import read_profiles

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PROFILES = ROOT / "datasets" / "profiles" / "h200"


def _stats(err: np.ndarray) -> dict[str, float]:
    return {"p50": float(np.percentile(err, 50)), "p95": float(np.percentile(err, 95)), "mean": float(err.mean())}


def _price(predictor, rows: pd.DataFrame, mode: str) -> np.ndarray:
    return predictor.predict_canon(F.canon_from_rows(rows, "attention"), mode)[0]


def measure(df: pd.DataFrame, holdout_fraction: float, split_seed: int) -> dict[str, dict]:
    """Per timing mode with mixed rows: the sum rule on every mixed row and the held-out comparison."""
    out = {}
    for mode in sorted(df["timing_mode"].unique()):
        rows = df[df["timing_mode"] == mode].reset_index(drop=True)
        uniform = rows[rows["op_name"] != "mixed"].reset_index(drop=True)
        mixed = rows[rows["op_name"] == "mixed"].reset_index(drop=True)
        if len(mixed) < 2 or len(uniform) == 0:
            continue
        summed = make_predictor("attention").fit(uniform)
        meas = mixed["latency_s_median"].to_numpy(float)
        pred = _price(summed, mixed, mode)
        test = holdout_mask(mixed, "attention", holdout_fraction, split_seed)
        train = pd.concat([uniform, mixed[~test]], ignore_index=True)
        fitted = make_predictor("attention").fit(train)
        held = mixed[test].reset_index(drop=True)
        held_meas = held["latency_s_median"].to_numpy(float)
        out[mode] = {
            "uniform_rows": len(uniform), "mixed_rows": len(mixed),
            "sum_rule": {**_stats(ape(pred, meas)), "median_ratio": float(np.median(pred / meas))},
            "held_out": {"rows": int(test.sum()),
                         "sum_rule": _stats(ape(_price(summed, held, mode), held_meas)),
                         "fitted_with_mixed": _stats(ape(_price(fitted, held, mode), held_meas)),
                         "token_baseline": _stats(ape(baseline_predict(train, held, "attention"), held_meas))}}
    return out


def report(result: dict[str, dict], where: str) -> list[str]:
    fmt = "p50 {p50:5.1f} %  p95 {p95:5.1f} %  mean {mean:5.1f} %".format
    lines = [f"attention, mixed batches priced from uniform ones ({where}):"]
    for mode, r in result.items():
        h, n = r["held_out"], r["held_out"]["rows"]
        s = r["sum_rule"]
        lines += [f"  {mode} mode: {r['uniform_rows']} uniform rows, {r['mixed_rows']} mixed",
                  f"    {'sum rule (uniform rows only), every mixed row':<50}{fmt(**s)}  median ratio {s['median_ratio']:.3f}",
                  f"    {f'{n} held out: sum rule':<50}{fmt(**h['sum_rule'])}",
                  f"    {f'{n} held out: fitted with the other mixed rows':<50}{fmt(**h['fitted_with_mixed'])}",
                  f"    {f'{n} held out: token-count baseline, same rows':<50}{fmt(**h['token_baseline'])}"]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", type=Path, default=DEFAULT_PROFILES, help="profile root (frontier profile's output)")
    ap.add_argument("--gpu", default="H200", help="the GPU whose attention rows to use")
    ap.add_argument("--holdout-fraction", type=float, default=0.2)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    try:
        if not args.profiles.is_dir():
            raise ValueError(f"--profiles {args.profiles} is not a directory (a profile root, as `frontier "
                             "profile` writes it)")
        df = read_profiles(args.profiles, "attention", args.gpu)
        result = measure(df, args.holdout_fraction, args.split_seed)
        if not result:
            raise ValueError(f"no {args.gpu} attention profiles under {args.profiles} time both uniform and "
                             "mixed batches (op_name 'mixed')")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1) if args.json else "\n".join(report(result, f"{args.gpu}, {args.profiles}")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
