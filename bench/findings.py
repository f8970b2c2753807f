"""Reproduce the paper's three qualitative findings on small deployments (roofline costs).

    .venv/bin/python bench/findings.py [--case a|b|c|all] [--json]

Each case prints a table and a one-line verdict computed from the table's numbers.

(a) ``pdd-split`` (paper §6.1, Figure 13): under a tight TTFT limit the best PDD split moves
    GPUs from decode to prefill. Llama-3.1-8B on 16 x H100 (``--total-gpus``), TP1 engines,
    every split P:D = 1:15 .. 15:1; random 1024 in / 256 out (range ratio 0.5), 8 s of Poisson arrivals at each
    rate of ``A_RATES_PER_GPU`` x the GPUs (20 .. 240 req/s on 16 GPUs). SLA = P90 TTFT <= limit and P90 TPOT <= limit (a generation-speed
    floor, as the paper's 50 tok/s/user). The limits are multiples of the unloaded latencies
    (lowest P90 over the splits at the lowest rate): TPOT ``A_TPOT_SLA_X`` x, TTFT each of
    ``A_TTFT_SLA_X`` x. Goodput of a split under an SLA = the highest request rate that meets
    it (the first crossing, linearly interpolated between the two rates around it). Verdict:
    the best split at the tightest TTFT limit has more prefill GPUs than at the loosest.
(b) ``cuda-graph-padding`` (paper §2.2, Table 2): decode-side CUDA-graph padding inflates
    decode work more under PDD than co-located. Llama-3.1-8B on H100, 64 requests sent at
    once per workload (ISL/OSL means 2048/256, 256/2048, 512/512, 1024/1024, range ratio 0.5):
    one TP1 engine co-located vs one prefill + one decode TP1 engine. Over the pure-decode
    steps (every scheduled request has one new token) of role C resp. D:
    useful = real tokens, padding = padded - real tokens, inflation = padding / useful.
    Column ``sim``: the padded size each step ran at with vLLM 0.33's default capture
    sizes (1, 2, 4, 8, 16, 24, 32, ...); column ``pow2``: a second simulation of the same
    workload with the paper's capture bins, ``--cudagraph-capture-sizes 1,2,4,8,16,32,64``
    (decode batches above 64 run eager, unpadded). Verdict: PDD inflation > co-located
    inflation on every workload (``sim`` column; the ``pow2`` count is reported too).
(c) ``afd-h20`` (paper §6.2, Figure 14): with H20s on the FFN side of an AFD deployment
    the FFN side is compute-bound and loses throughput; on the attention side throughput
    is kept. Qwen3-30B-A3B, P:A:F = 4:4:4 GPUs (prefill TP2 x 2 on H800, attention TP1 x
    DP4, FFN EP4), 2048 requests sent at once, random 256 in / 1024 out (range ratio 0.5);
    all-H800 vs H20 on F vs H20 on A. Per role: busy fraction (summary), busy seconds per
    decoded token (steps table, A rows), output throughput, and cost efficiency
    CE = (throughput / price) / (all-H800 throughput / price) with the catalogue's hourly
    prices. A role is compute-bound on H20 when its seconds per token are higher there than
    on H800 although the H20 has more HBM bandwidth (4.0 vs 3.35 TB/s) and 1/6.7 the BF16
    FLOP/s. Verdict: H20-on-F has F busy >= ``C_BUSY_BOUND``, F compute-bound, and throughput
    more than ``C_KEPT`` below all-H800; H20-on-A keeps throughput within ``C_KEPT``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

import numpy as np

from frontier.gpu import get_gpu
from simulator.control_plane import PddSpec, RoleLayout
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationResult, SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec

# ------------------------------------------------------------------------------ (a) settings
A_MODEL, A_GPU, A_TOTAL_GPUS = "meta-llama/Llama-3.1-8B", "H100", 16
A_ISL, A_OSL = 1024, 256
A_ARRIVAL_S = 8.0               # each run sends rate x 8 s requests (steady state: a request lives ~2-3 s)
A_RATES_PER_GPU = (1.25, 2.5, 3.75, 5.0, 6.25, 7.5, 8.75, 10.0, 12.5, 15.0)   # req/s per GPU of the total
A_TPOT_SLA_X = 1.5                 # P90 TPOT limit = 1.5 x the unloaded P90 TPOT (2/3 of its speed)
A_TTFT_SLA_X = (2.0, 4.0, 8.0, 16.0)   # P90 TTFT limits in unloaded P90 TTFTs; tight = 2x, loose = 16x

# ------------------------------------------------------------------------------ (b) settings
B_MODEL, B_GPU, B_NUM_PROMPTS = "meta-llama/Llama-3.1-8B", "H100", 64
B_WORKLOADS = ((2048, 256), (256, 2048), (512, 512), (1024, 1024))
PAPER_CAPTURE_BINS = (1, 2, 4, 8, 16, 32, 64)

# ------------------------------------------------------------------------------ (c) settings
C_MODEL, C_BASE_GPU, C_CHEAP_GPU = "Qwen/Qwen3-30B-A3B", "H800", "H20"
C_ISL, C_OSL, C_NUM_PROMPTS = 256, 1024, 2048
C_BUSY_BOUND = 0.9          # a role busy this much of the run is the bottleneck
C_KEPT = 0.10               # throughput within 10 % of all-H800 counts as kept


# ================================================================================ helpers
def p90_ms(values_s: list[float]) -> float:
    return float(np.percentile(values_s, 90)) * 1000.0 if values_s else float("nan")


def latency_p90s(result: SimulationResult) -> tuple[float, float]:
    """(P90 TTFT ms, P90 TPOT ms) over the finished requests (TPOT: output_len > 1 only)."""
    ttft = [r.first_token_s - r.send_s for r in result.records]
    tpot = [(r.finish_s - r.first_token_s) / (r.output_len - 1) for r in result.records if r.output_len > 1]
    return p90_ms(ttft), p90_ms(tpot)


def max_rate_under_sla(points: list[tuple[float, float, float]], ttft_ms: float, tpot_ms: float) -> float:
    """Highest request rate meeting P90 TTFT <= ``ttft_ms`` and P90 TPOT <= ``tpot_ms``.

    ``points``: (rate req/s, P90 TTFT ms, P90 TPOT ms), ascending rates. The answer is the
    first crossing: 0 if the lowest rate fails; the last rate if none fails (a lower bound);
    else between the last passing rate r0 and the first failing r1, each failing metric is
    interpolated linearly and the lowest rate where one reaches its limit is returned.
    """
    def ok(p: tuple[float, float, float]) -> bool:
        return p[1] <= ttft_ms and p[2] <= tpot_ms

    if not points or not ok(points[0]):
        return 0.0
    for p0, p1 in zip(points, points[1:]):
        if ok(p1):
            continue
        crossings = []
        for i, limit in ((1, ttft_ms), (2, tpot_ms)):
            if p1[i] > limit:
                crossings.append(p0[0] + (p1[0] - p0[0]) * (limit - p0[i]) / (p1[i] - p0[i]))
        return min(crossings)
    return points[-1][0]


def decode_padding(steps: dict[str, list], role: str) -> tuple[int, int]:
    """(useful tokens, padding tokens) over the pure-decode steps of ``role`` (one new token
    per scheduled request), from the padded size each step ran at (``padded_tokens``)."""
    useful = padding = 0
    for r, n_reqs, n_tok, padded in zip(steps["role"], steps["num_reqs"], steps["num_tokens"],
                                        steps["padded_tokens"]):
        if r != role or n_reqs == 0 or n_tok != n_reqs:
            continue
        useful += n_tok
        padding += padded - n_tok
    return useful, padding


# ================================================================================ (a)
def pdd_split_spec(prefill_gpus: int, rate: float, *, total: int = A_TOTAL_GPUS, arrival_s: float = A_ARRIVAL_S,
                   isl: int = A_ISL, osl: int = A_OSL, model: str = A_MODEL, gpu: str = A_GPU) -> SimulationSpec:
    """PDD with ``prefill_gpus`` TP1 prefill engines and ``total - prefill_gpus`` TP1 decode engines,
    ``round(rate x arrival_s)`` Poisson requests (at least 50)."""
    if not 1 <= prefill_gpus < total:
        raise ValueError(f"prefill_gpus {prefill_gpus} must be in 1..{total - 1} (both roles need a GPU of {total})")
    return SimulationSpec(
        engine=EngineArgs(model=model, gpu=gpu, max_model_len=4096),
        workload=WorkloadSpec(num_prompts=max(50, round(rate * arrival_s)), request_rate=rate, random_input_len=isl,
                              random_output_len=osl, random_range_ratio=0.5),
        architecture="pdd",
        pdd=PddSpec(prefill=RoleLayout("prefill", replicas=prefill_gpus, router="least_loaded"),
                    decode=RoleLayout("decode", replicas=total - prefill_gpus, router="kv_aware")))


def run_case_a(*, total: int = A_TOTAL_GPUS, rates: tuple[float, ...] | None = None,
               ttft_sla_x: tuple[float, ...] = A_TTFT_SLA_X, tpot_sla_x: float = A_TPOT_SLA_X,
               **spec_kw) -> dict:
    """Every split x rate; goodput per split and SLA; best split per SLA; the verdict.

    SLAs scale with the unloaded latencies, so the case does not hinge on the cost model's
    absolute speed: the floors are the lowest P90 TTFT and P90 TPOT over the splits at the
    lowest rate; TPOT limit = ``tpot_sla_x`` x floor, TTFT limits = each of ``ttft_sla_x`` x
    floor. A split's sweep stops at the first rate failing the loosest SLA. Ties in goodput
    go to the split with fewer prefill GPUs. A goodput equal to the highest rate swept is only
    a lower bound; the verdict is then inconclusive.
    """
    rates = rates or tuple(r * total for r in A_RATES_PER_GPU)
    specs = lambda p, rate: pdd_split_spec(p, rate, total=total, **spec_kw)     # noqa: E731
    splits = list(range(1, total))
    points = {p: [(rates[0], *latency_p90s(run_simulation(specs(p, rates[0]))))] for p in splits}
    ttft_floor = min(pts[0][1] for pts in points.values())
    tpot_floor = min(pts[0][2] for pts in points.values())
    tpot_sla = tpot_sla_x * tpot_floor
    ttft_slas = tuple(x * ttft_floor for x in ttft_sla_x)
    loosest = max(ttft_slas)
    rows = []
    for p in splits:
        pts = points[p]
        for rate in rates[1:]:
            if pts[-1][1] > loosest or pts[-1][2] > tpot_sla:
                break
            pts.append((rate, *latency_p90s(run_simulation(specs(p, rate)))))
        rows.append({"prefill_gpus": p, "decode_gpus": total - p, "points": pts,
                     "goodput": [max_rate_under_sla(pts, sla, tpot_sla) for sla in ttft_slas]})
    best = []
    for k in range(len(ttft_slas)):
        top = max(r["goodput"][k] for r in rows)
        best.append(min(r["prefill_gpus"] for r in rows if r["goodput"][k] == top))
    tight, loose = ttft_slas.index(min(ttft_slas)), ttft_slas.index(max(ttft_slas))
    capped = any(r["goodput"][k] >= rates[-1] for r in rows for k in (tight, loose))
    holds = best[tight] > best[loose] and not capped
    word = "INCONCLUSIVE (a goodput reached the highest rate swept)" if capped else (
        "REPRODUCED" if holds else "NOT REPRODUCED")
    verdict = (f"{word}: best split at P90 TTFT <= {ttft_slas[tight]:.0f} ms "
               f"is P:D = {best[tight]}:{total - best[tight]}, at <= {ttft_slas[loose]:.0f} ms it is "
               f"{best[loose]}:{total - best[loose]} (P90 TPOT <= {tpot_sla:.1f} ms)")
    return {"case": "a", "total_gpus": total, "ttft_floor_ms": ttft_floor, "tpot_floor_ms": tpot_floor,
            "tpot_sla_ms": tpot_sla, "ttft_slas_ms": list(ttft_slas), "splits": rows,
            "best_prefill_gpus": best, "holds": holds, "verdict": verdict}


def print_case_a(out: dict) -> None:
    slas = out["ttft_slas_ms"]
    print(f"(a) PDD split sweep, {out['total_gpus']} GPUs: P90 TTFT / P90 TPOT (ms) per rate (req/s); "
          f"goodput = max req/s with P90 TPOT <= {out['tpot_sla_ms']:.1f} ms and P90 TTFT <= limit "
          f"(unloaded: TTFT {out['ttft_floor_ms']:.0f} ms, TPOT {out['tpot_floor_ms']:.1f} ms)")
    rates = sorted({pt[0] for s in out["splits"] for pt in s["points"]})
    print(f"{'P:D':<5} " + " ".join(f"{r:>10g}" for r in rates) + "  | "
          + " ".join(f"{'<=' + format(x, '.0f') + 'ms':>9}" for x in slas))
    for s in out["splits"]:
        cells = {pt[0]: f"{pt[1]:.0f}/{pt[2]:.1f}" for pt in s["points"]}
        print(f"{s['prefill_gpus']}:{s['decode_gpus']:<3} " + " ".join(f"{cells.get(r, '-'):>10}" for r in rates)
              + "  | " + " ".join(f"{g:>9.1f}" for g in s["goodput"]))
    print("best P:D " + "  ".join(f"<={x:.0f}ms: {b}:{out['total_gpus'] - b}"
                                  for x, b in zip(slas, out["best_prefill_gpus"])))
    print(out["verdict"])


# ================================================================================ (b)
def padding_spec(architecture: str, isl: int, osl: int, *, num_prompts: int = B_NUM_PROMPTS,
                 model: str = B_MODEL, gpu: str = B_GPU,
                 capture_sizes: tuple[int, ...] | None = None) -> SimulationSpec:
    """One TP1 engine (co-located) or one TP1 prefill + one TP1 decode engine (PDD);
    ``capture_sizes`` = ``--cudagraph-capture-sizes`` (None: vLLM's default list)."""
    return SimulationSpec(
        engine=EngineArgs(model=model, gpu=gpu, max_model_len=4096, cudagraph_capture_sizes=capture_sizes),
        workload=WorkloadSpec(num_prompts=num_prompts, request_rate=float("inf"), random_input_len=isl,
                              random_output_len=osl, random_range_ratio=0.5),
        architecture=architecture)


def run_case_b(workloads: tuple[tuple[int, int], ...] = B_WORKLOADS, **spec_kw) -> dict:
    rows = []
    for isl, osl in workloads:
        for arch, role in (("colocated", "C"), ("pdd", "D")):
            steps = run_simulation(padding_spec(arch, isl, osl, **spec_kw)).trace.step_cols
            useful, pad = decode_padding(steps, role)
            steps2 = run_simulation(padding_spec(arch, isl, osl, capture_sizes=PAPER_CAPTURE_BINS,
                                                 **spec_kw)).trace.step_cols
            useful2, pad2 = decode_padding(steps2, role)
            rows.append({"isl": isl, "osl": osl, "architecture": arch, "useful": useful,
                         "padding": pad, "inflation": pad / useful, "useful_pow2": useful2,
                         "padding_pow2": pad2, "inflation_pow2": pad2 / useful2})
    pairs = [(c, d) for c, d in zip(rows[::2], rows[1::2])]
    holds = all(d["inflation"] > c["inflation"] for c, d in pairs)
    holds_pow2 = all(d["inflation_pow2"] > c["inflation_pow2"] for c, d in pairs)
    n_more = sum(d["inflation"] > c["inflation"] for c, d in pairs)
    n_more2 = sum(d["inflation_pow2"] > c["inflation_pow2"] for c, d in pairs)
    verdict = (f"{'REPRODUCED' if holds else 'NOT REPRODUCED'}: PDD decode inflation exceeds co-located on "
               f"{n_more} of {len(pairs)} workloads (vLLM 0.33 capture sizes), on {n_more2} of {len(pairs)} "
               f"with the paper's bins")
    return {"case": "b", "rows": rows, "holds": holds, "holds_pow2": holds_pow2, "verdict": verdict}


def print_case_b(out: dict) -> None:
    print("(b) CUDA-graph decode padding, 64 requests: useful decode tokens, padding (wasted slots), "
          "inflation = padding / useful")
    print(f"{'ISL/OSL':<10} {'arch':<10} {'useful':>8} {'pad sim':>8} {'infl sim':>9} {'useful pow2':>11} "
          f"{'pad pow2':>9} {'infl pow2':>9}")
    for r in out["rows"]:
        print(f"{str(r['isl']) + '/' + str(r['osl']):<10} {r['architecture']:<10} {r['useful']:>8} {r['padding']:>8} "
              f"{r['inflation']:>9.1%} {r['useful_pow2']:>11} {r['padding_pow2']:>9} {r['inflation_pow2']:>9.1%}")
    print(out["verdict"])


# ================================================================================ (c)
@dataclass(frozen=True)
class AfdLayout:
    """GPUs of an AFD case: prefill TP x replicas, attention DP (TP1), FFN EP, and the GPU types."""

    prefill_tp: int = 2
    prefill_replicas: int = 2
    attention_dp: int = 4
    ffn_ep: int = 4
    attention_gpu: str = C_BASE_GPU
    ffn_gpu: str = C_BASE_GPU


def afd_spec(layout: AfdLayout, *, num_prompts: int = C_NUM_PROMPTS, isl: int = C_ISL, osl: int = C_OSL,
             model: str = C_MODEL, prefill_gpu: str = C_BASE_GPU) -> SimulationSpec:
    from simulator.afd import AfdRole, AfdSpec
    return SimulationSpec(
        engine=EngineArgs(model=model, gpu=prefill_gpu, max_model_len=4096),
        workload=WorkloadSpec(num_prompts=num_prompts, request_rate=float("inf"), random_input_len=isl,
                              random_output_len=osl, random_range_ratio=0.5),
        architecture="afd",
        pdd=PddSpec(prefill=RoleLayout("prefill", tp=layout.prefill_tp, replicas=layout.prefill_replicas)),
        afd=AfdSpec(attention=AfdRole("attention", dp=layout.attention_dp, gpu=layout.attention_gpu),
                    ffn=AfdRole("ffn", ep=layout.ffn_ep, gpu=layout.ffn_gpu)))


def afd_row(name: str, layout: AfdLayout, result: SimulationResult, prefill_gpu: str) -> dict:
    """Per-role figures of one AFD run; busy seconds per token from the A rows of the step table."""
    s, st = result.summary, result.trace.step_cols
    rows = [i for i, r in enumerate(st["role"]) if r == "A"]
    tokens = sum(st["num_tokens"][i] for i in rows)
    price = (layout.prefill_tp * layout.prefill_replicas * get_gpu(prefill_gpu).price_per_hour_usd
             + layout.attention_dp * get_gpu(layout.attention_gpu).price_per_hour_usd
             + layout.ffn_ep * get_gpu(layout.ffn_gpu).price_per_hour_usd)
    return {"name": name, "attention_gpu": layout.attention_gpu, "ffn_gpu": layout.ffn_gpu,
            "output_tok_s": s["output_throughput"], "mean_tpot_ms": s["mean_tpot_ms"],
            "a_busy": s["attention_busy_fraction"], "f_busy": s["ffn_busy_fraction"],
            "a_us_per_tok": sum(st["afd_a_busy_s"][i] for i in rows) / tokens * 1e6,
            "f_us_per_tok": sum(st["afd_f_busy_s"][i] for i in rows) / tokens * 1e6,
            "price_per_h": price}


def run_case_c(layout: AfdLayout = AfdLayout(), **spec_kw) -> dict:
    base, cheap = layout.attention_gpu, C_CHEAP_GPU
    cases = (("all-" + base, layout),
             (f"{cheap}-FFN", AfdLayout(layout.prefill_tp, layout.prefill_replicas, layout.attention_dp,
                                        layout.ffn_ep, base, cheap)),
             (f"{cheap}-ATTN", AfdLayout(layout.prefill_tp, layout.prefill_replicas, layout.attention_dp,
                                         layout.ffn_ep, cheap, base)))
    prefill_gpu = spec_kw.get("prefill_gpu", C_BASE_GPU)
    rows = [afd_row(name, lay, run_simulation(afd_spec(lay, **spec_kw)), prefill_gpu) for name, lay in cases]
    ref = rows[0]
    for r in rows:
        r["throughput_vs_base"] = r["output_tok_s"] / ref["output_tok_s"]
        r["cost_efficiency"] = (r["output_tok_s"] / r["price_per_h"]) / (ref["output_tok_s"] / ref["price_per_h"])
    f_row, a_row = rows[1], rows[2]
    f_compute_bound = f_row["f_us_per_tok"] > ref["f_us_per_tok"]
    f_holds = f_row["f_busy"] >= C_BUSY_BOUND and f_compute_bound and f_row["throughput_vs_base"] < 1 - C_KEPT
    a_holds = a_row["throughput_vs_base"] >= 1 - C_KEPT
    holds = f_holds and a_holds
    word = {(True, True): "REPRODUCED", (True, False): "FFN SIDE REPRODUCED, ATTENTION SIDE NOT",
            (False, True): "ATTENTION SIDE REPRODUCED, FFN SIDE NOT", (False, False): "NOT REPRODUCED"}
    verdict = (f"{word[f_holds, a_holds]}: {cheap} on FFN: F busy {f_row['f_busy']:.2f}, "
               f"F {f_row['f_us_per_tok'] / ref['f_us_per_tok']:.2f}x the {base} seconds per token "
               f"({'compute-bound' if f_compute_bound else 'not compute-bound'}), throughput "
               f"{f_row['throughput_vs_base']:.2f}x; {cheap} on attention: throughput {a_row['throughput_vs_base']:.2f}x "
               f"(kept = within {C_KEPT:.0%})")
    return {"case": "c", "rows": rows, "ffn_side_holds": f_holds, "attention_side_holds": a_holds,
            "holds": holds, "verdict": verdict}


def print_case_c(out: dict) -> None:
    print("(c) AFD with H20 on one side: busy fraction of the run, busy us per decoded token, output "
          "throughput, cost efficiency vs the first row")
    print(f"{'placement':<10} {'A gpu':<6} {'F gpu':<6} {'A busy':>6} {'F busy':>6} {'A us/tok':>8} "
          f"{'F us/tok':>8} {'tok/s':>8} {'vs base':>7} {'TPOT ms':>7} {'$/h':>6} {'CE':>5}")
    for r in out["rows"]:
        print(f"{r['name']:<10} {r['attention_gpu']:<6} {r['ffn_gpu']:<6} {r['a_busy']:>6.2f} {r['f_busy']:>6.2f} "
              f"{r['a_us_per_tok']:>8.2f} {r['f_us_per_tok']:>8.2f} {r['output_tok_s']:>8.0f} "
              f"{r['throughput_vs_base']:>7.2f} {r['mean_tpot_ms']:>7.1f} {r['price_per_h']:>6.2f} "
              f"{r['cost_efficiency']:>5.2f}")
    print(out["verdict"])


# ================================================================================ main
CASES = {"a": (run_case_a, print_case_a), "b": (run_case_b, print_case_b), "c": (run_case_c, print_case_c)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=("a", "b", "c", "all"), default="all")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    parser.add_argument("--total-gpus", type=int, default=A_TOTAL_GPUS, help="case a: GPUs split between P and D")
    args = parser.parse_args()
    if args.total_gpus < 2:
        parser.error(f"--total-gpus {args.total_gpus} must be >= 2 (one prefill and one decode GPU)")
    results = {}
    for key in ("a", "b", "c") if args.case == "all" else (args.case,):
        run, show = CASES[key]
        cpu0 = time.process_time()
        out = run(total=args.total_gpus) if key == "a" else run()
        out["cpu_s"] = time.process_time() - cpu0
        results[key] = out
        if not args.json:
            show(out)
            print(f"[{key}: {out['cpu_s']:.0f} s CPU]\n", flush=True)
    if args.json:
        print(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
