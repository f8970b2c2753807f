"""The `frontier` CLI: vLLM flag names, scenario files, outputs, one-line errors."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
from typer.testing import CliRunner

from frontier.cli import app

runner = CliRunner()
BASE = ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--max-model-len", "4096",
        "--num-prompts", "20", "--random-input-len", "200", "--random-output-len", "10"]


def test_simulate_prints_the_vllm_bench_summary_and_writes_files(tmp_path):
    res = runner.invoke(app, BASE + [
        "--batch-trace", str(tmp_path / "bt.parquet"), "--save-result", "--result-dir", str(tmp_path),
        "--result-filename", "r.json", "--output-dir", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    for label in ("Successful requests:", "Mean TTFT (ms):", "Median TPOT (ms):", "P99 ITL (ms):",
                  "Mean E2EL (ms):", "Request throughput (req/s):", "Simulated duration (s):",
                  "Simulation wall time (s):"):
        assert label in res.output
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["completed"] == 20 and saved["num_prompts"] == 20
    for key in ("mean_ttft_ms", "median_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "request_throughput",
                "output_throughput", "total_token_throughput", "simulated_duration_s", "sim_wall_s"):
        assert key in saved
    trace = pq.read_table(tmp_path / "bt.parquet")
    assert set(["replica_id", "step", "start_s", "end_s", "request_id", "num_scheduled_tokens"]) <= set(trace.column_names)
    assert sum(trace.column("num_scheduled_tokens").to_pylist()) == 20 * 200 + 20 * 9
    steps = pq.read_table(tmp_path / "out" / "steps.parquet")
    assert "kv_blocks_used" in steps.column_names and "padded_tokens" in steps.column_names
    assert pq.read_table(tmp_path / "out" / "requests.parquet").num_rows == 20


def test_save_detailed_keeps_the_per_request_arrays_as_vllm(tmp_path):
    """vLLM's --save-result drops the per-request arrays unless --save-detailed is given."""
    for flag, name in (([], "plain.json"), (["--save-detailed"], "detailed.json")):
        res = runner.invoke(app, BASE + ["--save-result", "--result-dir", str(tmp_path), "--result-filename", name]
                            + flag)
        assert res.exit_code == 0, res.output
    plain = json.loads((tmp_path / "plain.json").read_text())
    detailed = json.loads((tmp_path / "detailed.json").read_text())
    arrays = ("input_lens", "output_lens", "start_times", "ttfts", "itls", "errors")
    assert not set(arrays) & set(plain) and set(arrays) <= set(detailed)
    assert detailed["input_lens"] == [200] * 20 and [len(x) for x in detailed["itls"]] == [9] * 20
    assert len(plain["latencies"]) == 20 and plain["mean_ttft_ms"] == detailed["mean_ttft_ms"]


def test_scenario_file_and_flags_merge_flags_win(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("model: meta-llama/Llama-3.1-8B\nmax-model-len: 4096\nnum_prompts: 7\n"
                   "random-input-len: 64\nrandom-output-len: 4\n")
    res = runner.invoke(app, ["simulate", "--config", str(cfg), "--num-prompts", "3"])
    assert res.exit_code == 0, res.output
    assert "Successful requests:                     3" in res.output


def test_bad_inputs_get_one_line_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("max-num-seq: 4\n")
    typed = {name: tmp_path / f"{name}.yaml" for name in ("model", "gpu", "rate", "switch", "save", "jitter", "conc",
                                                          "out")}
    typed["save"].write_text("save-result: maybe\n")
    typed["jitter"].write_text("step-jitter: abc\n")
    typed["conc"].write_text("max-concurrency: 2.5\n")
    typed["out"].write_text("output-dir: [a]\n")
    typed["model"].write_text("model: 5\n")
    typed["gpu"].write_text("gpu: [H100]\n")
    typed["rate"].write_text("request-rate: fast\n")
    typed["switch"].write_text("enable-prefix-caching: maybe\n")
    binary, sharegpt, model = tmp_path / "bin.yaml", tmp_path / "sg.json", tmp_path / "m"
    binary.write_bytes(b"model: x\n\xcb")
    sharegpt.write_bytes(b"[\xcb]")
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama", "hidden_size": "x", "num_hidden_layers": 2, '
                                       '"num_attention_heads": 4, "vocab_size": 100}')
    cases = [
        # output paths that cannot be written: refused before simulating (a traceback at the end before)
        (["simulate", "--output-dir", str(bad)], f"--output-dir {bad} exists and is not a directory"),
        (["simulate", "--output-dir", str(bad / "sub")],
         f"--output-dir: {bad} is not a directory, so {bad / 'sub'} cannot be created"),
        (["simulate", "--batch-trace", str(tmp_path)], f"--batch-trace {tmp_path} is a directory; give a file path"),
        (["simulate", "--save-result", "--result-dir", str(bad)], f"--result-dir {bad} exists and is not a directory"),
        # scenario values of the wrong type: tracebacks (TypeError, AttributeError, float()) or, for a
        # word given to a switch, accepted as true
        (["simulate", "--config", str(typed["model"])], "unknown model '5': not a config.json path nor a catalogue name"),
        (["simulate", "--config", str(typed["gpu"])], "--gpu must be a single value, got ['H100']"),
        (["simulate", "--config", str(typed["rate"])], "--request-rate must be a number, got 'fast'"),
        (["simulate", "--config", str(typed["switch"])], "--enable-prefix-caching must be true or false, got 'maybe'"),
        (["simulate", "--config", str(typed["save"])], "--save-result must be true or false, got 'maybe'"),
        (["simulate", "--config", str(typed["jitter"])], "--step-jitter must be a number, got 'abc'"),
        (["simulate", "--config", str(typed["conc"])], "--max-concurrency must be an integer, got 2.5"),
        (["simulate", "--config", str(typed["out"])], "--output-dir must be a single value, got ['a']"),
        # binary files and malformed configs: the bare codec / int() messages before
        (["simulate", "--config", str(binary)], f"scenario file '{binary}' is not a UTF-8 text file (byte 9)"),
        (["simulate", "--dataset-name", "sharegpt", "--dataset-path", str(sharegpt), "--num-prompts", "2"],
         f"ShareGPT file '{sharegpt}' is not a UTF-8 text file (byte 1)"),
        (["simulate", "--model", str(model)], "m: config.json hidden_size='x'; valid: a whole number >= 1"),
        (["simulate", "--gpu", "X100"], "unknown GPU 'X100'"),
        (["simulate", "--max-num-seqs", "0"], "--max-num-seqs must be a positive integer"),
        (["simulate", "--dataset-name", "nope"], "dataset_name='nope'"),
        (["simulate", "--config", str(bad)], "unknown key 'max-num-seq'"),
        (["simulate", "--model", "no/such-model"], "no/such-model"),
        (["simulate", "--scheduling-policy", "lifo"], "--scheduling-policy 'lifo'"),
        (["simulate", "--all2all-backend", "deepep"], "--all2all-backend 'deepep' is not one of allgather_reducescatter"),
        (["simulate", "--vllm-version", "0.9"], "--vllm-version 0.9 is outside 0.10 to 0.33"),
        (["simulate", "--performance-mode", "fast"], "--performance-mode 'fast' is not one of balanced, interactivity"),
        (["memory", "--performance-mode", "throughput", "--vllm-version", "0.16.0"],
         "--performance-mode came with vLLM 0.17; --vllm-version 0.16.0 has none"),
        (["memory", "--all2all-backend", "pplx2"], "--all2all-backend 'pplx2' is not one of"),
        (["simulate", "--eplb-config", "{num_redundant_experts: 8}"], "--eplb-config '{num_redundant_experts: 8}' is "
         "not valid JSON"),
        (["simulate", "--eplb-config", '{"num_redundant_experts": -1}'],
         "--eplb-config num_redundant_experts must be an integer >= 0, got -1"),
        (["memory", "--eplb-config", '{"num_redundant_experts": 8}'],
         "num_redundant_experts is set to 8 but EPLB is not enabled"),
        (["simulate", "--model", "Qwen/Qwen3-30B-A3B", "--enable-eplb"], "--enable-eplb needs --enable-expert-parallel"),
        (["memory", "--model", "meta-llama/Llama-3.1-8B", "-tp", "3"], "3"),
        (["simulate", "--gpu", "L4", "--max-model-len", "131072"],
         "vLLM would not start: one request of max_model_len 131072 needs 8192 KV blocks (16.00 GiB) but 2521 "
         "are usable besides the null block"),
    ]
    for argv, needle in cases:
        res = runner.invoke(app, argv)
        assert res.exit_code == 2, (argv, res.output)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (argv, res.output)


def test_an_output_that_fails_at_the_end_is_one_line(tmp_path, monkeypatch):
    """What check_output_paths cannot foresee (a full disk, /proc) fails in one line, not a traceback."""
    import simulator.output

    def full_disk(result, values):
        raise OSError(28, "No space left on device", str(tmp_path / "out" / "requests.parquet"))
    monkeypatch.setattr(simulator.output, "write_outputs", full_disk)
    res = runner.invoke(app, BASE + ["--output-dir", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert res.output.splitlines()[-1] == f"error: could not write {tmp_path / 'out' / 'requests.parquet'}: No space left on device"


def test_memory_json_has_the_breakdown():
    res = runner.invoke(app, ["memory", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100",
                              "--num-gpu-blocks-override", "1000", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    for key in ("weights_gib", "activation_gib", "non_torch_gib", "cuda_graph_gib", "kv_cache_gib",
                "num_gpu_blocks", "kv_cache_tokens", "max_concurrency"):
        assert key in report
    assert report["num_gpu_blocks"] == 1000
    assert report["weights_gib"] == 16060522496 / 2**30


def test_memory_takes_the_flags_that_set_the_token_budget():
    """--all2all-backend deepep_low_latency with DP x EP (vLLM 0.20+: 256 tokens) and --performance-mode
    throughput (twice the defaults) change the profiled activation peak, so the KV budget."""
    def activation(*flags):
        res = runner.invoke(app, ["memory", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H200", "-dp", "2",
                                  "--enable-expert-parallel", "--json", *flags])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)["activation_gib"]
    base = activation()
    assert activation("--all2all-backend", "deepep_low_latency") < base < activation("--performance-mode", "throughput")
    graphs = runner.invoke(app, ["memory", "--performance-mode", "interactivity", "--json"])
    assert graphs.exit_code == 0, graphs.output
    balanced = json.loads(runner.invoke(app, ["memory", "--json"]).output)["cuda_graph_gib"]
    assert json.loads(graphs.output)["cuda_graph_gib"] > balanced        # 25 more capture sizes


def test_token_counts_read_as_vllm_reads_them():
    """--max-model-len / --max-num-batched-tokens: 32k = 32,000, 32K = 32,768; --max-model-len auto."""
    def line(*flags):
        res = runner.invoke(app, ["memory", *flags])
        assert res.exit_code == 0, res.output
        return res.output.splitlines()[-1]
    assert line("--max-model-len", "32k") == "Maximum concurrency for 32,000 tokens per request: 14.37x"
    assert line("--max-model-len", "32K") == "Maximum concurrency for 32,768 tokens per request: 14.04x"
    assert line("--max-model-len", "auto", "--gpu-memory-utilization", "0.3") == (
        "Maximum concurrency for 55,392 tokens per request: 1.00x")
    assert json.loads(runner.invoke(app, ["memory", "--max-num-batched-tokens", "2K", "--json"]).output)[
        "activation_gib"] < json.loads(runner.invoke(app, ["memory", "--json"]).output)["activation_gib"]
    for flags, message in ((["--max-model-len", "3.5K"], "--max-model-len '3.5K': decimals are not allowed with "
                                                         "binary suffix K; did you mean 3.5k?"),
                           (["--max-num-batched-tokens", "auto"], "--max-num-batched-tokens 'auto' is not a token "
                                                                  "count")):
        res = runner.invoke(app, ["memory", *flags])
        assert res.exit_code == 2 and res.output.startswith(f"error: {message}")


def test_simulator_and_calibration_never_import_torch():
    code = ("import sys, simulator.simulation, simulator.output, frontier.cli, calibration; "
            "from frontier.cli import app; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_models_lists_the_catalogue_with_what_is_refused():
    res = runner.invoke(app, ["models"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    gpt = next(line for line in lines if line.startswith("openai/gpt-oss-120b "))
    assert gpt.split() == ["openai/gpt-oss-120b", "GptOssForCausalLM", "36", "layers", "128", "experts", "top-4",
                           "weights", "mxfp4"]
    llama = next(line for line in lines if line.startswith("meta-llama/Meta-Llama-3.1-8B "))
    assert llama.split()[1:] == ["LlamaForCausalLM", "32", "layers", "dense", "weights", "none"]
    v32 = next(line for line in lines if line.startswith("deepseek-ai/DeepSeek-V3.2 "))   # aiconfigurator-core 0.12.0
    assert v32.split(None, 1)[1] == "not supported (unsupported model_type 'deepseek_v32')"


def test_engine_cpu_overhead_flag_prices_the_cpu_of_a_sync_release(tmp_path):
    """--engine-cpu-overhead with --vllm-version 0.12.0 (synchronous scheduling by default then):
    the first line says so, and every TPOT grows by a step's CPU time (20 requests in each step)."""
    out = {}
    for flag in ("--no-engine-cpu-overhead", "--engine-cpu-overhead"):
        res = runner.invoke(app, BASE + ["--vllm-version", "0.12.0", flag, "--save-result", "--result-dir",
                                         str(tmp_path), "--result-filename", f"{flag}.json"])
        assert res.exit_code == 0, res.output
        first = res.output.splitlines()[0]
        assert first.endswith("MoE routing balanced, engine CPU per step") == (flag == "--engine-cpu-overhead"), first
        out[flag] = json.loads((tmp_path / f"{flag}.json").read_text())
    grown = out["--engine-cpu-overhead"]["mean_tpot_ms"] - out["--no-engine-cpu-overhead"]["mean_tpot_ms"]
    assert abs(grown - (0.813 + 20 * 0.0423)) < 1e-9
    # the saved result says which engine loop ran
    assert {k: out["--engine-cpu-overhead"][k] for k in ("async_scheduling", "engine_cpu_overhead",
                                                        "frontend_latency_ms")} == {
        "async_scheduling": False, "engine_cpu_overhead": True, "frontend_latency_ms": 1.0}


def test_disable_hybrid_kv_cache_manager_keeps_one_group_of_every_layer():
    """gpt-oss-120b on an H100: its 18 sliding-window layers kept as full attention, a block spans
    all 36 layers (half the blocks of the same memory), and a simulation charges them so."""
    def memory(*flags):
        res = runner.invoke(app, ["memory", "--model", "openai/gpt-oss-120b", "--gpu", "H100", "--json", *flags])
        assert res.exit_code == 0, res.output
        return json.loads(res.output)
    hybrid, unified = memory(), memory("--disable-hybrid-kv-cache-manager")
    assert hybrid["kv_cache_groups"] == [["full", 18], ["sliding", 18]]
    assert unified["kv_cache_groups"] == [["full", 36]]
    assert (hybrid["num_gpu_blocks"], unified["num_gpu_blocks"]) == (16819, 8409)
    assert unified["bytes_per_block"] == 2 * hybrid["bytes_per_block"] == 36 * 16 * 2 * 8 * 64 * 2
    res = runner.invoke(app, ["simulate", "--model", "openai/gpt-oss-120b", "--gpu", "H100", "--num-prompts", "20",
                              "--disable-hybrid-kv-cache-manager"])
    assert res.exit_code == 0, res.output
    assert "KV cache 8409 blocks x 16 tokens per engine" in res.output


def test_memory_plans_a_gated_deltanet_model_and_simulate_runs_it_in_both_mamba_modes():
    """Qwen3.5: `frontier memory` gives vLLM 0.33's plan (the attention block aligned to the GDN
    state, per prefix-caching mode); simulate runs it in vLLM's "none" mamba mode and its "align"
    mode (prefix caching, on by default) and refuses, in one line, the align mode without chunked
    prefill (vLLM would not start) and --engine sglang; P/D runs in both modes, both roles on the
    aligned block, and AFD runs."""
    base = ["memory", "--model", "Qwen/Qwen3.5-35B-A3B", "--gpu", "H200", "-tp", "2", "--max-model-len", "32768"]
    res = runner.invoke(app, base + ["--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert (report["block_size"], report["mamba_state_bytes"], report["mamba_blocks_per_request"]) == (1088, 1_073_152, 3)
    assert sorted(report["kv_cache_groups"]) == [["full", 10]] + [["mamba", 10]] * 3
    off = json.loads(runner.invoke(app, base + ["--json", "--no-enable-prefix-caching"]).output)
    assert (off["block_size"], off["mamba_blocks_per_request"]) == (1056, 1)
    text = runner.invoke(app, base)
    assert "block size                         1088  tokens (vLLM's attention block aligned to the Gated DeltaNet" \
        in text.output
    run = ["simulate", "--model", "Qwen/Qwen3.5-35B-A3B", "--num-prompts", "20", "--max-model-len", "32768"]
    res = runner.invoke(app, run + ["--no-enable-prefix-caching"])
    assert res.exit_code == 0, res.output
    assert "KV cache 204 blocks x 1056 tokens per engine" in res.output.splitlines()[0]
    res = runner.invoke(app, run)       # prefix caching on: vLLM's "align" mamba cache mode
    assert res.exit_code == 0, res.output
    assert "KV cache 198 blocks x 1088 tokens per engine" in res.output.splitlines()[0]
    # the vision tower (0.83 GiB on one H100) dropped, as vLLM drops it: 40 blocks more
    res = runner.invoke(app, run + ["--language-model-only"])
    assert res.exit_code == 0 and "KV cache 238 blocks x 1088 tokens per engine" in res.output.splitlines()[0]
    assert "multimodal checkpoint" not in res.output
    res = runner.invoke(app, run + ["--architecture", "afd", "--ffn-ep", "2"])
    assert res.exit_code == 0 and "Qwen/Qwen3.5-35B-A3B" in res.output.splitlines()[0], res.output
    for flags, blocks in ((["--no-enable-prefix-caching"], "204 blocks x 1056"), ([], "198 blocks x 1088")):
        res = runner.invoke(app, run + flags + ["--architecture", "pdd"])
        assert res.exit_code == 0, res.output
        assert (f"prefill 1 engine(s) of TP1 x PP1 on 1 x H100-SXM (KV {blocks} tokens; steps of <= 1024 requests / "
                f"8192 tokens); decode 1 engine(s) of TP1 x PP1 on 1 x H100-SXM (KV {blocks} tokens"
                in res.output.splitlines()[0])
    res = runner.invoke(app, run + ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "32768"])
    assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == (
        "error: Qwen/Qwen3.5-35B-A3B: vLLM requires chunked prefill for Gated DeltaNet prefix caching (its "
        "\"align\" mamba cache mode) and would not start; drop --no-enable-chunked-prefill or add "
        "--no-enable-prefix-caching")
    for cmd in (["memory", "--model", "Qwen/Qwen3.5-35B-A3B", "--engine", "sglang"],
                ["simulate", "--model", "Qwen/Qwen3.5-35B-A3B", "--num-prompts", "5", "--engine", "sglang"]):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 2 and "--engine sglang does not simulate Qwen/Qwen3.5-35B-A3B's Gated DeltaNet" \
            in res.output.strip().splitlines()[-1]
    models = runner.invoke(app, ["models"]).output
    assert any(line.startswith("Qwen/Qwen3.5-27B") and line.endswith(
        "48 Gated DeltaNet layers") for line in models.splitlines())


def test_multimodal_flags_in_memory_simulate_and_a_scenario_file(tmp_path):
    """--limit-mm-per-prompt (JSON on the command line, a mapping in a scenario file) and
    --mm-encoder-tp-mode reach the KV budget; bad values are refused in one line."""
    base = ["memory", "--model", "Qwen/Qwen3-VL-8B-Instruct", "--gpu", "H100", "-tp", "2", "--json"]
    tokens = {flags: json.loads(runner.invoke(app, base + list(flags)).output)["kv_cache_tokens"]
              for flags in ((), ("--limit-mm-per-prompt", '{"image": 0, "video": 0}'), ("--mm-encoder-tp-mode", "data"))}
    assert list(tokens.values()) == [899_520, 907_408, 891_776]
    vision = {flags: json.loads(runner.invoke(app, base + list(flags)).output)["vision_encoder_gib"] * (1 << 30)
              for flags in ((), ("--mm-encoder-tp-mode", "data"), ("--language-model-only",))}
    assert list(vision.values()) == [2 * (571_730_544 // 2 + 4_657_792), 2 * (571_730_544 + 4_657_792), 0]
    assert "    of which vision encoder          0.54 GiB" in runner.invoke(app, base[:-1]).output.splitlines()
    cfg = tmp_path / "vl.yaml"
    cfg.write_text("model: Qwen/Qwen3-VL-8B-Instruct\ngpu: H100\nlimit_mm_per_prompt:\n  image: 0\n  video: 0\n")
    res = runner.invoke(app, ["simulate", "--config", str(cfg), "--num-prompts", "3"])
    assert res.exit_code == 0, res.output
    assert "KV cache 25263 blocks x 16 tokens per engine" in res.output.splitlines()[0]
    assert "multimodal checkpoint" not in res.output
    for cmd in (base, ["simulate", "--model", "Qwen/Qwen3-VL-8B-Instruct", "--num-prompts", "3"]):
        res = runner.invoke(app, cmd + ["--limit-mm-per-prompt", "image=0"])
        assert res.exit_code == 2 and res.output.strip().splitlines()[-1] == (
            "error: --limit-mm-per-prompt 'image=0' is not JSON; give e.g. '{\"image\": 0, \"video\": 0}'")
