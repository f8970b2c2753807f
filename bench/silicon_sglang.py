"""End-to-end check of ``--engine sglang`` against measured SGLang deployments (silicon_sample.csv).

    .venv/bin/python bench/silicon_sglang.py [--jobs 2] [--predictor-bundle auto|none|PATH]
        [--systems h100_sxm,h200_sxm,b200_sxm] [--models SUBSTR,...] [--limit N] [--out FILE]

Selects the rows of AIConfigurator's ``silicon_sample.csv`` with backend == sglang and mode agg,
maps each with ``bench/silicon_e2e.py``'s row mapping (model, precision -> served checkpoint,
lengths, concurrency, harness; a row's moe_tp x moe_ep over its tp_size GPUs as SGLang's --ep-size),
skips what the SGLang mirror does not simulate (attention DP, PP; models the catalogue lacks or
refuses) and simulates the rest as SGLang 0.5.23 servers (``--engine sglang``; the runs used
0.5.1-0.5.10, whose schedulers are taken as 0.5.23's):

* "aic" rows (AIC's own gap-analysis runs): AIConfigurator's benchmark launch rules for SGLang
  (``generator/rule_plugin/benchmark/sglang.rule``): ``--max-running-requests batch_size``,
  ``--max-prefill-tokens isl + 1500``, ``--enable-mixed-chunk``, ``--cuda-graph-bs 1 .. batch_size``;
  aiperf with fixed lengths, ``ignore_eos``, 20 x concurrency requests (as silicon_e2e's aic rows);
* InferenceMAX rows: SGLang's defaults (its launch flags are not in the data), lengths uniform in
  [0.8 L, L] (``silicon_e2e.imax_lengths``).

Costs are vLLM's kernel tables (calibrated) or the roofline: SGLang's own kernels are not timed,
so this measures the scheduler mirror and the cost model together. Prints one line per row and
the TTFT / TPOT MAPE per model and system and in total.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import silicon_e2e as E  # noqa: E402  (the vLLM bench's row mapping and scoring)

AIC_EXTRA_TOKENS = 1500         # sglang.rule: max_prefill_tokens = isl + 1500
# Checkpoints the catalogue holds under their base model's name (the same config.json but the
# chat template): simulated as that model.
SAME_CONFIG = {"meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.1-8B"}


def load_sglang_rows(systems: tuple[str, ...]) -> list[dict[str, str]]:
    with open(E.SILICON_CSV, newline="") as f:
        return [r for r in csv.DictReader(f) if r["backend"] == "sglang" and r["mode"] == "agg"
                and r["system"] in systems]


def _sglang_ep(row: dict[str, str]) -> tuple[dict[str, str], int]:
    """(the row with its MoE layout as the TP layout, SGLang's --ep-size): a row of tp_size GPUs
    whose moe_tp x moe_ep spans them (moe_ep > 1, no attention DP) is SGLang's expert parallelism,
    moe_tp = tp / ep included (a layout vLLM lacks, so silicon_e2e's mapping would skip it)."""
    def num(key: str) -> int:
        return int(float(row.get(key) or 0) or 0)
    tp, dp, moe_tp, moe_ep = num("tp_size"), num("attention_dp_size") or 1, num("moe_tp_size"), num("moe_ep_size")
    if moe_ep > 1 and dp == 1 and moe_tp * moe_ep == tp:
        return dict(row, moe_tp_size=str(tp), moe_ep_size="1"), moe_ep
    return row, 1


def map_sglang_row(row: dict[str, str]) -> tuple[E.Deployment, dict[str, Any]] | E.Skip:
    """(Deployment, SglangArgs keywords) of a row, or Skip."""
    row, ep = _sglang_ep(row)
    dep = E.map_row(dict(row, model_path=SAME_CONFIG.get(row["model_path"], row["model_path"])),
                    aic_runs="vllm-defaults")
    if isinstance(dep, E.Skip):
        return dep
    if dep.dp > 1 or dep.pp > 1 or dep.enable_expert_parallel:
        return E.Skip(dep.row_id, dep.model_path, dep.system, "attention DP / PP not simulated for SGLang",
                      f"tp={dep.tp} dp={dep.dp} pp={dep.pp} ep={dep.enable_expert_parallel}")
    flags: dict[str, Any] = {"ep_size": ep} if ep > 1 else {}
    if dep.harness == "aic":
        c, bs = dep.concurrency, dep.batch_size
        flags |= dict(max_running_requests=bs, max_prefill_tokens=dep.isl + AIC_EXTRA_TOKENS, enable_mixed_chunk=True,
                     cuda_graph_bs=tuple(range(1, bs + 1)))
        prompts = E.AIC_REQUESTS_PER_SLOT * c
        dep = replace(dep, bench_prompts=prompts, num_prompts=E.num_prompts_for(c, dep.osl, prompts))
    return dep, flags


def simulate(dep: E.Deployment, flags: dict[str, Any], bundle: str | None, seed: int = E.DEFAULT_SEED) -> dict:
    from simulator.engine_args import EngineArgs
    from simulator.sglang_layout import SglangArgs
    from simulator.simulation import SimulationSpec, run_simulation
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="silicon_sglang_") as tmp:
        workload = E.row_workload(dep, Path(tmp), seed)
        engine = EngineArgs(model=dep.model, gpu=dep.gpu, tensor_parallel_size=dep.tp, quantization=dep.quantization,
                            kv_cache_dtype=dep.kv_cache_dtype)
        try:
            res = run_simulation(SimulationSpec(
                engine=engine, workload=workload, sglang=SglangArgs(**flags), max_concurrency=dep.concurrency,
                predictor_bundle=bundle, comm_model="calibrated", moe_routing=E.MOE_ROUTING,
                frontend_latency_s=E.FRONTEND_LATENCY_MS * 1e-3))
        except ValueError as exc:
            return {"error": str(exc), "wall_s": time.perf_counter() - t0}
    return E.row_result(res, dep, t0, retractions=res.summary.get("sglang_num_retractions"))


def _work(item: tuple[E.Deployment, dict, str | None]) -> dict[str, Any]:
    dep, flags, bundle = item
    out = {"deployment": asdict(dep), "flags": {k: list(v) if isinstance(v, tuple) else v for k, v in flags.items()}}
    out["result"] = E.score(out["deployment"], simulate(dep, flags, bundle))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="h100_sxm,h200_sxm,b200_sxm,b300_sxm")
    ap.add_argument("--models", default=None, help="comma-separated substrings of model_path")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--predictor-bundle", default="none", help="none (roofline), auto, or a bundle path")
    ap.add_argument("--out", type=Path, default=None, help="write the per-row results as JSON")
    args = ap.parse_args(argv)
    systems = tuple(s for s in args.systems.split(",") if s)
    bad = [s for s in systems if s not in E.SYSTEM_TO_GPU]
    if bad or args.jobs < 1 or (args.limit is not None and args.limit < 1):
        ap.error(f"--systems {bad} not in {sorted(E.SYSTEM_TO_GPU)}" if bad else "--jobs and --limit must be >= 1")
    rows = load_sglang_rows(systems)
    if args.models:
        subs = [m for m in args.models.split(",") if m]
        rows = [r for r in rows if any(m in r["model_path"] for m in subs)]
    items, skips = [], []
    for row in rows:
        mapped = map_sglang_row(row)
        (skips.append(mapped) if isinstance(mapped, E.Skip) else items.append(mapped))
    items = items[:args.limit] if args.limit else items
    bundles = E.resolve_bundles(args.predictor_bundle, {d.gpu for d, _ in items})
    work = [(d, f, bundles[d.gpu]) for d, f in items]
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_work, work))
    else:
        results = [_work(w) for w in work]
    groups: dict[str, list[dict]] = {}
    print(f"{'row':<58} {'c':>4} {'isl/osl':>11} {'TTFT sim/meas ms':>19} {'TPOT sim/meas ms':>17}")
    for out in results:
        d, r = out["deployment"], out["result"]
        label = f"{d['model_path']}@{d['system']} tp{d['tp']} {d['harness']}"
        if "error" in r:
            print(f"{d['row_id'][:58]:<58} error: {r['error'][:100]}")
            groups.setdefault(label, [])
            continue
        print(f"{d['row_id'][:58]:<58} {d['concurrency']:>4} {d['isl']:>5}/{d['osl']:<5} "
              f"{r['ttft_ms_bench']:>8.1f}/{d['ttft_meas_ms']:<9.1f} {r['tpot_ms_bench']:>7.2f}/{d['tpot_meas_ms']:<8.2f}")
        groups.setdefault(label, []).append(r)
    print(f"\n{'model@system':<62} {'rows':>4} {'TTFT MAPE':>9} {'TPOT MAPE':>9}")
    every = []
    for label, rs in sorted(groups.items()):
        ok = [r for r in rs if "error" not in r]
        every += ok
        if ok:
            print(f"{label:<62} {len(ok):>4} {E._mape([r['ttft_ape_bench'] for r in ok]):>8.1f}% "
                  f"{E._mape([r['tpot_ape_bench'] for r in ok]):>8.1f}%")
    if every:
        print(f"{'all':<62} {len(every):>4} {E._mape([r['ttft_ape_bench'] for r in every]):>8.1f}% "
              f"{E._mape([r['tpot_ape_bench'] for r in every]):>8.1f}%")
    reasons: dict[str, int] = {}
    for s in skips:
        reasons[s.reason] = reasons.get(s.reason, 0) + 1
    print(f"\nskipped {len(skips)} rows: " + "; ".join(f"{n} {k}" for k, n in sorted(reasons.items(), key=lambda x: -x[1])))
    print(f"wall {time.perf_counter() - t0:.1f} s for {len(results)} rows, {args.jobs} job(s)")
    if args.out:
        args.out.write_text(json.dumps({"results": results, "skips": [asdict(s) for s in skips]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
