"""``frontier simulate --engine sglang``: SGLang's flags, its start-up line, its summary keys, the
refusal of the other engine's flags, and a sweep across both engines."""

from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from frontier.cli import app

runner = CliRunner()
BASE = ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--num-prompts", "40",
        "--random-input-len", "600", "--random-output-len", "40", "--request-rate", "20"]


def test_simulate_sglang_prints_its_start_up_and_writes_its_keys(tmp_path):
    out = tmp_path / "out"
    res = runner.invoke(app, BASE + ["--engine", "sglang", "--max-running-requests", "32", "--chunked-prefill-size",
                                     "4096", "--output-dir", str(out)])
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first.startswith("Simulated meta-llama/Llama-3.1-8B on 1 x H100-SXM with SGLang 0.5.23 (1 server(s) of TP1); "
                            "token pool ")
    assert ("max_running_requests 32, chunked_prefill_size 4096, CUDA graphs: decode <= 32 requests, prefill <= 4096 "
            "tokens, overlap scheduler") in first
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completed"] == 40 and summary["failed"] == 0
    assert summary["engine"] == "sglang 0.5.23" and summary["num_gpus"] == 1
    assert summary["sglang_max_running_requests"] == 32 and summary["sglang_chunked_prefill_size"] == 4096
    # reserved 512 + 1.5 x 4096 + 128 + 2 x 32 + 8 x 50 prefill graphs = 7248 MiB, raised to 10240 above 60 GiB
    assert summary["sglang_mem_fraction_static"] == round((81559 - 10240) / 81559, 3) == 0.874
    assert summary["sglang_cuda_graph_max_bs"] == 32
    assert summary["async_scheduling"] is True


def test_cuda_graph_bs_sets_the_decode_graphs():
    res = runner.invoke(app, BASE + ["--engine", "sglang", "--cuda-graph-bs", "1,2,3,4,5,6"])
    assert res.exit_code == 0, res.output
    assert "CUDA graphs: decode <= 6 requests" in res.output.splitlines()[0]
    bad = runner.invoke(app, BASE + ["--engine", "sglang", "--cuda-graph-bs", "0,2"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines()[-1] == (
        "error: --cuda-graph-bs (0, 2); must be positive integers")


def test_normal_loop_and_no_graphs(tmp_path):
    res = runner.invoke(app, BASE + ["--engine", "sglang", "--disable-overlap-schedule", "--disable-cuda-graph",
                                     "--enable-mixed-chunk", "--disable-radix-cache"])
    assert res.exit_code == 0, res.output
    assert "no CUDA graphs, normal scheduler" in res.output.splitlines()[0]


def test_disable_ignore_eos_reserves_at_the_ratio_and_retracts(tmp_path):
    """bench_serving's default (ignore_eos) reserves every running request's remaining tokens, so a
    tight pool never retracts; --disable-ignore-eos reserves them at new_token_ratio (0.7 at first)
    and decodes outrun the pool."""
    counts = []
    for extra in ([], ["--disable-ignore-eos"]):
        out = tmp_path / str(len(extra))
        res = runner.invoke(app, ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--num-prompts",
                                  "300", "--request-rate", "30", "--engine", "sglang", "--max-total-tokens", "40000",
                                  "--output-dir", str(out)] + extra)
        assert res.exit_code == 0, res.output
        counts.append(json.loads((out / "summary.json").read_text())["sglang_num_retractions"])
    assert counts == [0, 2]


@pytest.mark.parametrize("flags,message", [
    (["--engine", "sglang", "--max-num-seqs", "64"],
     "error: --max-num-seqs is a vLLM flag, not simulated with --engine sglang; SGLang's is --max-running-requests"),
    (["--engine", "sglang", "--no-async-scheduling"],
     "error: --async-scheduling is a vLLM flag, not simulated with --engine sglang; SGLang's is --disable-overlap-schedule"),
    (["--engine", "sglang", "-pp", "2"], "error: --pipeline-parallel-size is a vLLM flag, not simulated with --engine sglang"),
    (["--chunked-prefill-size", "4096"], "error: --chunked-prefill-size is an SGLang flag; add --engine sglang"),
    (["--ep-size", "2"], "error: --ep-size is an SGLang flag; add --engine sglang"),
    (["--engine", "sglang", "--enable-expert-parallel"],
     "error: --enable-expert-parallel is a vLLM flag, not simulated with --engine sglang; SGLang's is --ep-size"),
    (["--engine", "sglang", "--ep-size", "0"], "error: --ep-size 0; must be a positive integer"),
    (["--engine", "trt"], "error: --engine 'trt' is not one of vllm, sglang"),
    (["--engine", "sglang", "--schedule-policy", "dfs-weight"],
     "error: --schedule-policy 'dfs-weight' is not simulated; valid: fcfs, lof, lpm"),
    (["--engine", "sglang", "--engine-cpu-overhead"],
     "error: --engine-cpu-overhead prices vLLM's engine core as measured (simulator/engine_cpu.py); SGLang's "
     "scheduler CPU time is not measured here, so it is not available with --engine sglang"),
    (["--engine", "sglang", "--architecture", "pdd"],
     "error: --engine sglang simulates co-located servers; --architecture pdd is vLLM's here"),
])
def test_the_other_engines_flags_are_refused(flags, message):
    res = runner.invoke(app, BASE + flags)
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == message


def test_a_sweep_compares_the_engines(tmp_path):
    serve = tmp_path / "serve.json"
    serve.write_text(json.dumps({"vllm": {"engine": "vllm"}, "sglang": {"engine": "sglang"},
                                 "sglang-mixed": {"engine": "sglang", "enable_mixed_chunk": True}}))
    config = tmp_path / "base.yaml"
    config.write_text("model: meta-llama/Llama-3.1-8B\ngpu: H100\nnum_prompts: 40\nrandom_input_len: 600\n"
                      "random_output_len: 40\nrequest_rate: 20\n")
    res = runner.invoke(app, ["sweep", "--config", str(config), "--serve-params", str(serve), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "sweep.csv").open()))
    assert [r["name"] for r in rows] == ["vllm", "sglang", "sglang-mixed"]
    assert all(r["completed"] == "40" and r["error"] == "" for r in rows)


def test_memory_prints_sglangs_start_up_sizing():
    res = runner.invoke(app, ["memory", "--engine", "sglang", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100",
                              "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["mem_fraction_static"] == 0.83 and report["max_total_num_tokens"] == 415620
    assert report["max_running_requests"] == 2048 and report["page_size"] == 1
    assert report["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
    text = runner.invoke(app, ["memory", "--engine", "sglang", "--gpu", "H200", "--max-total-tokens", "1000"])
    assert "max_total_num_tokens=1,000, max_running_requests=500" in text.output


@pytest.mark.parametrize("flags,message", [
    (["--engine", "sglang", "--max-num-seqs", "8"],
     "error: --max-num-seqs is a vLLM flag, not simulated with --engine sglang; SGLang's is --max-running-requests"),
    (["--engine", "sglang", "-pp", "2"], "error: --pipeline-parallel-size is a vLLM flag, not simulated with --engine sglang"),
    (["--mem-fraction-static", "0.8"], "error: --mem-fraction-static is an SGLang flag; add --engine sglang"),
    (["--engine", "trt"], "error: --engine 'trt' is not one of vllm, sglang"),
])
def test_memory_refuses_the_other_engines_flags(flags, message):
    res = runner.invoke(app, ["memory"] + flags)
    assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == message


def test_dp_size_runs_that_many_tp_groups_round_robin(tmp_path):
    out = tmp_path / "dp"
    res = runner.invoke(app, BASE + ["--engine", "sglang", "--data-parallel-size", "2", "--num-gpus", "2",
                                     "--output-dir", str(out)])
    assert res.exit_code == 0, res.output
    assert "(1 server(s) of DP2 x TP1)" in res.output.splitlines()[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_gpus"] == 2 and summary["completed"] == 40
    bad = runner.invoke(app, BASE + ["--engine", "sglang", "-dp", "2", "--num-replicas", "2", "--router", "least_loaded"])
    assert bad.exit_code == 2 and "simulated only under --router round_robin" in bad.output


def test_expert_parallel_sglang_run(tmp_path):
    """--ep-size 4 on a TP-4 group of Qwen3-30B-A3B (128 experts): each rank holds 32 whole experts
    (MoE TP 1), so the token pool is the TP layout's (the same bytes per rank), the MoE kernels
    differ; the start-up line names the MoE layout."""
    run = ["simulate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H100", "-tp", "4", "--num-prompts", "20",
           "--random-input-len", "600", "--random-output-len", "20", "--engine", "sglang"]
    summaries = []
    for i, flags in enumerate(([], ["--ep-size", "4"])):
        res = runner.invoke(app, run + flags + ["--output-dir", str(tmp_path / str(i))])
        assert res.exit_code == 0, res.output
        summaries.append(json.loads((tmp_path / str(i) / "summary.json").read_text()))
    tp, ep = summaries
    assert tp["sglang_max_total_num_tokens"] == ep["sglang_max_total_num_tokens"]
    assert tp["mean_tpot_ms"] != ep["mean_tpot_ms"] and ep["completed"] == 20
    line = runner.invoke(app, run + ["--ep", "2"]).output.splitlines()[0]
    assert "(1 server(s) of TP4 (MoE EP2 x TP2)); token pool" in line
    mem = runner.invoke(app, ["memory", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H100", "-tp", "4", "--engine",
                              "sglang", "--ep-size", "4"]).output
    assert mem.startswith("Qwen/Qwen3-30B-A3B on H100-SXM (TP4, MoE EP4 x TP1), per GPU, SGLang 0.5.23 start-up:")
    res = runner.invoke(app, run + ["--ep-size", "3"])
    assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == (
        "error: --ep-size 3 must divide the tensor parallel size 4 (SGLang: tp_size must be divisible by ep_size)")


def test_language_model_only_for_sglang():
    """SGLang 0.5.23's --language-model-only skips the Qwen ViT (Qwen3-VL, Qwen3.5); other towers
    are refused in one line."""
    base = ["memory", "--engine", "sglang", "--model", "Qwen/Qwen3-VL-8B-Instruct", "--gpu", "H100", "--json"]
    full, lm = (json.loads(runner.invoke(app, base + flags).output) for flags in ([], ["--language-model-only"]))
    assert round((full["weights_gib"] - lm["weights_gib"]) * (1 << 30)) == 2 * (571_730_544 + 4_657_792)
    assert lm["max_total_num_tokens"] > full["max_total_num_tokens"]
    res = runner.invoke(app, ["simulate", "--engine", "sglang", "--model", "google/gemma-3-4b-it", "--num-prompts", "3",
                              "--language-model-only"])
    assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == (
        "error: --language-model-only: SGLang 0.5.23 skips the vision tower of Qwen3-VL and Qwen3.5 checkpoints only "
        "(models/qwen3_vl.py, qwen3_5.py), not google/gemma-3-4b-it's")
