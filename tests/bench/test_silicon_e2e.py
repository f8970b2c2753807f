"""bench/silicon_e2e.py: the silicon_sample.csv row -> deployment mapping, skips, and a 2-row run."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from tests.bench.bench_scripts import load_bench

e2e = load_bench("silicon_e2e")

needs_data = pytest.mark.skipif(not e2e.SILICON_CSV.is_file(), reason=f"{e2e.SILICON_CSV} not present")


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in e2e.load_rows()}


def _row(**over: str) -> dict[str, str]:
    base = {"id": "synthetic", "backend": "vllm", "mode": "agg", "model_path": "Qwen/Qwen3-235B-A22B-FP8",
            "system": "h200_sxm", "precision": "fp8", "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8",
            "isl": "1024", "osl": "128", "batch_size": "8", "tp_size": "4.0", "pp_size": "1.0",
            "attention_dp_size": "", "moe_tp_size": "4.0", "moe_ep_size": "1.0",
            "silicon_ttft_ms": "100.0", "silicon_tpot_ms": "10.0"}
    base.update(over)
    return base


@needs_data
def test_disaggregated_rows_map_to_two_roles() -> None:
    """The data's 17 vLLM disagg rows (GB200 Kimi-K2.5 from InferenceMAX's database, H100 Qwen3 from
    AIC's Dynamo campaign) run as --architecture pdd: each role's workers, TP x attention DP, EP
    where the row says so (or where vLLM cannot split the experts), AIC's launch limits on aic rows."""
    rows = e2e.load_rows(systems=("gb200", "h100_sxm"), modes=("disagg",))
    assert len(rows) == 17 and all(r["mode"] == "disagg" for r in rows)
    deps, skips = e2e.plan(rows, None, None)
    assert skips == [] and len(deps) == 17 and {d.mode for d in deps} == {"disagg"}
    kimi = {d.row_id: d for d in deps if d.system == "gb200"}
    big = kimi["kimik2_5_gb200_vllm_fp4_disagg_1024x1024_c256_cfg697"]
    assert (big.model, big.harness, big.concurrency, big.enable_expert_parallel, big.vllm_version) == (
        "nvidia/Kimi-K2.5-NVFP4", "inferencemax", 256, True, "0.18.0")
    assert big.prefill == e2e.RolePlan(tp=4, dp=1, replicas=1, batch_size=1)          # vLLM's limits
    assert big.decode == e2e.RolePlan(tp=16, dp=1, replicas=1, batch_size=256)
    assert kimi["kimik2_5_gb200_vllm_fp4_disagg_1024x1024_c8_cfg698"].decode == e2e.RolePlan(4, 1, 4, 2)
    qwen = [d for d in deps if d.system == "h100_sxm"]
    dense = next(d for d in qwen if d.model == "Qwen/Qwen3-32B")
    assert (dense.harness, dense.concurrency, dense.bench_prompts, dense.max_model_len) == ("aic", 448, 8960, 6500)
    assert dense.prefill == e2e.RolePlan(1, 1, 8, 1, max_num_seqs=1, max_num_batched_tokens=5500)
    assert dense.decode == e2e.RolePlan(4, 1, 2, 224, max_num_seqs=224, max_num_batched_tokens=224)
    moe = sorted((d for d in qwen if d.model != "Qwen/Qwen3-32B"), key=lambda d: d.concurrency)
    assert [(d.concurrency, d.enable_expert_parallel, d.ep_inferred) for d in moe] == [(56, True, True), (72, False, False)]
    assert moe[0].decode == e2e.RolePlan(1, 8, 1, 7, max_num_seqs=7, max_num_batched_tokens=7)
    pdd = e2e._pdd(dense)
    assert (pdd.prefill.replicas, pdd.prefill.max_num_seqs, pdd.decode.tp, pdd.decode.max_num_batched_tokens) == (8, 1, 4, 224)
    assert e2e._pdd(e2e.map_row(_row())) is None
    # a disagg row is its own deployment for the data's repeatability: same numbers, same key
    keys = {e2e.deployment_key(r) for r in rows}
    assert len(keys) == 17 and all(k[0] == "disagg" for k in keys)


@needs_data
def test_a_disaggregated_row_simulates_both_roles() -> None:
    row = next(r for r in e2e.load_rows(systems=("gb200",), modes=("disagg",))
               if r["id"] == "kimik2_5_gb200_vllm_fp4_disagg_1024x1024_c4_cfg698")
    dep = replace(e2e.map_row(row), num_prompts=12)
    assert e2e.check_deployment(dep) is None
    got = e2e.simulate_row(dep, 0.0)           # roofline costs
    assert got["completed"] == 12 and got["failed"] == 0 and got["ttft_ms"] > 0 and got["tpot_ms"] > 0


@needs_data
def test_selection_counts(rows: dict[str, dict[str, str]]) -> None:
    systems = [r["system"] for r in rows.values()]   # vLLM agg rows of every mapped system
    assert {s: systems.count(s) for s in set(systems)} == {"h100_sxm": 237, "h200_sxm": 336, "b200_sxm": 623,
                                                          "b300_sxm": 132}
    assert len(e2e.load_rows(systems=("h100_sxm", "h200_sxm"))) == 573   # the H100 / H200 rows


@needs_data
@pytest.mark.parametrize("row_id, expect", [
    ("2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c16_tp4_ep1_260",
     dict(model="nvidia/Llama-3.3-70B-Instruct-FP8", gpu="H100", tp=4, pp=1, dp=1, enable_expert_parallel=False,
          isl=1024, osl=1024, batch_size=16, concurrency=16, num_prompts=146, quant_method="fp8",
          harness="inferencemax", quantization=None, kv_cache_dtype="bfloat16")),
    ("2026_04_06_llama_3_1_70b_h200_sxm_vllm_fp8_agg_1024x8192_c16_tp8_ep1_270",    # H200: the checkpoint's FP8 KV
     dict(model="nvidia/Llama-3.3-70B-Instruct-FP8", gpu="H200", tp=8, quant_method="fp8", kv_cache_dtype="auto")),
    ("minimaxm2_5_h200_vllm_fp8_agg_8192x1024_c8_cfg637",   # moe_tp 8 stated; vLLM refuses it (192-wide shards)
     dict(model="MiniMaxAI/MiniMax-M2.5", gpu="H200", tp=8, dp=1, enable_expert_parallel=True, ep_inferred=True)),
    ("minimaxm2_5_h200_vllm_fp8_agg_8192x1024_c8_cfg606",   # moe_tp 4: 384-wide shards, as stated
     dict(model="MiniMaxAI/MiniMax-M2.5", gpu="H200", tp=4, dp=1, enable_expert_parallel=False, ep_inferred=False)),
    ("qwen3_32b_qwen3_32b_h100_sxm_vllm_agg_4000x1000_c_tp2_0_epnone_3",           # fp8 row: --quantization fp8
     dict(model="Qwen/Qwen3-32B", gpu="H100", tp=2, quant_method="fp8", quantization="fp8", kv_cache_dtype="auto")),
    ("2026_03_25_gpt_oss_120b_h100_sxm_vllm_fp4_agg_1024x1024_c64_tp4_0_ep1_0_185",
     dict(model="openai/gpt-oss-120b", gpu="H100", tp=4, dp=1, enable_expert_parallel=False,
          concurrency=64, num_prompts=146, quant_method="mxfp4")),
    ("2026_03_25_kimi_k2_5_h200_sxm_vllm_int4_agg_8192x1024_c4_tp8_0_ep1_0_597",
     dict(model="moonshotai/Kimi-K2.5", gpu="H200", tp=8, dp=1, enable_expert_parallel=False,
          isl=8192, osl=1024, concurrency=4, num_prompts=100, quant_method="int4_wo")),
    ("qwen_qwen3_235b_a22b_fp8_qwen_qwen3_235b_a22b_fp8_h200_sxm_vllm_agg_2000x500_c16_tp2_epnone_16",
     dict(model="Qwen/Qwen3-235B-A22B-FP8", gpu="H200", tp=2, dp=1, enable_expert_parallel=True,
          concurrency=16, num_prompts=300, quant_method="fp8_block", harness="aic", max_num_seqs=16,
          max_num_batched_tokens=16 + 2000 + 1500, max_model_len=2000 + 500 + 1500,
          cudagraph_capture_sizes=tuple(range(1, 17)), bench_prompts=320)),
    ("minimaxm2_5_b200_vllm_fp4_agg_8192x1024_c32_cfg701",   # fp4 on Blackwell: NVIDIA's NVFP4 checkpoint
     dict(model="nvidia/MiniMax-M2.5-NVFP4", gpu="B200", tp=1, quant_method="nvfp4", harness="inferencemax")),
    ("minimaxm2_5_b300_vllm_fp8_agg_8192x1024_c128_cfg733",   # fp8 on Blackwell: FP8 KV cache (queueing)
     dict(model="MiniMaxAI/MiniMax-M2.5", gpu="B300", tp=4, quant_method="fp8_block", kv_cache_dtype="fp8")),
    ("kimik2_5_b300_vllm_fp4_agg_8192x1024_c4_cfg813",
     dict(model="nvidia/Kimi-K2.5-NVFP4", gpu="B300", tp=4, quant_method="nvfp4")),
    ("2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp4_agg_1024x1024_c64_tp8_ep1_262",
     dict(model="nvidia/Llama-3.3-70B-Instruct-FP4", gpu="B200", tp=8, quant_method="nvfp4", kv_cache_dtype="auto")),
    ("2026_04_06_llama_3_1_70b_b200_sxm_vllm_fp8_agg_1024x1024_c8_tp4_ep1_259",
     dict(model="nvidia/Llama-3.3-70B-Instruct-FP8", gpu="B200", tp=4, quant_method="fp8", kv_cache_dtype="auto")),
    ("2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_8192x1024_c4_tp4_ep4_1323",   # CSV: tp 4, adp 4, moe_ep 16
     dict(model="MiniMaxAI/MiniMax-M2.5", gpu="H100", tp=4, dp=1, enable_expert_parallel=True, dp_in_tp=False,
          dp_label_only=True, batch_size=4, concurrency=4, harness="inferencemax")),   # what it measured: tp4 ep4
    ("minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c64_cfg690",                          # CSV: tp 2, adp 2, moe_ep 4
     dict(model="MiniMaxAI/MiniMax-M2.5", gpu="B200", tp=2, dp=1, enable_expert_parallel=True, dp_label_only=True,
          batch_size=64, concurrency=64)),
    ("minimaxm2_5_b300_vllm_fp4_agg_1024x1024_c2048_cfg727",                        # CSV: tp 2, adp 2, moe_ep 4
     dict(model="nvidia/MiniMax-M2.5-NVFP4", gpu="B300", tp=1, dp=2, enable_expert_parallel=True, dp_in_tp=True,
          dp_label_only=False, batch_size=1024, concurrency=2048)),     # no twin on the B300: DP 2 over its 2 GPUs
    ("qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1",  # no precision: bf16 checkpoint
     dict(model="Qwen/Qwen3-32B", gpu="H100", tp=2, concurrency=8, num_prompts=160, quant_method="none",
          max_num_batched_tokens=8 + 1024 + 1500)),
])
def test_known_rows_map_exactly(rows: dict[str, dict[str, str]], row_id: str, expect: dict) -> None:
    dep = e2e.map_row(rows[row_id])
    assert isinstance(dep, e2e.Deployment), dep
    for key, value in expect.items():
        assert getattr(dep, key) == value, (key, getattr(dep, key), value)
    assert dep.ttft_meas_ms == float(rows[row_id]["silicon_ttft_ms"])
    assert e2e.check_deployment(dep) is None


@needs_data
def test_aic_rows_run_as_aics_benchmark_or_with_vllm_defaults(rows: dict[str, dict[str, str]]) -> None:
    row = rows["qwen_qwen3_32b_qwen_qwen3_32b_h100_sxm_vllm_agg_1024x128_c8_tp2_epnone_1"]
    bench = e2e.map_row(row)
    assert isinstance(bench, e2e.Deployment) and bench.harness == "aic"
    args = e2e._engine_args(bench)      # AIC's benchmark rule: bs, bs + isl + 1500, isl + osl + 1500, 1..bs
    assert (args.max_num_seqs, args.max_num_batched_tokens, args.max_model_len) == (8, 2532, 2652)
    assert args.cudagraph_capture_sizes == (1, 2, 3, 4, 5, 6, 7, 8) and bench.bench_prompts == 160
    plain = e2e.map_row(row, "vllm-defaults")
    assert isinstance(plain, e2e.Deployment) and plain.num_prompts == 100 and plain.bench_prompts is None
    args = e2e._engine_args(plain)
    assert (args.max_num_seqs, args.max_num_batched_tokens, args.max_model_len, args.cudagraph_capture_sizes) == \
        (None, None, 8192, None)
    imax = e2e.map_row(rows["2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c16_tp4_ep1_260"])
    assert isinstance(imax, e2e.Deployment) and imax.max_num_batched_tokens is None and imax.bench_prompts is None
    with pytest.raises(ValueError, match="aic_runs='x'; valid: benchmark, vllm-defaults"):
        e2e.map_row(row, "x")


@needs_data
def test_attention_dp_concurrency_is_per_worker(rows: dict[str, dict[str, str]]) -> None:
    # MiniMax tp4 x adp4: batch_size 8 per worker, silicon_concurrency=32 in the source column.
    r = rows["2026_04_06_minimax_m2_5_h100_sxm_vllm_fp8_agg_8192x1024_c32_tp4_ep4_1322"]
    assert "silicon_concurrency=32" in r["silicon_data_source"] and float(r["batch_size"]) == 8
    m = e2e.map_row(r)
    assert isinstance(m, e2e.Deployment)
    # the H100 attention-DP rows measured the tp4 ep4 deployment (its label, tp4_ep4): one engine, c32
    assert (m.tp, m.dp, m.enable_expert_parallel, m.batch_size, m.concurrency, m.dp_in_tp, m.dp_label_only) == \
        (4, 1, True, 32, 32, False, True)
    # on the B300 (no twin rows) InferenceMAX's attention DP splits the label's 4 GPUs into 4 DP ranks of TP 1
    b300 = e2e.map_row(dict(r, system="b300_sxm"))
    assert isinstance(b300, e2e.Deployment)
    assert (b300.tp, b300.dp, b300.batch_size, b300.concurrency, b300.dp_in_tp, b300.dp_label_only) == \
        (1, 4, 8, 32, True, False)
    # A row of no known harness keeps the CSV's layout, tp x adp GPUs; concurrency = batch_size * attention_dp.
    dep = e2e.map_row(_row(tp_size="4", attention_dp_size="4", moe_tp_size="1", moe_ep_size="16", batch_size="8"))
    assert isinstance(dep, e2e.Deployment) and dep.harness == "aic"
    assert (dep.tp, dep.dp, dep.enable_expert_parallel, dep.concurrency, dep.dp_in_tp, dep.dp_label_only) == \
        (4, 4, True, 32, False, False)
    bad = e2e.map_row(dict(r, system="b300_sxm", tp_size="2", attention_dp_size="4"))
    assert isinstance(bad, e2e.Skip) and bad.reason == "attention DP does not divide tp_size"


def _dp_twins(rows: dict[str, dict[str, str]], system: str, model: str) -> list[tuple[int, int, int, float, float]]:
    """(isl, osl, concurrency, TTFT ratio, TPOT ratio) of each InferenceMAX attention-DP row of ``system`` /
    ``model`` over the mean of the non-DP expert-parallel rows on the same tp_size GPUs at the same point."""
    twins: dict[tuple, list[dict[str, str]]] = {}
    dp_rows = []
    for r in rows.values():
        if r["system"] != system or r["model_path"] != model or e2e.harness_of(r) != "inferencemax":
            continue
        tp, dp, ep = e2e._int(r["tp_size"]), e2e._int(r["attention_dp_size"], 1), e2e._int(r["moe_ep_size"], 1)
        point = (r["precision"], tp, e2e._int(r["isl"]), e2e._int(r["osl"]), e2e._int(r["batch_size"]) * dp)
        if dp > 1:
            dp_rows.append((point, r))
        elif ep == tp:
            twins.setdefault(point, []).append(r)
    out = []
    for point, r in dp_rows:
        twin = twins.get(point)
        if twin:
            ttft = sum(float(t["silicon_ttft_ms"]) for t in twin) / len(twin)
            tpot = sum(float(t["silicon_tpot_ms"]) for t in twin) / len(twin)
            out.append((*point[2:], float(r["silicon_ttft_ms"]) / ttft, float(r["silicon_tpot_ms"]) / tpot))
    return sorted(out)


@needs_data
def test_attention_dp_rows_are_measurements_of_the_tp_ep_deployment(rows: dict[str, dict[str, str]]) -> None:
    # The evidence behind dp_label_only (module doc): the attention-DP rows that have a non-DP expert-parallel
    # twin on the same tp_size GPUs (same precision, lengths and concurrency) agree with it within the data's
    # run-to-run noise, the H100's KV-bound queueing included, which attention DP (25 % fewer KV tokens there)
    # could not give.
    groups = sorted({(r["system"], r["model_path"]) for r in rows.values() if e2e._int(r["attention_dp_size"], 1) > 1})
    pairs = {g: sorted(set(_dp_twins(rows, *g))) for g in groups}
    close = {g: [p for p in ps if abs(p[3] - 1) < 0.13 and abs(p[4] - 1) < 0.015] for g, ps in pairs.items()}
    assert {g: (len(pairs[g]), len(close[g])) for g in groups} == {
        ("b200_sxm", "MiniMaxAI/MiniMax-M2.5"): (10, 10), ("b200_sxm", "moonshotai/Kimi-K2.5"): (15, 5),
        ("b300_sxm", "MiniMaxAI/MiniMax-M2.5"): (0, 0), ("h100_sxm", "MiniMaxAI/MiniMax-M2.5"): (15, 13)}
    h100 = ("h100_sxm", "MiniMaxAI/MiniMax-M2.5")
    assert {p[:3] for p in pairs[h100] if p not in close[h100]} == {(8192, 1024, 4), (8192, 1024, 16)}
    queued = {(1024, 8192, 64), (8192, 1024, 32), (8192, 1024, 64)}      # measured TTFT 2.9-32 s: KV-bound
    assert [round(p[3], 3) for p in close[h100] if p[:3] in queued] == [1.002, 1.038, 1.063]
    kimi = ("b200_sxm", "moonshotai/Kimi-K2.5")
    assert 0.93 < min(p[4] for p in pairs[kimi]) and max(p[4] for p in pairs[kimi]) < 1.11
    assert {g[0] for g in groups if pairs[g]} == e2e.IMAX_DP_AS_TP_EP      # the B300's DP rows have no twins


@pytest.mark.parametrize("over, reason", [
    (dict(tp_size="1", moe_tp_size="2", moe_ep_size="1"), "parallel width mismatch"),
    (dict(tp_size="4", moe_tp_size="2", moe_ep_size="2"), "mixed MoE TPxEP grid"),
    (dict(precision="fp4"), "checkpoint quantization disagrees"),
    (dict(precision="int4"), "checkpoint quantization disagrees"),
    (dict(model_path="MiniMaxAI/MiniMax-M3"), "model_type 'minimax_m3' not supported"),
    (dict(model_path="nobody/NoSuchModel-1B"), "model not in the catalogue"),
    (dict(system="gb300"), "system not mapped"),
])
def test_skips_carry_reasons(over: dict[str, str], reason: str) -> None:
    m = e2e.map_row(_row(**over))
    assert isinstance(m, e2e.Skip)
    assert m.reason.startswith(reason), m.reason
    assert m.row_id == "synthetic"


def test_supported_synthetic_layouts() -> None:
    tp_moe = e2e.map_row(_row())
    ep = e2e.map_row(_row(moe_tp_size="1", moe_ep_size="4"))
    assert isinstance(tp_moe, e2e.Deployment) and not tp_moe.enable_expert_parallel
    assert isinstance(ep, e2e.Deployment) and ep.enable_expert_parallel


def test_num_prompts_policy() -> None:
    assert e2e.num_prompts_for(4, 1024) == 100            # MIN_PROMPTS
    assert e2e.num_prompts_for(8, 100) == 100
    assert e2e.num_prompts_for(112, 100) == 1120          # 10 x concurrency
    assert e2e.num_prompts_for(64, 8192) == 128           # capped, floor 2 x concurrency
    assert e2e.num_prompts_for(512, 8192) == 512          # floor capped at one wave


@needs_data
def test_two_rows_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert e2e.main(["--limit", "2", "--models", "Llama-3.1-8B", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "TTFT MAPE" in text and "skipped" in text
    report = json.loads(out.read_text())
    assert len(report["rows"]) == 2
    for r in report["rows"]:
        s = r["jitter=0"]
        assert s["ttft_ms"] > 0 and s["tpot_ms"] > 0 and math.isfinite(s["ttft_ape_bench"]) and s["ttft_ape_raw"] >= 0
        assert r["deployment"]["model"] == "nvidia/Llama-3.1-8B-Instruct-FP8"
        assert s["pricing_notes"] == []     # a dense model: no MoE kernel the tables miss
    t = report["totals"]["jitter=0"]
    assert t["rows_simulated"] == 2 and t["bench"]["ttft_mape"] is not None and t["raw"]["tpot_mape"] is not None
    assert t["rows_with_aic_estimate"] == 0  # AIC could not load this model offline
    apes = [r["jitter=0"]["ttft_ape_bench"] for r in report["rows"]]
    assert t["per_system"] == {"h200_sxm": {**t["per_system"]["h200_sxm"], "rows": 2,
                                            "ttft_mape": sum(apes) / 2}}   # both rows: Llama-8B on H200
    assert t["per_harness"]["aic"]["rows"] == 2 and "system h200_sxm" in text
    # the aim is stated for the H100 / H200 rows: named apart
    assert t["aim_rows"] == {"systems": ["h100_sxm", "h200_sxm"], "rows": 2, "ttft_mape": sum(apes) / 2,
                             "tpot_mape": t["per_system"]["h200_sxm"]["tpot_mape"]}
    assert "the aim's rows (h100_sxm + h200_sxm, bench)" in text
    # the vLLM the runs used, from the CSV's backend_version
    assert {r["deployment"]["vllm_version"] for r in report["rows"]} == {"0.12.0"}
    assert t["per_version"]["0.12.0"]["rows"] == 2 and "version 0.12.0" in text


def test_engine_loop_settings_reach_the_runs(tmp_path: Path) -> None:
    """The bench prices the engine CPU time and a 1 ms front end by default and records both; the
    two Llama-3.1-8B rows ran vLLM 0.12 (synchronous scheduling), where the CPU time lengthens
    every decode step: TPOT is longer than with --no-engine-cpu-overhead."""
    runs = {}
    for flags in ([], ["--no-engine-cpu-overhead", "--frontend-latency-ms", "0"]):
        out = tmp_path / f"{len(flags)}.json"
        assert e2e.main(["--limit", "2", "--models", "Llama-3.1-8B", "--out", str(out)] + flags) == 0
        runs[len(flags)] = json.loads(out.read_text())
    assert {k: runs[0]["cost_model"][k] for k in ("engine_cpu_overhead", "frontend_latency_ms")} == {
        "engine_cpu_overhead": True, "frontend_latency_ms": 1.0}
    assert {k: runs[3]["cost_model"][k] for k in ("engine_cpu_overhead", "frontend_latency_ms")} == {
        "engine_cpu_overhead": False, "frontend_latency_ms": 0.0}
    for on, off in zip(runs[0]["rows"], runs[3]["rows"]):
        assert on["jitter=0"]["tpot_ms"] > off["jitter=0"]["tpot_ms"] + 0.8   # >= 0.813 ms per step


def test_bench_estimator_reweights_to_the_rows_request_count() -> None:
    dep = {"concurrency": 10, "ttft_meas_ms": 100.0, "tpot_meas_ms": 10.0, "bench_prompts": 200}
    r = {"completed": 20, "ttft_ms": 200.0, "ttft_ms_steady": 100.0, "tpot_ms": 10.0, "tpot_ms_steady": 10.0}
    e2e.score(dep, r)
    assert r["ttft_ms_bench"] == pytest.approx((10 * 300 + 190 * 100) / 200)


def test_bench_estimator_reweights_first_wave() -> None:
    dep = {"concurrency": 10, "ttft_meas_ms": 100.0, "tpot_meas_ms": 10.0}
    # 20 simulated requests: first wave TTFT 300 ms, second wave 100 ms -> raw mean 200 ms.
    r = {"completed": 20, "ttft_ms": 200.0, "ttft_ms_steady": 100.0, "tpot_ms": 10.0, "tpot_ms_steady": 10.0}
    e2e.score(dep, r)
    # Re-weighted to the assumed 100 prompts: (10 * 300 + 90 * 100) / 100 = 120 ms.
    assert r["ttft_ms_bench"] == pytest.approx(120.0)
    assert r["ttft_ape_bench"] == pytest.approx(20.0) and r["ttft_ape_raw"] == pytest.approx(100.0)
    assert r["tpot_ape_bench"] == pytest.approx(0.0)
    one_wave = {"completed": 10, "ttft_ms": 300.0, "ttft_ms_steady": float("nan"), "tpot_ms": 10.0,
                "tpot_ms_steady": float("nan")}
    e2e.score(dep, one_wave)
    assert one_wave["ttft_ms_bench"] == 300.0 and one_wave["ttft_ape_steady"] is None


def test_predictor_bundle_option(tmp_path: Path) -> None:
    assert e2e.resolve_bundles(None, {"H100", "H200"}) == {"H100": None, "H200": None}
    assert e2e.resolve_bundles("none", {"H100"}) == {"H100": None}
    f = tmp_path / "b.joblib"
    f.write_bytes(b"x")
    assert e2e.resolve_bundles(str(f), {"H200"}) == {"H200": str(f)}
    with pytest.raises(SystemExit):
        e2e.resolve_bundles(str(tmp_path / "missing.joblib"), {"H100"})


def test_harness_from_source() -> None:
    imax = ["db-dump/2026-04-27; config_id=637; silicon_concurrency=8; measured=2026-03-28T00:00:00.000Z; "
            "workflow_run_id=344; vllm/vllm-openai:v0.18.0",
            "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=64; measured=2025-11-02; wip=False",
            "source_file=2026-03-25.csv; model=MiniMax-M2.5; silicon_concurrency=4; measured=2026-03-27; wip=False"]
    other = ["source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/Qwen_Qwen3-32B.csv; "
             "silicon_concurrency=8", "source_file=kimi-k2.5-gap-analysis.csv; silicon_concurrency=4", ""]
    assert [e2e.harness_of({"silicon_data_source": s}) for s in imax] == ["inferencemax"] * 3
    assert [e2e.harness_of({"silicon_data_source": s}) for s in other] == ["aic"] * 3


@needs_data
def test_copies_of_inferencemax_measurements_run_as_inferencemax(rows: dict[str, dict[str, str]]) -> None:
    copies = e2e.imax_copies(list(rows.values()))
    assert all("kimi-k2.5-gap-analysis" in rows[i]["silicon_data_source"] for i in copies)
    assert sorted(rows[i]["system"] for i in copies) == ["b200_sxm"] * 17 + ["h200_sxm"] * 15
    deps, _ = e2e.plan(list(rows.values()), ["Kimi-K2.5"], None)
    h200 = [d for d in deps if d.system == "h200_sxm"]
    assert len(h200) == 45 and {d.harness for d in h200} == {"inferencemax"}
    assert all(d.max_num_batched_tokens is None for d in h200)
    # the 15 B200 gap-analysis rows that copy no InferenceMAX row stay "aic" runs
    assert sorted((d.system, d.harness) for d in deps if d.harness == "aic") == [("b200_sxm", "aic")] * 15


def test_a_copy_needs_the_same_deployment_and_means() -> None:
    imax = _row(id="i", silicon_data_source="workflow_run_id=1", silicon_ttft_ms="100.004", silicon_tpot_ms="10.0")
    copy = _row(id="c", silicon_data_source="x.csv", silicon_ttft_ms="100.0", silicon_tpot_ms="10.0")
    other = _row(id="o", silicon_data_source="x.csv", silicon_ttft_ms="100.0", silicon_tpot_ms="10.0", tp_size="8")
    bad = _row(id="b", silicon_data_source="x.csv", isl="n/a")
    assert e2e.imax_copies([imax, copy, other, bad]) == {"c"}


def test_repeat_runs_score_each_run_against_the_others() -> None:
    """Three distinct runs of one deployment (plus a copy of the first, counted once), a
    deployment run once, and a run without a TPOT: only the three runs are scored."""
    a = _row(id="a", silicon_ttft_ms="100.0", silicon_tpot_ms="10.0")
    copy = _row(id="copy", silicon_ttft_ms="100.001", silicon_tpot_ms="10.0")
    b = _row(id="b", silicon_ttft_ms="200.0", silicon_tpot_ms="12.0")
    c = _row(id="c", silicon_ttft_ms="300.0", silicon_tpot_ms="8.0")
    alone = _row(id="alone", tp_size="8.0")
    empty = _row(id="empty", silicon_tpot_ms="")
    got = e2e.repeat_runs([a, copy, b, c, alone, empty])
    assert sorted(got) == ["a", "b", "c"]
    assert got["a"] == pytest.approx((150.0, 0.0))                  # others' means 250 ms, 10 ms
    assert got["b"] == pytest.approx((0.0, 25.0))                   # 200 ms, 9 ms against 12
    assert got["c"] == pytest.approx((50.0, 37.5))                  # 150 ms, 11 ms


def test_an_attention_dp_row_and_its_twin_are_one_deployment() -> None:
    """deployment_key: numbers compare as numbers; an InferenceMAX attention-DP row of IMAX_DP_AS_TP_EP is
    the TP x EP deployment it measured (the twin of a non-DP row at batch_size x adp), elsewhere its own."""
    imax = "source_file=2026-04-06.csv; model=MiniMax-M2.5"
    twin = _row(model_path="MiniMaxAI/MiniMax-M2.5", system="h100_sxm", tp_size="4", attention_dp_size="1",
                moe_tp_size="1", moe_ep_size="4", batch_size="32", silicon_data_source=imax)
    dp = dict(twin, tp_size="4.0", attention_dp_size="4", moe_ep_size="16", batch_size="8")
    assert e2e.deployment_key(dp) == e2e.deployment_key(twin) == \
        ("h100_sxm", "MiniMaxAI/MiniMax-M2.5", "fp8", 4.0, 1.0, 1.0, 1.0, 4.0, 1024.0, 128.0, 32.0)
    assert e2e.deployment_key(dict(dp, system="b300_sxm")) != e2e.deployment_key(dict(twin, system="b300_sxm"))
    assert e2e.deployment_key(dict(dp, silicon_data_source="")) != e2e.deployment_key(twin)   # not InferenceMAX's
    with pytest.raises(ValueError, match="non-integer|could not convert"):
        e2e.deployment_key(dict(twin, batch_size="x"))


@needs_data
def test_repeat_runs_of_the_silicon_rows(rows: dict[str, dict[str, str]]) -> None:
    """352 runs of deployments measured more than once (InferenceMAX's MiniMax-M2.5 and Kimi-K2.5 rows;
    302 before the H100 / B200 attention-DP rows joined their TP x EP twins): one run misses the mean of the
    others by 14.5 % TTFT, 5.2 % TPOT (MAPE)."""
    got = e2e.repeat_runs(list(rows.values()))
    assert len(got) == 352
    ttft = sum(t for t, _ in got.values()) / len(got)
    tpot = sum(p for _, p in got.values()) / len(got)
    assert (round(ttft, 2), round(tpot, 2)) == (14.55, 5.17)


def test_imax_lengths_follow_the_old_benchmark_sampler() -> None:
    ins, outs = e2e.imax_lengths(1024, 8192, 2000, seed=0)
    assert len(ins) == len(outs) == 2000
    assert min(ins) == 819 and max(ins) == 1024          # int(0.8 * 1024) .. 1024, both ends drawn
    assert min(outs) >= 6553 and max(outs) <= 8192
    import numpy as np
    rng = np.random.RandomState(0)                       # inputs first, then outputs, one generator
    assert ins[:3] == rng.randint(819, 1025, size=2000)[:3].tolist()
    assert ins == e2e.imax_lengths(1024, 8192, 2000, seed=0)[0]
    assert ins != e2e.imax_lengths(1024, 8192, 2000, seed=1)[0]


@needs_data
def test_imax_row_runs_with_spread_lengths() -> None:
    rows = {r["id"]: r for r in e2e.load_rows()}
    dep = e2e.map_row(rows["2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c16_tp4_ep1_260"])
    assert isinstance(dep, e2e.Deployment)
    small = e2e.Deployment(**{**e2e.asdict(dep), "num_prompts": 20, "osl": 16})
    spread = e2e.simulate_row(small, 0.0)
    fixed = e2e.simulate_row(small, 0.0, lengths="fixed")
    assert spread["completed"] == fixed["completed"] == 20
    assert spread["ttft_ms"] != fixed["ttft_ms"]


@needs_data
def test_in_service_cap_only_on_inferencemax_2025_rows_above_it() -> None:
    deps = [d for d in map(e2e.map_row, e2e.load_rows()) if isinstance(d, e2e.Deployment)]
    capped = [d for d in deps if d.in_service_cap is not None]
    assert len(capped) == 9
    assert {(d.model, d.gpu, d.concurrency, d.in_service_cap) for d in capped} == {
        ("openai/gpt-oss-120b", "H100", 512, e2e.IMAX_2025_IN_SERVICE_CAP)}
    assert e2e._engine_args(capped[0]).max_num_seqs == 100
    minimax_128 = [d for d in deps if d.model == "MiniMaxAI/MiniMax-M2.5" and d.concurrency == 128]
    assert minimax_128 and all(d.in_service_cap is None for d in minimax_128)   # measured 2026
    assert e2e._engine_args(minimax_128[0]).max_num_seqs is None


def test_runs_price_the_kernels_of_their_vllm_version() -> None:
    """--vllm-version of a row: the release its backend_version names, the data's nightly image as
    the release it was built after (0.19.0), the simulator's default where the run states none."""
    assert e2e.engine_vllm_version("0.17.0") == "0.17.0"
    assert e2e.engine_vllm_version("nightly-5b8c30d62b754b57") == "0.19.0"
    assert e2e.engine_vllm_version("") == "0.33.0"
    with pytest.raises(ValueError, match="backend_version 'nightly-abc': unknown nightly; add it to NIGHTLY_RELEASE"):
        e2e.engine_vllm_version("nightly-abc")


@needs_data
def test_every_selected_row_has_a_known_vllm_version(rows: dict[str, dict[str, str]]) -> None:
    deps = [d for d in map(e2e.map_row, rows.values()) if isinstance(d, e2e.Deployment)]
    versions = {e2e._engine_args(d).vllm_version for d in deps}
    assert versions == {"0.11.2", "0.12.0", "0.15.1", "0.16.0", "0.17.0", "0.18.0", "0.19.0", "0.33.0"}


def test_bad_flags_are_one_line_before_any_simulation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each of these printed an empty table (0 rows), an ERROR on every row, or a traceback at the
    end of the run; now one line on stderr and exit 2, before anything is simulated."""
    junk = tmp_path / "junk.json"
    junk.write_text("[1, 2]")
    cases = [(["--modes", "agg,mixed"], "--modes 'mixed' is not a serving mode of the data; valid: agg, disagg"),
             (["--systems", "h100_sxm,bogus"], "--systems 'bogus' is not a system this bench simulates; valid: "
                                                 "h100_sxm, h200_sxm, b200_sxm, b300_sxm, gb200"),
             (["--jobs", "0"], "--jobs must be >= 1, got 0"),
             (["--limit", "0"], "--limit must be >= 1, got 0"),
             (["--step-jitter", "5"], "--step-jitter must be in [0, 1), got 5.0"),
             (["--range-ratio", "1"], "--range-ratio must be in [0, 1), got 1.0"),
             (["--frontend-latency-ms", "nan"], "--frontend-latency-ms must be in [0, 60000), got nan"),
             (["--moe-routing", "zipf"], "--moe-routing 'zipf'; valid: balanced, random, power_law:ALPHA, trace:PATH"),
             (["--predictor-bundle", str(junk)], f"bundle {junk} has no manifest junk.json.manifest.json; "
                                                 "refusing to unpickle it"),
             (["--out", str(tmp_path)], f"--out {tmp_path} is a directory; give a file path"),
             (["--rescore", str(tmp_path / "none.json")], f"--rescore {tmp_path / 'none.json'} does not exist; "
                                                          "give a report written by --out"),
             (["--rescore", str(junk)], f"--rescore {junk} is not a report written by --out (no rows and skipped lists)")]
    for argv, message in cases:
        assert e2e.main(argv) == 2, argv
        captured = capsys.readouterr()
        assert (captured.out, captured.err) == ("", f"error: {message}\n"), argv


@needs_data
def test_models_matching_no_row_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert e2e.main(["--models", "Llama-3.3", "--systems", "h100_sxm"]) == 2
    assert capsys.readouterr().err == "error: --models 'Llama-3.3' matches no row's model_path on h100_sxm\n"
