"""`frontier simulate --architecture pdd`: end to end, outputs with roles, one-line errors."""

import json

import pyarrow.parquet as pq
from typer.testing import CliRunner

from frontier.cli import app

runner = CliRunner()
BASE = ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--max-model-len", "4096",
        "--num-prompts", "12", "--random-input-len", "500", "--random-output-len", "6"]


def test_pdd_run_prints_gpus_per_role_and_writes_role_columns(tmp_path):
    res = runner.invoke(app, BASE + [
        "--architecture", "pdd", "--prefill-replicas", "2", "--decode-tp", "2", "--decode-router", "kv_aware",
        "--output-dir", str(tmp_path), "--batch-trace", str(tmp_path / "bt.parquet")])
    assert res.exit_code == 0, res.output
    assert "P/D disaggregated on 4 GPUs in total" in res.output
    assert "Successful requests:                     12" in res.output
    reqs = pq.read_table(tmp_path / "requests.parquet").to_pydict()
    assert set(reqs["prefill_replica"]) == {0, 1} and set(reqs["decode_replica"]) == {0}
    assert min(reqs["kv_transfer_s"]) > 0
    steps = pq.read_table(tmp_path / "steps.parquet").to_pydict()
    assert set(steps["role"]) == {"P", "D"}
    trace = pq.read_table(tmp_path / "bt.parquet").to_pydict()
    prefill_tokens = sum(n for role, n in zip(trace["role"], trace["num_scheduled_tokens"]) if role == "P")
    decode_tokens = sum(n for role, n in zip(trace["role"], trace["num_scheduled_tokens"]) if role == "D")
    assert prefill_tokens == 12 * 500              # P computes every prompt token
    assert decode_tokens == 12 * 6                 # D: 1 recomputed prompt token + 5 decodes each


def test_role_batch_limit_flags_reach_their_role(tmp_path):
    res = runner.invoke(app, BASE + ["--architecture", "pdd", "--prefill-max-num-seqs", "1",
                                     "--prefill-max-num-batched-tokens", "2048", "--decode-max-num-seqs", "12",
                                     "--decode-max-num-batched-tokens", "12", "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "steps of <= 1 requests / 2048 tokens); decode" in res.output       # the first line says so
    assert "steps of <= 12 requests / 12 tokens); busy" in res.output
    steps = pq.read_table(tmp_path / "steps.parquet").to_pydict()
    assert max(n for n, role in zip(steps["num_reqs"], steps["role"]) if role == "P") == 1
    assert max(t for t, role in zip(steps["num_tokens"], steps["role"]) if role == "D") <= 12
    # as vLLM reads them (2K = 2,048), and a defaulted max_num_seqs follows a smaller budget
    res = runner.invoke(app, BASE + ["--architecture", "pdd", "--prefill-max-num-batched-tokens", "2K",
                                     "--decode-max-num-batched-tokens", "0.5k"])
    assert res.exit_code == 0, res.output
    assert "steps of <= 1024 requests / 2048 tokens); decode" in res.output
    assert "steps of <= 500 requests / 500 tokens); busy" in res.output


def test_pdd_bad_inputs_get_one_line_errors():
    cases = [
        (["--architecture", "pdd", "--prefill-replicas", "0"], "--prefill-replicas must be a positive integer"),
        (["--architecture", "pdd", "--decode-max-num-seqs", "0"], "--decode-max-num-seqs must be a positive integer"),
        (["--architecture", "pdd", "--prefill-max-num-seqs", "64", "--prefill-max-num-batched-tokens", "32"],
         "prefill role: max_num_batched_tokens=32; must be >= max_num_seqs=64"),
        (["--decode-max-num-seqs", "2"], "need --architecture pdd"),
        (["--architecture", "pdd", "--decode-gpu", "X100"], "decode role: unknown GPU 'X100'"),
        (["--architecture", "pdd", "--prefill-router", "kv_aware"], "--prefill-router 'kv_aware'"),
        (["--decode-tp", "2"], "need --architecture pdd"),
        (["--architecture", "mixed"], "--architecture 'mixed'"),
    ]
    for extra, needle in cases:
        res = runner.invoke(app, BASE + extra)
        assert res.exit_code == 2, (extra, res.output)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (extra, res.output)


MOE = ["simulate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H200", "--max-model-len", "4096",
       "--enable-expert-parallel", "--num-prompts", "12", "--random-input-len", "300", "--random-output-len", "4"]


def test_pdd_moe_roles_with_dp_run_in_lockstep(tmp_path):
    res = runner.invoke(app, MOE + ["--architecture", "pdd", "--prefill-dp", "2", "--decode-dp", "2",
                                    "--decode-replicas", "2", "--output-dir", str(tmp_path),
                                    "--batch-trace", str(tmp_path / "bt.parquet")])
    assert res.exit_code == 0, res.output
    assert ("prefill 1 replica(s) of DP2 in lockstep x TP1 x PP1 on 2 x H200" in res.output
            and "decode 2 replica(s) of DP2 in lockstep x TP1 x PP1 on 4 x H200" in res.output), res.output
    assert "Successful requests:                     12" in res.output
    reqs = pq.read_table(tmp_path / "requests.parquet").to_pydict()
    assert set(reqs["prefill_replica"]) == {0, 1} and set(reqs["decode_replica"]) == {0, 1, 2, 3}
    trace = pq.read_table(tmp_path / "bt.parquet").to_pydict()
    assert {(role, rank) for role, rank in zip(trace["role"], trace["dp_rank"])} == {
        ("P", 0), ("P", 1), ("D", 0), ("D", 1)}


def test_issue_misconfigurations_get_one_line_errors():
    """EP not dividing the experts, a role with no replicas, a prefill KV cache smaller than one
    prompt, a role on an unknown GPU: each through `frontier simulate`, in every architecture."""
    dense = BASE[:-6] + ["--num-prompts", "4", "--random-input-len", "100", "--random-output-len", "4"]
    moe = MOE[:-6] + ["--num-prompts", "4", "--random-input-len", "100", "--random-output-len", "4"]
    cases = [
        (moe + ["--data-parallel-size", "3"], "ep=3 must divide num_experts=128"),
        (moe + ["--architecture", "pdd", "--prefill-dp", "3"], "prefill role: ep=3 must divide num_experts=128"),
        (moe + ["--architecture", "pdd", "--decode-dp", "6"], "decode role: ep=6 must divide num_experts=128"),
        (moe + ["--architecture", "afd", "--ffn-ep", "3"], "ffn role: --ffn-ep 3 must divide the 128 experts"),
        (moe + ["--architecture", "afd", "--all2all-backend", "deepep_low_latency"],
         "--all2all-backend deepep_low_latency applies to co-located and P/D engines"),
        (moe + ["--num-replicas", "0"], "--num-replicas must be a positive integer, got 0"),
        (moe + ["--architecture", "pdd", "--prefill-replicas", "0"], "--prefill-replicas must be a positive integer, got 0"),
        (moe + ["--architecture", "pdd", "--decode-replicas", "0"], "--decode-replicas must be a positive integer, got 0"),
        (moe + ["--architecture", "afd", "--attention-replicas", "0"], "--attention-replicas must be a positive integer, got 0"),
        (moe + ["--architecture", "afd", "--ffn-replicas", "0"], "--ffn-replicas must be a positive integer, got 0"),
        (dense + ["--architecture", "pdd", "--prefill-gpu", "L4", "--max-model-len", "131072"],
         "prefill role: vLLM would not start: one request of max_model_len 131072 needs 8192 KV blocks (16.00 GiB) "
         "but 2521 are usable besides the null block; lower --max-model-len or give the KV cache more memory "
         "(--prefill-tp, --prefill-gpu, --gpu-memory-utilization)"),
        (dense + ["--architecture", "afd", "--prefill-gpu", "L4", "--max-model-len", "131072"],
         "prefill role: vLLM would not start: one request of max_model_len 131072 needs 8192 KV blocks"),
        (moe + ["--architecture", "pdd", "--prefill-gpu", "X100"], "prefill role: unknown GPU 'X100'; valid: "),
        (moe + ["--architecture", "pdd", "--decode-gpu", "X100", "--decode-dp", "2"], "decode role: unknown GPU 'X100'"),
        (moe + ["--architecture", "afd", "--attention-gpu", "X100"], "attention role: unknown GPU 'X100'"),
        (moe + ["--architecture", "afd", "--ffn-gpu", "X100"], "ffn role: unknown GPU 'X100'"),
    ]
    for args, needle in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (args, res.output)


def test_afd_moe_attention_dp_and_prefill_dp_run_in_lockstep():
    res = runner.invoke(app, MOE + ["--architecture", "afd", "--prefill-dp", "2", "--attention-dp", "2",
                                    "--ffn-ep", "2"])
    assert res.exit_code == 0, res.output
    assert "attention 1 replica(s) of DP2 in lockstep x TP1 on 2 x H200" in res.output, res.output
    assert "attention/FFN disaggregated on 6 GPUs in total: prefill 2 x H200" in res.output
    assert "Successful requests:                     12" in res.output


def test_num_gpus_is_checked_against_every_architecture():
    """--num-gpus: the total over all roles must match, else a one-line error with the breakdown."""
    afd = ["simulate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H200", "--max-model-len", "4096",
           "--num-prompts", "4", "--random-input-len", "300", "--random-output-len", "4",
           "--architecture", "afd", "--ffn-ep", "4"]
    cases = [
        (BASE + ["-tp", "2", "--num-replicas", "2", "--num-gpus", "3"],
         "error: --num-gpus 3 does not match the deployment, which uses 4 GPUs"),
        (BASE + ["--architecture", "pdd", "--prefill-replicas", "2", "--decode-tp", "2", "--num-gpus", "8"],
         "error: --num-gpus 8 does not match the deployment, which uses prefill 2 + decode 2 = 4 GPUs"),
        (afd + ["--num-gpus", "5"],
         "error: --num-gpus 5 does not match the deployment, which uses prefill 1 + attention 1 + ffn 4 = 6 GPUs"),
        (BASE + ["--num-gpus", "0"], "error: --num-gpus must be a positive integer, got 0"),
    ]
    for args, line in cases:
        res = runner.invoke(app, args)
        assert res.exit_code == 2 and res.output.strip() == line, (args, res.output)
    for args, total in ((BASE + ["-tp", "2", "--num-replicas", "2", "--num-gpus", "4"], "on 4 x H100"),
                        (BASE + ["--architecture", "pdd", "--prefill-replicas", "2", "--decode-tp", "2",
                                 "--num-gpus", "4"], "on 4 GPUs in total"),
                        (afd + ["--num-gpus", "6"], "on 6 GPUs in total")):
        res = runner.invoke(app, args)
        assert res.exit_code == 0 and total in res.output, (args, res.output)


def test_pdd_run_notes_a_moe_kernel_no_table_times(tmp_path):
    # vLLM 0.12 on Hopper: block-FP8 experts at MoE TP < 8 run DeepGEMM's padded grouped GEMM (vllm_version.py);
    # both roles run it, the note is printed and stored once
    res = runner.invoke(app, ["simulate", "--model", "Qwen/Qwen3-235B-A22B-FP8", "--gpu", "H200", "-tp", "2",
                              "--max-model-len", "4096", "--num-prompts", "2", "--random-input-len", "64",
                              "--random-output-len", "4", "--vllm-version", "0.12.0", "--architecture", "pdd",
                              "--decode-tp", "2", "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    notes = [ln for ln in res.output.splitlines() if ln.startswith("note: ")]
    assert len(notes) == 1 and "vLLM 0.12 runs these block-FP8 experts (MoE TP 2 < 8) on DeepGEMM" in notes[0]
    assert json.loads((tmp_path / "summary.json").read_text())["pricing_notes"] == [notes[0][len("note: "):]]
