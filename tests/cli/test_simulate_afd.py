"""`frontier simulate --architecture afd`: one run with per-role outputs, one-line errors."""

import json

import pyarrow.parquet as pq
from typer.testing import CliRunner

from frontier.cli import app

runner = CliRunner()
BASE = ["simulate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H100", "--max-model-len", "4096",
        "--num-prompts", "16", "--random-input-len", "256", "--random-output-len", "8"]


def test_afd_run_prints_roles_and_writes_afd_columns(tmp_path):
    res = runner.invoke(app, BASE + [
        "--architecture", "afd", "--attention-dp", "2", "--ffn-ep", "2", "--ffn-gpu", "H20",
        "--afd-lanes", "2", "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "attention/FFN disaggregated on 5 GPUs in total" in res.output
    assert "ffn 1 replica(s) of TP1 x EP2 on 2 x H20" in res.output
    assert "Successful requests:                     16" in res.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["architecture"] == "afd" and summary["afd_lanes"] == 2
    assert summary["ffn_busy_fraction"] > summary["attention_busy_fraction"] > 0
    steps = pq.read_table(tmp_path / "steps.parquet").to_pydict()
    assert set(steps["role"]) == {"P", "A"}
    assert {"afd_a_busy_s", "afd_f_busy_s", "afd_xfer_s", "afd_ep_wait_s", "afd_lanes"} <= set(steps)


def test_afd_bad_inputs_get_one_line_errors():
    cases = [
        (["--architecture", "afd", "--ffn-ep", "3"], "--ffn-ep 3 must divide the 128 experts"),
        (["--architecture", "afd", "--ffn-gpu", "X100"], "ffn role: unknown GPU 'X100'"),
        (["--architecture", "afd", "--attention-replicas", "0"], "--attention-replicas must be a positive integer"),
        (["--architecture", "afd", "--afd-lanes", "0"], "--afd-lanes must be a positive integer"),
        (["--ffn-ep", "2"], "need --architecture afd"),
        (["--architecture", "afd", "--decode-tp", "2"], "--decode-* flags need --architecture pdd"),
    ]
    for extra, needle in cases:
        res = runner.invoke(app, BASE + extra)
        assert res.exit_code == 2, (extra, res.output)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], (extra, res.output)
