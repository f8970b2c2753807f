"""How well the measured DeepEP tables price MoE dispatch / combine, against the analytical model.

    .venv/bin/python bench/moe_a2a_tables.py [--gpus H100-SXM,H200,B200,GB200] [--aic PATH]

Per GPU with AIC's vLLM ``moe_a2a_perf`` table (DeepEP inside vLLM 0.24.0, one node) and per
kernel (deepep_ht, deepep_ll) and phase, prints:

* analytical: what ``--comm-model analytical`` (and, before these tables, ``calibrated``)
  charges: the all_to_all of the routed bytes (tokens x top-k x hidden x 2 B) over the EP group,
  as a ratio to the measured latency (median, p10, p90) over the table's rows;
* across nodes: the ratio of SGLang's DeepEP tables at 2 / 4 / 8 nodes to one node (median over
  the one-node table's token counts), which scales the vLLM one-node price across nodes;
* leave one shape out: each measured (hidden, top-k) shape priced by ``simulator.comm.moe_a2a``
  from the other shapes only (its "shape-fit" across hidden sizes), the absolute percentage
  error of every token count: p50 / p95. A shape the table holds is priced from its own curve
  (exact at the measured counts), so this is the error of the shapes it does not hold.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from calibration.importers.aiconfigurator import import_aiconfigurator
from frontier.gpu import get_gpu
from frontier.ops import MOE_A2A_OPS, MoeA2a
from frontier.profile_schema import read_profiles
from simulator.comm import AnalyticalCommBackend, CommGroup
from simulator.comm.moe_a2a import VLLM_TABLE, tables_from_rows

KERNEL = {table: name for name, table in VLLM_TABLE.items()}


def report(root: Path, gpus: list[str]) -> list[str]:
    lines = []
    for name in gpus:
        gpu = get_gpu(name)
        df = read_profiles(root, family="comm", gpu=gpu.name)
        df = df[df["op_name"].isin(MOE_A2A_OPS) & df["backend"].isin(list(KERNEL))]
        scaling = tables_from_rows(df).node_scaling
        df = df[df["framework"] == "vllm"]
        if not len(df):
            lines.append(f"{gpu.name}: no DeepEP table")
            continue
        lines.append(f"{gpu.name}:")
        analytical = AnalyticalCommBackend(gpu)
        for (backend, op), g in df.groupby(["backend", "op_name"]):
            n = int(g["num_gpus"].iloc[0])
            group = CommGroup.packed(n, gpu.gpus_per_node)
            routed = g["num_tokens"] * g["topk"] * g["hidden_size"] * 2.0
            ratio = np.array([analytical.collective_time_s("all_to_all", b, group) for b in routed]) \
                / g["latency_s_median"].to_numpy(float)
            errors = []
            for h, k in sorted(set(zip(g["hidden_size"], g["topk"]))):
                own = (g["hidden_size"] == h) & (g["topk"] == k)
                tables = tables_from_rows(g[~own])
                for tokens, lat in g[own].groupby("num_tokens")["latency_s_median"].median().items():
                    moe = MoeA2a(op.removeprefix("moe_"), KERNEL[backend], int(tokens), int(h), int(k), 256)
                    errors.append(abs(tables.time_s(moe, group, Counter()) / lat - 1.0) * 100)
            p10, p50, p90 = np.percentile(ratio, [10, 50, 90])
            e50, e95 = np.percentile(errors, [50, 95])
            lines.append(f"  {backend} {op.removeprefix('moe_'):8s} EP {n}  {len(g):3d} rows  analytical / measured "
                         f"{p50:.2f} (p10 {p10:.2f}, p90 {p90:.2f})  leave one shape out p50 {e50:5.1f} %  "
                         f"p95 {e95:5.1f} %")
        for (backend, phase), per_size in sorted(scaling.items()):
            base = min(per_size)
            xs = per_size[base][0]
            ratios = [f"EP {n} {np.median(np.exp(np.interp(xs, *per_size[n]) - per_size[base][1])):.2f}x"
                      for n in sorted(per_size) if n != base]
            lines.append(f"  {backend} {phase:8s} across nodes, x EP {base} (SGLang's tables, median over EP {base}'s "
                         f"token counts): {', '.join(ratios)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="H100-SXM,H200,B200,GB200", help="comma-separated GPUs with AIC vLLM tables")
    ap.add_argument("--aic", type=Path, default=None, help="AIC data folder (default: the installed aiconfigurator_core)")
    args = ap.parse_args(argv)
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    with tempfile.TemporaryDirectory(prefix="moe_a2a_") as tmp:
        try:
            import_aiconfigurator(args.aic, Path(tmp), gpus=gpus, families=["comm"])
            print("\n".join(report(Path(tmp), gpus)))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
