"""Perfetto / Chrome trace export: exact events for a 2-step run, and the CLI file."""

import json

from typer.testing import CliRunner

from frontier.cli import app
from simulator.metrics import RequestRecord
from simulator.perfetto import trace_events
from simulator.trace import BatchTrace


def test_two_steps_and_one_transfer_exact_events():
    trace = BatchTrace(keep_requests=False)
    trace.add_step(0, 0, 0, 0.0, 0.0125, ("a", "b"), (100, 20), (0, 0), 128, "PIECEWISE", 9, 99, 1, 0, "P")
    trace.add_step(3, 0, 7, 0.0125, 0.02, ("a",), (1,), (100,), 1, "FULL", 10, 99, 0, 0, "D")
    rec = RequestRecord("a", 0.0, 0.0, 0.02, 0.02, 100, 1, (0.02,), prefill_replica=0, decode_replica=3,
                        kv_transfer_s=0.0005, kv_transfer_start_s=0.0125)
    plain = RequestRecord("c", 0.0, 0.0, 0.02, 0.02, 10, 1, (0.02,))     # co-located: no transfer
    events = trace_events(trace.step_cols, [plain, rec])
    assert events == [
        {"name": "process_name", "ph": "M", "pid": 2, "tid": 0, "args": {"name": "P prefill replicas"}},
        {"name": "process_sort_index", "ph": "M", "pid": 2, "tid": 0, "args": {"sort_index": 2}},
        {"name": "thread_name", "ph": "M", "pid": 2, "tid": 0, "args": {"name": "replica 0"}},
        {"name": "thread_sort_index", "ph": "M", "pid": 2, "tid": 0, "args": {"sort_index": 0}},
        {"name": "process_name", "ph": "M", "pid": 3, "tid": 0, "args": {"name": "D decode replicas"}},
        {"name": "process_sort_index", "ph": "M", "pid": 3, "tid": 0, "args": {"sort_index": 3}},
        {"name": "thread_name", "ph": "M", "pid": 3, "tid": 3000, "args": {"name": "replica 3"}},
        {"name": "thread_sort_index", "ph": "M", "pid": 3, "tid": 3000, "args": {"sort_index": 3000}},
        {"name": "process_name", "ph": "M", "pid": 100, "tid": 0, "args": {"name": "KV transfers P -> D"}},
        {"name": "process_sort_index", "ph": "M", "pid": 100, "tid": 0, "args": {"sort_index": 100}},
        {"name": "step 0", "cat": "step", "ph": "X", "pid": 2, "tid": 0, "ts": 0.0, "dur": 12500.0,
         "args": {"num_reqs": 2, "num_tokens": 120, "padded_tokens": 128, "cudagraph_mode": "PIECEWISE",
                  "kv_blocks_used": 9, "kv_blocks_total": 99, "num_waiting": 1, "num_preempted": 0}},
        {"name": "step 7", "cat": "step", "ph": "X", "pid": 3, "tid": 3000, "ts": 12500.0, "dur": 7500.0,
         "args": {"num_reqs": 1, "num_tokens": 1, "padded_tokens": 1, "cudagraph_mode": "FULL",
                  "kv_blocks_used": 10, "kv_blocks_total": 99, "num_waiting": 0, "num_preempted": 0}},
        {"name": "a", "cat": "kv_transfer", "pid": 100, "tid": 0, "id": 1, "ph": "b", "ts": 12500.0,
         "args": {"prefill_replica": 0, "decode_replica": 3}},
        {"name": "a", "cat": "kv_transfer", "pid": 100, "tid": 0, "id": 1, "ph": "e", "ts": 13000.0},
    ]


def test_lockstep_dp_ranks_get_their_own_threads():
    trace = BatchTrace(keep_requests=False)
    for dp in (0, 1):
        trace.add_step(2, dp, 0, 0.0, 0.001, ("x",), (1,), (5,), 1, "FULL", 1, 9, 0, 0, "C")
    names = [e["args"]["name"] for e in trace_events(trace.step_cols) if e["name"] == "thread_name"]
    assert names == ["replica 2 dp 0", "replica 2 dp 1"]


def test_cli_writes_a_loadable_trace(tmp_path):
    path = tmp_path / "t.json"
    res = CliRunner().invoke(app, [
        "simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--max-model-len", "4096",
        "--num-prompts", "6", "--random-input-len", "300", "--random-output-len", "4",
        "--architecture", "pdd", "--perfetto", str(path)])
    assert res.exit_code == 0, res.output
    doc = json.loads(path.read_text())
    phases = [e["ph"] for e in doc["traceEvents"]]
    assert phases.count("b") == phases.count("e") == 6
    assert {e["pid"] for e in doc["traceEvents"] if e["ph"] == "X"} == {2, 3}
