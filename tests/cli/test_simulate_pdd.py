"""`frontier simulate --architecture pdd`: end to end, outputs with roles, one-line errors."""

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


def test_pdd_bad_inputs_get_one_line_errors():
    cases = [
        (["--architecture", "pdd", "--prefill-replicas", "0"], "--prefill-replicas must be a positive integer"),
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
