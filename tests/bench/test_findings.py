"""bench/findings.py: padding and SLA arithmetic on hand-checked cases, and each finding's
direction on a tiny deployment."""

from __future__ import annotations

import pytest

from simulator.cuda_graph import CudaGraphConfig
from simulator.simulation import run_simulation
from tests.bench.bench_scripts import load_bench

findings = load_bench("findings")


def _steps(*rows: tuple[str, int, int, int]) -> dict[str, list]:
    """Step-table columns from (role, num_reqs, num_tokens, padded_tokens) rows."""
    return {"role": [r[0] for r in rows], "num_reqs": [r[1] for r in rows],
            "num_tokens": [r[2] for r in rows], "padded_tokens": [r[3] for r in rows]}


def test_decode_padding_counts_pure_decode_steps_of_the_role():
    steps = _steps(("D", 33, 33, 64),         # pure decode: counted
                   ("D", 33, 500, 512),       # a prefill chunk inside: not a decode step
                   ("C", 33, 33, 40),         # other role
                   ("D", 0, 0, 0),            # empty step
                   ("D", 65, 65, 65))         # above the largest capture size: eager, unpadded
    assert findings.decode_padding(steps, "D") == (98, 31)
    assert findings.decode_padding(steps, "C") == (33, 7)


def test_paper_bins_are_simulated_33_decode_requests_pad_to_64():
    # vLLM 0.33 defaults at max_num_seqs 64: 1, 2, 4, 8, 16, 24, ..., 128 -> 33 pads to 40
    assert CudaGraphConfig.from_vllm(64, 8192).dispatch(33, 33, True) == ("FULL", 40)
    paper = CudaGraphConfig.from_vllm(1024, 8192, cudagraph_capture_sizes=findings.PAPER_CAPTURE_BINS)
    assert paper.dispatch(33, 33, True) == ("FULL", 64)
    spec = findings.padding_spec("colocated", 256, 16, num_prompts=40, capture_sizes=findings.PAPER_CAPTURE_BINS)
    st = run_simulation(spec).trace.step_cols
    decode = [(n, p) for n, r, p in zip(st["num_tokens"], st["num_reqs"], st["padded_tokens"]) if 0 < n == r]
    assert (40, 64) in decode                                   # the 40-request batch ran at the 64 graph
    assert all(p == min(b for b in findings.PAPER_CAPTURE_BINS if b >= n) for n, p in decode)


def test_max_rate_under_sla_interpolates_the_first_crossing():
    pts = [(10.0, 50.0, 5.0), (20.0, 100.0, 6.0), (30.0, 300.0, 7.0), (40.0, 100.0, 6.0)]
    assert findings.max_rate_under_sla(pts, 200.0, 10.0) == 25.0          # TTFT: 20 + 10 x 100/200
    assert findings.max_rate_under_sla(pts, 1000.0, 5.5) == 15.0          # TPOT: 10 + 10 x 0.5/1
    assert findings.max_rate_under_sla(pts, 200.0, 6.5) == 25.0           # both fail at 30: the lower
    assert findings.max_rate_under_sla(pts, 40.0, 10.0) == 0.0            # the lowest rate fails
    assert findings.max_rate_under_sla(pts, 1000.0, 10.0) == 40.0         # none fails: the last rate


def test_case_a_tiny_tight_ttft_moves_gpus_to_prefill():
    out = findings.run_case_a(total=4, arrival_s=3.0)      # 3 splits x <= 10 rates, 3 s of arrivals each
    assert out["holds"], out["verdict"]
    assert out["best_prefill_gpus"][0] > out["best_prefill_gpus"][-1]
    one_p = out["splits"][0]["goodput"]                    # P:D = 1:3 loses most when TTFT tightens
    assert one_p[0] < one_p[-1]


def test_case_a_engines_of_several_gpus_and_absolute_limits():
    """--paper-scale's knobs: splits in engines of tp GPUs, absolute TTFT/TPOT limits."""
    out = findings.run_case_a(total=3, tp=2, splits=(1, 2), rates=(10.0, 20.0), arrival_s=2.0,
                              ttft_slas_ms=(1e6,), tpot_sla_ms=1e6)
    assert out["total_gpus"] == 6 and out["gpus_per_engine"] == 2
    assert [(r["prefill_gpus"], r["decode_gpus"]) for r in out["splits"]] == [(2, 4), (4, 2)]
    assert out["ttft_slas_ms"] == [1e6] and out["tpot_sla_ms"] == 1e6
    assert [r["goodput"] for r in out["splits"]] == [[20.0], [20.0]]      # nothing fails: the last rate
    assert out["verdict"].startswith("INCONCLUSIVE")


def test_case_b_tiny_pdd_pads_decode_more_than_colocated():
    out = findings.run_case_b(workloads=((2048, 64),), rates=(float("inf"),), num_prompts=16)
    colocated, pdd = out["rows"]
    assert (colocated["architecture"], pdd["architecture"]) == ("colocated", "pdd")
    assert colocated["rate"] == pdd["rate"] == float("inf")
    assert colocated["useful"] > 0 and pdd["useful"] > 0
    assert pdd["inflation"] > colocated["inflation"]
    assert out["holds"] and out["holds_at"] == [float("inf")]
    assert out["verdict"] == "REPRODUCED: PDD pads decode more than co-located on every workload at inf req/s"
    # 16 requests: every decode batch sits on a size both lists share (1, 2, 4, 8, 16)
    assert [(r["useful_pow2"], r["padding_pow2"]) for r in out["rows"]] == [
        (r["useful"], r["padding"]) for r in out["rows"]]


def test_case_b_verdict_names_the_rates_where_it_holds():
    out = findings.run_case_b(workloads=((2048, 64),), rates=(float("inf"), 0.5), num_prompts=16)
    assert [r["rate"] for r in out["rows"]] == [float("inf")] * 2 + [0.5] * 2
    assert [r["holds"] for r in out["per_rate"]] == [True, False]     # at 0.5 req/s both run 1-2 requests
    assert out["verdict"] == ("PARTLY REPRODUCED: PDD pads decode more than co-located on every workload at "
                              "inf req/s, not at 0.5 req/s")


def _c_row(name: str, tok_s: float, price: float, f_busy: float = 0.5, f_us: float = 10.0) -> dict:
    return {"name": name, "output_tok_s": tok_s, "price_per_h": price, "f_busy": f_busy, "f_us_per_tok": f_us}


ALL_H800, MIXED = 12 * 3.49, 8 * 3.49 + 4 * 1.59          # $/h of 4:4:4 GPUs at the paper's prices


def test_paper_prices_and_placements():
    small, big = findings.C_LAYOUTS["30b"], findings.C_LAYOUTS["235b"]
    assert findings.paper_price_per_h(small) == pytest.approx(ALL_H800)
    assert findings.paper_price_per_h(findings.replace(small, attention_gpu="H20")) == pytest.approx(MIXED)
    assert big.gpus == (8, 8, 8)
    # 30B: A TP1 + F EP4 fit one 8-GPU node, so all-H800 also runs on NVLink; 235B: TP4 + EP8 do not
    assert [(n, lay.attention_gpu, lay.ffn_gpu, link) for n, lay, link in findings.placements(small)] == [
        ("all-H800", "H800", "H800", "nic"), ("all-H800", "H800", "H800", "nvlink"),
        ("H20-FFN", "H800", "H20", "nic"), ("H20-ATTN", "H20", "H800", "nic")]
    assert [link for _, _, link in findings.placements(big)] == ["nic"] * 3
    assert findings.nic_bw(findings.replace(small, ffn_gpu="H20")) == 50e9


def test_workload_verdict_ratios_gate_and_sides():
    rows = [_c_row("all-H800", 1000.0, ALL_H800, f_busy=0.8, f_us=10.0),
            _c_row("H20-FFN", 850.0, MIXED, f_busy=0.95, f_us=15.0),     # compute-bound, loses 15 %
            _c_row("H20-ATTN", 920.0, MIXED)]                              # keeps 92 %
    out = findings.workload_verdict(rows)
    assert [r["throughput_vs_base"] for r in rows] == pytest.approx([1.0, 0.85, 0.92])
    assert rows[2]["cost_efficiency"] == pytest.approx(0.92 * ALL_H800 / MIXED)      # 1.124
    assert [r["gate"] for r in rows] == [False, False, True]                          # CE 1.0, 1.038, 1.124
    assert out["holds"] and out["ffn_side_holds"] and out["attention_side_holds"] and out["gate_matches_paper"]
    assert out["verdict"].startswith("REPRODUCED")
    rows[2]["output_tok_s"] = 890.0                                                   # 0.89x: not kept
    out = findings.workload_verdict(rows)
    assert (out["holds"], out["ffn_side_holds"], out["attention_side_holds"]) == (False, True, False)
    assert out["verdict"].startswith("FFN SIDE ONLY")
    rows[1]["f_us_per_tok"] = 9.0                                                     # F faster on H20
    assert findings.workload_verdict(rows)["verdict"].startswith("NOT REPRODUCED")


def test_threshold_rule_and_overall_verdict():
    def entry(wl, ctx, a, f=True, model="m", step=100.0):
        return {"model": model, "workload": wl, "mean_decode_context": ctx, "attention_side_holds": a,
                "ffn_side_holds": f, "ffn_regresses": f, "holds": a and f, "gate_matches_paper": a,
                "mean_step_tokens": step}
    rule = lambda es: findings.threshold_rule(es, "mean_decode_context", "attention_side_holds", "kept", "ctx")  # noqa
    split = [entry("x", 400.0, False), entry("y", 1500.0, True), entry("z", 900.0, False)]
    assert rule(split) == "kept where the ctx >= 1500, not at <= 900"
    assert rule([entry("x", 400.0, True), entry("y", 900.0, False)]) == "kept where the ctx <= 400, not at >= 900"
    assert rule([entry("x", 400.0, True), entry("y", 900.0, False), entry("z", 1000.0, True)]) == (
        "kept: no ctx threshold separates the workloads (yes at 400, 1000; no at 900)")
    assert rule([entry("x", 1.0, True)]) == "kept on every workload"
    assert rule([entry("x", 7.0, False)]) == "kept on no workload (ctx 7)"
    assert findings.overall_verdict_c(split).startswith(
        "PARTLY REPRODUCED: m: both sides on 1 of 3 workloads (y), paper's CE gate matched on 1; attention side kept "
        "where the mean decode context >= 1500, not at <= 900; FFN side regresses on every workload")
    assert findings.overall_verdict_c([entry("y", 1.0, True)]).startswith("REPRODUCED")
    assert findings.overall_verdict_c([entry("y", 1.0, False)]).startswith("NOT REPRODUCED")


def test_mean_decode_context_counts_decode_steps():
    class Rec:
        def __init__(self, prompt_len, output_len):
            self.prompt_len, self.output_len = prompt_len, output_len

    class Res:
        records = [Rec(10, 3), Rec(5, 1), Rec(20, 2)]          # steps see 11, 12 | none | 21
    assert findings.mean_decode_context(Res()) == pytest.approx((11 + 12 + 21) / 3)


def test_a_side_breakdown_projections_are_compute_bound_on_h20():
    layout = findings.C_LAYOUTS["30b"]          # Qwen3-30B-A3B: 48 layers, hidden 2048, 32 q / 4 kv heads of 128
    h800 = findings.a_side_breakdown(layout, "H800", 512, 813)        # two lanes of 256
    h20 = findings.a_side_breakdown(layout, "H20", 512, 813)
    flops = 2 * 256 * (5120 * 2048 + 2048 * 4096)      # QKV + o_proj over a lane's 256 tokens
    lane_s = 2 * 2.5e-6 + flops / (148e12 * 0.75)        # two GEMMs at 75 % of peak, 2.5 us fixed each
    assert h20["proj"] == pytest.approx(lane_s * 48 / 256 * 1e6)        # us per decoded token
    assert h20["proj"] > 4 * h800["proj"]
    assert h20["attention"] < h800["attention"]         # KV reads: 4.0 vs 3.35 TB/s


def test_case_c_tiny_table_and_h20_ffn_direction(capsys):
    out = findings.run_case_c(("30b",), (("32/32", 32, 32),), num_prompts=2048)    # up to 512 running per A rank
    findings.print_case_c(out)
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == out["verdict"] and sum(line.startswith("32/32 ") for line in printed) == 4
    (e,) = out["entries"]
    assert (e["workload"], e["gpus"], set(e["a_breakdown_us"])) == ("32/32", (4, 4, 4), {"H800", "H20"})
    assert set(e["a_breakdown_us"]["H20"]) == {"proj", "attention", "other", "head"}
    assert [(r["name"], r["link"]) for r in e["rows"]] == [
        ("all-H800", "nic"), ("all-H800", "nvlink"), ("H20-FFN", "nic"), ("H20-ATTN", "nic")]
    base, nvlink, h20_ffn, h20_attn = e["rows"]
    assert base["throughput_vs_base"] == 1.0 and base["cost_efficiency"] == 1.0
    assert nvlink["output_tok_s"] > base["output_tok_s"]          # the faster A-F link
    assert h20_ffn["f_us_per_tok"] > base["f_us_per_tok"]         # more HBM bandwidth, yet slower
    assert h20_ffn["f_busy"] > findings.C_BUSY_BOUND and h20_ffn["f_busy"] > h20_ffn["a_busy"]
    assert h20_ffn["throughput_vs_base"] < 1.0 - findings.C_KEPT
    assert h20_attn["throughput_vs_base"] > h20_ffn["throughput_vs_base"]     # A is the better side to downgrade
    assert e["ffn_side_holds"] and e["ffn_regresses"]
    assert 32 < e["mean_decode_context"] < 32 + 48          # prompts 16..48, 15..47 decode steps
    assert out["verdict"].split(":")[0] in ("REPRODUCED", "NOT REPRODUCED")   # one workload: all or none


@pytest.mark.parametrize("bad", [0, 8])
def test_pdd_split_spec_refuses_splits_without_both_roles(bad):
    with pytest.raises(ValueError, match=f"prefill_gpus {bad} must be in 1..7"):
        findings.pdd_split_spec(bad, 10.0, total=8)
