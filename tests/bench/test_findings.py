"""bench/findings.py: padding and SLA arithmetic on hand-checked cases, and each finding's
direction on a tiny deployment."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from simulator.cuda_graph import CudaGraphConfig
from simulator.simulation import run_simulation

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("findings", ROOT / "bench" / "findings.py")
assert _spec and _spec.loader
findings = importlib.util.module_from_spec(_spec)
sys.modules["findings"] = findings  # dataclasses look their module up
_spec.loader.exec_module(findings)


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


def test_case_b_tiny_pdd_pads_decode_more_than_colocated():
    out = findings.run_case_b(workloads=((2048, 64),), num_prompts=16)
    colocated, pdd = out["rows"]
    assert (colocated["architecture"], pdd["architecture"]) == ("colocated", "pdd")
    assert colocated["useful"] > 0 and pdd["useful"] > 0
    assert pdd["inflation"] > colocated["inflation"]
    assert out["holds"]
    # 16 requests: every decode batch sits on a size both lists share (1, 2, 4, 8, 16)
    assert [(r["useful_pow2"], r["padding_pow2"]) for r in out["rows"]] == [
        (r["useful"], r["padding"]) for r in out["rows"]]


def test_case_c_tiny_h20_ffn_is_compute_bound_and_loses_throughput():
    out = findings.run_case_c(num_prompts=2048, isl=32, osl=32)    # up to 512 running per A engine
    base, h20_ffn, h20_attn = out["rows"]
    assert (h20_ffn["ffn_gpu"], h20_attn["attention_gpu"]) == ("H20", "H20")
    assert h20_ffn["f_us_per_tok"] > base["f_us_per_tok"]          # more HBM bandwidth, yet slower
    assert h20_ffn["f_busy"] > findings.C_BUSY_BOUND and h20_ffn["f_busy"] > h20_ffn["a_busy"]
    assert h20_ffn["throughput_vs_base"] < 1.0 - findings.C_KEPT
    assert h20_attn["throughput_vs_base"] > h20_ffn["throughput_vs_base"]     # A is the better side to downgrade
    assert out["ffn_side_holds"]


@pytest.mark.parametrize("bad", [0, 8])
def test_pdd_split_spec_refuses_splits_without_both_roles(bad):
    with pytest.raises(ValueError, match=f"prefill_gpus {bad} must be in 1..7"):
        findings.pdd_split_spec(bad, 10.0, total=8)
