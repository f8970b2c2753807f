"""Reproduce the paper's three qualitative findings on small deployments (roofline costs).

    .venv/bin/python bench/findings.py [--case a|b|c|all] [--total-gpus N | --paper-scale] [--c-models 30b,235b]
        [--json]

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
    ``--paper-scale``: the paper's own setting instead (``A_PAPER``): 256 H800 as 32 TP8 engines
    of Llama-3.3-70B, P = 64 .. 192 GPUs, 1024/1024, P90 TTFT <= 500 vs <= 3000 ms and P90 TPOT
    <= 20 ms (absolute, the paper's limits), 20 s of arrivals per rate.
(b) ``cuda-graph-padding`` (paper §2.2, Table 2): decode-side CUDA-graph padding inflates
    decode work more under PDD than co-located. Llama-3.1-8B on H100, 64 requests per workload
    (ISL/OSL means 2048/256, 256/2048, 512/512, 1024/1024, range ratio 0.5), sent at each
    rate of ``B_RATES`` (inf = all at once; the paper does not state its rate): one TP1
    engine co-located vs one prefill + one decode TP1 engine. Over the pure-decode
    steps (every scheduled request has one new token) of role C resp. D:
    useful = real tokens, padding = padded - real tokens, inflation = padding / useful.
    Column ``sim``: the padded size each step ran at with vLLM 0.33's default capture
    sizes (1, 2, 4, 8, 16, 24, 32, ...); column ``pow2``: a second simulation of the same
    workload with the paper's capture bins, ``--cudagraph-capture-sizes 1,2,4,8,16,32,64``
    (decode batches above 64 run eager, unpadded). Verdict per rate: PDD inflation >
    co-located inflation on every workload in both columns; the finding is REPRODUCED at a
    rate where that holds, and the overall verdict names the rates where it does.
(c) ``afd-h20`` (paper §6.2, Figure 14): with H20s on the FFN side of an AFD deployment
    the FFN side is compute-bound and loses throughput; on the attention side throughput
    is kept. Two models (``--c-models``, ``C_LAYOUTS``): Qwen3-30B-A3B at P:A:F = 4:4:4 GPUs
    (prefill TP2 x 2, attention TP1 x DP4, FFN EP4) and the paper's Qwen3-235B-A22B at 8:8:8
    (prefill TP8, attention TP4 x DP2, FFN EP8; bf16 weights need TP8 / EP8 on 80 GB). Prefill
    runs on H800. Per model, ``C_NUM_PROMPTS`` requests sent at once of each workload in
    ``C_WORKLOADS``: the paper's four (random 2048/256, 256/2048, 1024/1024 with range ratio
    0.5; ShareGPT) and 256/1024; placements all-H800, H20 on F, H20 on A. The A-F link is the
    NIC in every placement (A and F pools on separate nodes: mixing GPU types forces it, and
    we assume it at the paper's 1,024-GPU scale); where A + F fit one node the all-H800 layout also runs
    on NVLink (simulator.afd's default), reported but not the reference. Per row: busy
    fraction (summary), busy us per decoded token (steps table, A rows), output throughput,
    vs base = throughput / all-H800's (NIC), CE = that per dollar at the paper's prices
    (H800 $3.49, H20 $1.59 per hour), gate = CE > ``C_GATE_CE`` (the paper's), and the mean
    decode context (tokens in KV per decode step). Per workload also A's time per layer for
    one lane on each GPU (projections, attention, the rest). A role is compute-bound on H20
    when its seconds per token are higher there than on H800 although the H20 has more HBM
    bandwidth (4.0 vs 3.35 TB/s) and 1/6.7 the BF16 FLOP/s. Verdict per workload: reproduced
    when H20-on-F has F busy >= ``C_BUSY_BOUND``, F compute-bound and throughput more than
    ``C_KEPT`` below all-H800, and H20-on-A keeps throughput within ``C_KEPT``; the paper's
    gate (A passes, F fails) is reported beside it. Overall: per model, on how many
    workloads; where, by mean decode context, the attention side keeps its throughput; and
    where, by requests per A step, the FFN side regresses (compute-bound and more than
    ``C_KEPT`` throughput lost, F busy not required).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass, replace

import numpy as np

from frontier.gpu import get_gpu
from simulator.afd import DEFAULT_AFD_LANES
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
# --paper-scale: the paper's §6.1 setting (Figure 13): 256 H800, Llama-3.3-70B (the catalogue's Llama-3.1-70B:
# the same architecture and shapes), the paper's absolute limits (TTFT <= 500 / 3000 ms, 50 tok/s/user =
# TPOT <= 20 ms; as P90 here, the paper's are P95), TP8 engines, P = 8 .. 24 of the 32 engines, random
# 1024 in / 1024 out (range ratio 0.5; the paper's "batch-inference" lengths are not stated), 20 s of arrivals.
A_PAPER = {"model": "meta-llama/Llama-3.1-70B", "gpu": "H800", "total": 32, "tp": 8,
           "splits": (8, 10, 12, 14, 16, 18, 20, 22, 24), "osl": 1024,
           "rates": (25.0, 50.0, 75.0, 100.0, 125.0, 150.0, 175.0, 200.0, 250.0, 300.0),
           "ttft_slas_ms": (500.0, 3000.0), "tpot_sla_ms": 20.0, "arrival_s": 20.0}

# ------------------------------------------------------------------------------ (b) settings
B_MODEL, B_GPU, B_NUM_PROMPTS = "meta-llama/Llama-3.1-8B", "H100", 64
B_WORKLOADS = ((2048, 256), (256, 2048), (512, 512), (1024, 1024))
B_RATES = (float("inf"), 32.0, 16.0, 8.0, 4.0, 1.0)   # req/s
PAPER_CAPTURE_BINS = (1, 2, 4, 8, 16, 32, 64)

# ------------------------------------------------------------------------------ (c) settings
C_BASE_GPU, C_CHEAP_GPU, C_NUM_PROMPTS = "H800", "H20", 2048
C_WORKLOADS = (("2048/256", 2048, 256), ("256/2048", 256, 2048), ("1024/1024", 1024, 1024),
               ("sharegpt", 0, 0), ("256/1024", 256, 1024))    # (name, ISL, OSL): the paper's four + ours
C_PAPER_PRICES = {"H800": 3.49, "H20": 1.59}    # USD per GPU-hour, paper §6.2
C_GATE_CE = 1.08            # the paper's gate: a placement needs CE > 1.08
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
                   isl: int = A_ISL, osl: int = A_OSL, model: str = A_MODEL, gpu: str = A_GPU,
                   tp: int = 1) -> SimulationSpec:
    """PDD with ``prefill_gpus`` TP``tp`` prefill engines and ``total - prefill_gpus`` TP``tp`` decode
    engines (counts in engines: GPUs / tp), ``round(rate x arrival_s)`` Poisson requests (at least 50)."""
    if not 1 <= prefill_gpus < total:
        raise ValueError(f"prefill_gpus {prefill_gpus} must be in 1..{total - 1} (both roles need a GPU of {total})")
    return SimulationSpec(
        engine=EngineArgs(model=model, gpu=gpu, max_model_len=4096, tensor_parallel_size=tp),
        workload=WorkloadSpec(num_prompts=max(50, round(rate * arrival_s)), request_rate=rate, random_input_len=isl,
                              random_output_len=osl, random_range_ratio=0.5),
        architecture="pdd",
        pdd=PddSpec(prefill=RoleLayout("prefill", replicas=prefill_gpus, router="least_loaded"),
                    decode=RoleLayout("decode", replicas=total - prefill_gpus, router="kv_aware")))


def run_case_a(*, total: int = A_TOTAL_GPUS, rates: tuple[float, ...] | None = None,
               ttft_sla_x: tuple[float, ...] = A_TTFT_SLA_X, tpot_sla_x: float = A_TPOT_SLA_X,
               splits: tuple[int, ...] | None = None, ttft_slas_ms: tuple[float, ...] | None = None,
               tpot_sla_ms: float | None = None, **spec_kw) -> dict:
    """Every split x rate; goodput per split and SLA; best split per SLA; the verdict.

    SLAs scale with the unloaded latencies, so the case does not hinge on the cost model's
    absolute speed: the floors are the lowest P90 TTFT and P90 TPOT over the splits at the
    lowest rate; TPOT limit = ``tpot_sla_x`` x floor, TTFT limits = each of ``ttft_sla_x`` x
    floor. A split's sweep stops at the first rate failing the loosest SLA. Ties in goodput
    go to the split with fewer prefill GPUs. A goodput equal to the highest rate swept is only
    a lower bound; the verdict is then inconclusive. ``splits`` (prefill engines; default every
    one), ``ttft_slas_ms`` and ``tpot_sla_ms`` (absolute limits instead of the multiples) serve
    ``--paper-scale``; ``total`` and the splits count engines (GPUs / ``tp`` of ``spec_kw``).
    """
    rates = rates or tuple(r * total for r in A_RATES_PER_GPU)
    specs = lambda p, rate: pdd_split_spec(p, rate, total=total, **spec_kw)     # noqa: E731
    splits = list(splits or range(1, total))
    points = {p: [(rates[0], *latency_p90s(run_simulation(specs(p, rates[0]))))] for p in splits}
    ttft_floor = min(pts[0][1] for pts in points.values())
    tpot_floor = min(pts[0][2] for pts in points.values())
    tpot_sla = tpot_sla_ms if tpot_sla_ms is not None else tpot_sla_x * tpot_floor
    ttft_slas = ttft_slas_ms if ttft_slas_ms is not None else tuple(x * ttft_floor for x in ttft_sla_x)
    loosest = max(ttft_slas)
    tp = spec_kw.get("tp", 1)
    gpus = total * tp
    rows = []
    for p in splits:
        pts = points[p]
        for rate in rates[1:]:
            if pts[-1][1] > loosest or pts[-1][2] > tpot_sla:
                break
            pts.append((rate, *latency_p90s(run_simulation(specs(p, rate)))))
        rows.append({"prefill_gpus": p * tp, "decode_gpus": (total - p) * tp, "points": pts,
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
               f"is P:D = {best[tight]}:{gpus - best[tight]} GPUs, at <= {ttft_slas[loose]:.0f} ms it is "
               f"{best[loose]}:{gpus - best[loose]} (P90 TPOT <= {tpot_sla:.1f} ms)")
    return {"case": "a", "total_gpus": gpus, "gpus_per_engine": tp, "ttft_floor_ms": ttft_floor, "tpot_floor_ms": tpot_floor,
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
                 capture_sizes: tuple[int, ...] | None = None, rate: float = float("inf")) -> SimulationSpec:
    """One TP1 engine (co-located) or one TP1 prefill + one TP1 decode engine (PDD);
    ``capture_sizes`` = ``--cudagraph-capture-sizes`` (None: vLLM's default list); ``rate``
    in req/s (Poisson; inf = all at t = 0)."""
    return SimulationSpec(
        engine=EngineArgs(model=model, gpu=gpu, max_model_len=4096, cudagraph_capture_sizes=capture_sizes),
        workload=WorkloadSpec(num_prompts=num_prompts, request_rate=rate, random_input_len=isl,
                              random_output_len=osl, random_range_ratio=0.5),
        architecture=architecture)


def run_case_b(workloads: tuple[tuple[int, int], ...] = B_WORKLOADS, rates: tuple[float, ...] = B_RATES,
               **spec_kw) -> dict:
    """Every rate x workload x architecture, both capture lists; a verdict per rate, then overall."""
    rows, per_rate = [], []
    for rate in rates:
        mine = []
        for isl, osl in workloads:
            for arch, role in (("colocated", "C"), ("pdd", "D")):
                row = {"rate": rate, "isl": isl, "osl": osl, "architecture": arch}
                for suffix, sizes in (("", None), ("_pow2", PAPER_CAPTURE_BINS)):   # vLLM's list, the paper's bins
                    steps = run_simulation(padding_spec(arch, isl, osl, capture_sizes=sizes, rate=rate,
                                                        **spec_kw)).trace.step_cols
                    useful, pad = decode_padding(steps, role)
                    row.update({f"useful{suffix}": useful, f"padding{suffix}": pad,
                                f"inflation{suffix}": pad / useful})
                mine.append(row)
        pairs = list(zip(mine[::2], mine[1::2]))
        n_more = sum(d["inflation"] > c["inflation"] for c, d in pairs)
        n_more2 = sum(d["inflation_pow2"] > c["inflation_pow2"] for c, d in pairs)
        holds = n_more == n_more2 == len(pairs)
        per_rate.append({"rate": rate, "holds": holds, "verdict": (
            f"{'REPRODUCED' if holds else 'NOT REPRODUCED'} at {rate:g} req/s: PDD decode inflation exceeds "
            f"co-located on {n_more} of {len(pairs)} workloads (vLLM 0.33 capture sizes), on {n_more2} of "
            f"{len(pairs)} with the paper's bins")})
        rows += mine
    yes = [r["rate"] for r in per_rate if r["holds"]]
    no = [r["rate"] for r in per_rate if not r["holds"]]
    word = "REPRODUCED" if not no else ("PARTLY REPRODUCED" if yes else "NOT REPRODUCED")
    verdict = (f"{word}: PDD pads decode more than co-located on every workload at "
               + (", ".join(f"{r:g}" for r in yes) or "no") + " req/s"
               + (", not at " + ", ".join(f"{r:g}" for r in no) + " req/s" if no else ""))
    return {"case": "b", "rows": rows, "per_rate": per_rate, "holds": bool(yes) and not no,
            "holds_at": yes, "verdict": verdict}


def print_case_b(out: dict) -> None:
    print("(b) CUDA-graph decode padding, 64 requests: useful decode tokens, padding (wasted slots), "
          "inflation = padding / useful")
    print(f"{'req/s':>6} {'ISL/OSL':<10} {'arch':<10} {'useful':>8} {'pad sim':>8} {'infl sim':>9} "
          f"{'useful pow2':>11} {'pad pow2':>9} {'infl pow2':>9}")
    for r in out["rows"]:
        print(f"{r['rate']:>6g} {str(r['isl']) + '/' + str(r['osl']):<10} {r['architecture']:<10} {r['useful']:>8} "
              f"{r['padding']:>8} {r['inflation']:>9.1%} {r['useful_pow2']:>11} {r['padding_pow2']:>9} "
              f"{r['inflation_pow2']:>9.1%}")
    for r in out["per_rate"]:
        print(f"  {r['verdict']}")
    print(out["verdict"])


# ================================================================================ (c)
@dataclass(frozen=True)
class AfdLayout:
    """An AFD case: the model, prefill TP x replicas (on ``C_BASE_GPU``), attention TP x DP,
    FFN EP, and the GPU types of A and F."""

    model: str = "Qwen/Qwen3-30B-A3B"
    prefill_tp: int = 2
    prefill_replicas: int = 2
    attention_tp: int = 1
    attention_dp: int = 4
    ffn_ep: int = 4
    attention_gpu: str = C_BASE_GPU
    ffn_gpu: str = C_BASE_GPU

    @property
    def gpus(self) -> tuple[int, int, int]:
        """(P, A, F) GPU counts."""
        return (self.prefill_tp * self.prefill_replicas, self.attention_tp * self.attention_dp, self.ffn_ep)

    def a_f_fit_one_node(self) -> bool:
        """simulator.afd's rule for the default A-F link: NVLink when A and F have one GPU type and
        one A engine's TP plus the F replica's EP GPUs fit a node, else the NIC."""
        gpu = get_gpu(self.attention_gpu)
        return self.attention_gpu == self.ffn_gpu and self.attention_tp + self.ffn_ep <= gpu.gpus_per_node


C_LAYOUTS = {
    "30b": AfdLayout(),
    # 470 GB of bf16 weights: prefill needs TP8 on 80 GB; the experts need EP8 (57 GB per H800)
    "235b": AfdLayout("Qwen/Qwen3-235B-A22B", prefill_tp=8, prefill_replicas=1, attention_tp=4, attention_dp=2,
                      ffn_ep=8),
}


def nic_bw(layout: AfdLayout) -> float:
    """The A-F link when A and F sit on different nodes: the slower of the two GPUs' NICs (bytes/s)."""
    return min(get_gpu(layout.attention_gpu).network_bw_bytes_per_s, get_gpu(layout.ffn_gpu).network_bw_bytes_per_s)


def afd_spec(layout: AfdLayout, workload: tuple[str, int, int] = C_WORKLOADS[0], *,
             num_prompts: int = C_NUM_PROMPTS, link_bw: float | None = None) -> SimulationSpec:
    """``num_prompts`` requests sent at once; ``workload`` = (name, ISL, OSL) of a random dataset
    (range ratio 0.5) or ("sharegpt", 0, 0); ``link_bw`` = A-F link bytes/s (None: simulator.afd's rule)."""
    from simulator.afd import AfdRole, AfdSpec
    name, isl, osl = workload
    if name == "sharegpt":
        wl = WorkloadSpec(dataset_name="sharegpt", num_prompts=num_prompts, request_rate=float("inf"))
    else:
        wl = WorkloadSpec(num_prompts=num_prompts, request_rate=float("inf"), random_input_len=isl,
                          random_output_len=osl, random_range_ratio=0.5)
    return SimulationSpec(
        engine=EngineArgs(model=layout.model, gpu=C_BASE_GPU, max_model_len=4096),
        workload=wl,
        architecture="afd",
        pdd=PddSpec(prefill=RoleLayout("prefill", tp=layout.prefill_tp, replicas=layout.prefill_replicas)),
        afd=AfdSpec(attention=AfdRole("attention", tp=layout.attention_tp, dp=layout.attention_dp,
                                      gpu=layout.attention_gpu),
                    ffn=AfdRole("ffn", ep=layout.ffn_ep, gpu=layout.ffn_gpu),
                    link_bandwidth_bytes_per_s=link_bw))


def paper_price_per_h(layout: AfdLayout) -> float:
    """Hourly price of the layout's GPUs at the paper's prices (prefill on ``C_BASE_GPU``)."""
    p, a, f = layout.gpus
    return (p * C_PAPER_PRICES[C_BASE_GPU] + a * C_PAPER_PRICES[layout.attention_gpu]
            + f * C_PAPER_PRICES[layout.ffn_gpu])


def mean_decode_context(result: SimulationResult) -> float:
    """Tokens in KV per decode step of a request, averaged over all decode steps: request r's
    ``out - 1`` steps see ``prompt + 1 .. prompt + out - 1`` tokens (the first token comes from P)."""
    num = den = 0
    for r in result.records:
        steps = r.output_len - 1
        num += steps * r.prompt_len + steps * (steps + 1) // 2
        den += steps
    return num / den if den else 0.0


def afd_row(name: str, layout: AfdLayout, result: SimulationResult, link: str) -> dict:
    """Per-role figures of one AFD run; busy seconds per token from the A rows of the step table."""
    s, st = result.summary, result.trace.step_cols
    rows = [i for i, r in enumerate(st["role"]) if r == "A"]
    tokens = sum(st["num_tokens"][i] for i in rows)
    step_tokens = [st["num_tokens"][i] for i in rows if st["num_tokens"][i]]
    return {"name": name, "attention_gpu": layout.attention_gpu, "ffn_gpu": layout.ffn_gpu, "link": link,
            "output_tok_s": s["output_throughput"], "mean_tpot_ms": s["mean_tpot_ms"],
            "a_busy": s["attention_busy_fraction"], "f_busy": s["ffn_busy_fraction"],
            "a_us_per_tok": sum(st["afd_a_busy_s"][i] for i in rows) / tokens * 1e6,
            "f_us_per_tok": sum(st["afd_f_busy_s"][i] for i in rows) / tokens * 1e6,
            "mean_step_tokens": float(np.mean(step_tokens)) if step_tokens else 0.0,
            "mean_decode_context": mean_decode_context(result),
            "price_per_h": paper_price_per_h(layout)}


def a_side_breakdown(layout: AfdLayout, gpu: str, step_tokens: int, context: int,
                     lanes: int = DEFAULT_AFD_LANES) -> dict[str, float]:
    """One A rank's busy time per decoded token (us) in a step of ``step_tokens`` decode requests
    with ``context`` tokens each, split into ``lanes`` equal lanes, priced as simulator.afd does
    (layer ops under a CUDA graph, "kernel"; lm_head and sampler eager, "launch"): ``proj`` =
    QKV + o_proj GEMMs, ``attention`` = paged decode attention, ``other`` = norms, rotary and the
    TP all-reduce, ``head`` = embedding, final norm, lm_head and sampler (once per step)."""
    from frontier.ops import ElementwiseOp
    from simulator.batch_engine import BatchEngine, BatchShape
    from simulator.predictor_cost import make_cost_model
    from simulator.simulation import resolve_engine
    r = resolve_engine(EngineArgs(model=layout.model, gpu=gpu, tensor_parallel_size=layout.attention_tp,
                                  max_model_len=4096))
    e = BatchEngine(r.model, r.parallel, r.gpu, make_cost_model(r.gpu, "analytical", None), r.cudagraph_config())
    mdl, tp, n = r.model, layout.attention_tp, step_tokens
    m, h, ab, layers = max(1, n // lanes), mdl.hidden_size, mdl.quant.activation_bytes, mdl.num_layers
    ops = e._attn_gemms(m, mdl.num_attention_heads // tp)
    gemms = [op for op in ops if not isinstance(op, ElementwiseOp)]
    other = [op for op in ops if isinstance(op, ElementwiseOp)]
    other += [ElementwiseOp("input_norm", m, h, 4 * h * ab), ElementwiseOp("post_norm", m, h, 4 * h * ab)]
    if tp > 1:
        other.append(e._comm("all_reduce", m * h * ab, tp))
    per_tok = layers / m * 1e6                 # one lane's op per layer, seconds -> us per decoded token
    us = lambda ops: sum(e.cost_model.op_times_s(ops, "kernel")) * per_tok          # noqa: E731
    attn = e._attention_time_s(BatchShape((1,) * m, (context,) * m), "kernel") / layers * per_tok
    head = (sum(e.cost_model.op_times_s([ElementwiseOp("embedding", n, h, 2 * h * ab),
                                         ElementwiseOp("final_norm", n, h, 2 * h * ab)], "kernel"))
            + e._head_time_s(n)) / n * 1e6
    return {"proj": us(gemms), "attention": attn, "other": us(other), "head": head}


def placements(layout: AfdLayout) -> list[tuple[str, AfdLayout, str]]:
    """(name, layout, link) per run. Every placement's A-F link is the NIC (A and F pools on
    separate nodes: mixing GPU types forces it, and we assume it at the paper's scale); the
    all-H800 layout also runs on simulator.afd's default link when that is NVLink (A + F fit one node)."""
    base, cheap = C_BASE_GPU, C_CHEAP_GPU
    out = [(f"all-{base}", replace(layout, attention_gpu=base, ffn_gpu=base), "nic"),
           (f"{cheap}-FFN", replace(layout, attention_gpu=base, ffn_gpu=cheap), "nic"),
           (f"{cheap}-ATTN", replace(layout, attention_gpu=cheap, ffn_gpu=base), "nic")]
    if out[0][1].a_f_fit_one_node():
        out.insert(1, (f"all-{base}", out[0][1], "nvlink"))
    return out


def workload_verdict(rows: list[dict]) -> dict:
    """The finding on one workload from its rows (``rows[0]`` = all-H800 on the NIC link; the
    H20 rows are found by name). Adds ``throughput_vs_base`` and ``cost_efficiency`` (paper prices)
    to every row and ``gate`` (CE > ``C_GATE_CE``) to the H20 rows."""
    ref = rows[0]
    for r in rows:
        r["throughput_vs_base"] = r["output_tok_s"] / ref["output_tok_s"]
        r["cost_efficiency"] = (r["output_tok_s"] / r["price_per_h"]) / (ref["output_tok_s"] / ref["price_per_h"])
        r["gate"] = r["cost_efficiency"] > C_GATE_CE
    f_row = next(r for r in rows if r["name"] == f"{C_CHEAP_GPU}-FFN")
    a_row = next(r for r in rows if r["name"] == f"{C_CHEAP_GPU}-ATTN")
    f_compute_bound = f_row["f_us_per_tok"] > ref["f_us_per_tok"]
    f_regresses = f_compute_bound and f_row["throughput_vs_base"] < 1 - C_KEPT
    f_holds = f_regresses and f_row["f_busy"] >= C_BUSY_BOUND
    a_holds = a_row["throughput_vs_base"] >= 1 - C_KEPT
    word = {(True, True): "REPRODUCED", (True, False): "FFN SIDE ONLY", (False, True): "ATTENTION SIDE ONLY",
            (False, False): "NOT REPRODUCED"}[f_holds, a_holds]
    gate = a_row["gate"] and not f_row["gate"]
    f_ratio = f_row["f_us_per_tok"] / ref["f_us_per_tok"]
    text = (f"{word}: {C_CHEAP_GPU}-FFN F busy {f_row['f_busy']:.2f}, F {f_ratio:.2f}x the {C_BASE_GPU} s/token, "
            f"throughput {f_row['throughput_vs_base']:.2f}x, CE {f_row['cost_efficiency']:.2f}; "
            f"{C_CHEAP_GPU}-ATTN throughput {a_row['throughput_vs_base']:.2f}x, CE {a_row['cost_efficiency']:.2f}; "
            f"paper's gate (CE > {C_GATE_CE}: ATTN passes, FFN fails) {'matched' if gate else 'not matched'}")
    return {"ffn_side_holds": f_holds, "ffn_regresses": f_regresses, "attention_side_holds": a_holds,
            "holds": f_holds and a_holds,
            "gate_matches_paper": gate, "verdict": text}


def threshold_rule(entries: list[dict], key: str, flag: str, what: str, unit: str) -> str:
    """Where ``flag`` holds among one model's entries, as a threshold on ``entries[i][key]``."""
    yes = sorted(e[key] for e in entries if e[flag])
    no = sorted(e[key] for e in entries if not e[flag])
    if not no:
        return f"{what} on every workload"
    if not yes:
        return f"{what} on no workload ({unit} " + ", ".join(f"{c:.0f}" for c in no) + ")"
    if yes[0] > no[-1]:
        return f"{what} where the {unit} >= {yes[0]:.0f}, not at <= {no[-1]:.0f}"
    if yes[-1] < no[0]:
        return f"{what} where the {unit} <= {yes[-1]:.0f}, not at >= {no[0]:.0f}"
    return (f"{what}: no {unit} threshold separates the workloads (yes at " + ", ".join(f"{c:.0f}" for c in yes)
            + "; no at " + ", ".join(f"{c:.0f}" for c in no) + ")")


def overall_verdict_c(entries: list[dict]) -> str:
    """One line per model over its workloads, prefixed by REPRODUCED (every workload of every model),
    PARTLY REPRODUCED (some) or NOT REPRODUCED (none); with where, by mean decode context, the
    attention side keeps its throughput and where, by decode requests per A step, the FFN side
    regresses (compute-bound and > ``C_KEPT`` throughput lost, F busy not required)."""
    n_ok = sum(e["holds"] for e in entries)
    word = "REPRODUCED" if n_ok == len(entries) else ("PARTLY REPRODUCED" if n_ok else "NOT REPRODUCED")
    parts = []
    for model in dict.fromkeys(e["model"] for e in entries):
        mine = [e for e in entries if e["model"] == model]
        ok = [e["workload"] for e in mine if e["holds"]]
        parts.append(f"{model}: both sides on {len(ok)} of {len(mine)} workloads ({', '.join(ok) or 'none'}), "
                     f"paper's CE gate matched on {sum(e['gate_matches_paper'] for e in mine)}; "
                     + threshold_rule(mine, "mean_decode_context", "attention_side_holds", "attention side kept",
                                      "mean decode context")
                     + "; " + threshold_rule(mine, "mean_step_tokens", "ffn_regresses", "FFN side regresses",
                                             "requests per A step"))
    return f"{word}: " + " | ".join(parts)


def run_case_c(models: tuple[str, ...] = tuple(C_LAYOUTS), workloads: tuple[tuple[str, int, int], ...] = C_WORKLOADS,
               *, num_prompts: int = C_NUM_PROMPTS, layouts: dict[str, AfdLayout] | None = None) -> dict:
    """Every model x workload x placement; per workload a verdict, then the overall one."""
    layouts = layouts or C_LAYOUTS
    entries = []
    for key in models:
        layout = layouts[key]
        for wl in workloads:
            rows = []
            for name, lay, link in placements(layout):
                bw = nic_bw(lay) if link == "nic" else None
                rows.append(afd_row(name, lay, run_simulation(afd_spec(lay, wl, num_prompts=num_prompts,
                                                                       link_bw=bw)), link))
            ctx, step = rows[0]["mean_decode_context"], max(1, round(rows[0]["mean_step_tokens"]))
            entry = {"model": layout.model, "layout": key, "gpus": layout.gpus, "workload": wl[0],
                     "mean_decode_context": ctx, "rows": rows, **workload_verdict(rows),
                     "mean_step_tokens": rows[0]["mean_step_tokens"],
                     "a_breakdown_us": {g: a_side_breakdown(layout, g, step, round(ctx))
                                        for g in (C_BASE_GPU, C_CHEAP_GPU)}, "breakdown_step_tokens": step}
            entries.append(entry)
    return {"case": "c", "entries": entries, "holds": all(e["holds"] for e in entries),
            "verdict": overall_verdict_c(entries)}


def print_case_c(out: dict) -> None:
    print("(c) AFD with H20 on one side; A-F link 'nic' = network (every placement), 'nvlink' = all-H800 in one node. "
          f"vs base and CE against all-H800 on the NIC; CE at the paper's prices; gate = CE > {C_GATE_CE}")
    head = (f"{'workload':<10} {'ctx':>5} {'placement':<10} {'link':<6} {'A busy':>6} {'F busy':>6} {'A us/tok':>8} "
            f"{'F us/tok':>8} {'tok/s':>8} {'vs base':>7} {'CE':>5} {'gate':>5} {'TPOT ms':>7}")
    model = None
    for e in out["entries"]:
        if e["model"] != model:
            model = e["model"]
            p, a, f = e["gpus"]
            print(f"\n{model}, P:A:F = {p}:{a}:{f} GPUs")
            print(head)
        for r in e["rows"]:
            gate = ("pass" if r["gate"] else "fail") if C_CHEAP_GPU in r["name"] else ""
            print(f"{e['workload']:<10} {e['mean_decode_context']:>5.0f} {r['name']:<10} {r['link']:<6} "
                  f"{r['a_busy']:>6.2f} {r['f_busy']:>6.2f} {r['a_us_per_tok']:>8.2f} {r['f_us_per_tok']:>8.2f} "
                  f"{r['output_tok_s']:>8.0f} {r['throughput_vs_base']:>7.2f} {r['cost_efficiency']:>5.2f} "
                  f"{gate:>5} {r['mean_tpot_ms']:>7.1f}")
        bd = e["a_breakdown_us"]
        print(f"  A us per token, a step of {e['breakdown_step_tokens']} requests at context "
              f"{e['mean_decode_context']:.0f}: "
              + "; ".join(f"{g} proj {b['proj']:.1f} + attention {b['attention']:.1f} + other {b['other']:.1f} + "
                          f"head {b['head']:.1f} = {sum(b.values()):.1f}" for g, b in bd.items()))
        print(f"  {e['verdict']}")
    print(out["verdict"])


# ================================================================================ main
CASES = {"a": (run_case_a, print_case_a), "b": (run_case_b, print_case_b), "c": (run_case_c, print_case_c)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=("a", "b", "c", "all"), default="all")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    parser.add_argument("--total-gpus", type=int, default=A_TOTAL_GPUS, help="case a: GPUs split between P and D")
    parser.add_argument("--paper-scale", action="store_true",
                        help="case a at the paper's scale: 256 H800, Llama-3.3-70B TP8, TTFT <= 500 / 3000 ms (A_PAPER)")
    parser.add_argument("--c-models", default=",".join(C_LAYOUTS), help="case c: comma-separated keys of C_LAYOUTS")
    args = parser.parse_args()
    if args.total_gpus < 2:
        parser.error(f"--total-gpus {args.total_gpus} must be >= 2 (one prefill and one decode GPU)")
    c_models = tuple(args.c_models.split(","))
    bad = [m for m in c_models if m not in C_LAYOUTS]
    if bad:
        parser.error(f"--c-models {args.c_models!r}: {', '.join(bad)} unknown; valid: {', '.join(C_LAYOUTS)}")
    results = {}
    for key in ("a", "b", "c") if args.case == "all" else (args.case,):
        run, show = CASES[key]
        cpu0 = time.process_time()
        if key == "a" and args.paper_scale:
            out = run(**A_PAPER)
        else:
            out = run(total=args.total_gpus) if key == "a" else (run(c_models) if key == "c" else run())
        out["cpu_s"] = time.process_time() - cpu0
        results[key] = out
        if not args.json:
            show(out)
            print(f"[{key}: {out['cpu_s']:.0f} s CPU]\n", flush=True)
    if args.json:
        print(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
