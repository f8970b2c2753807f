"""Multi-round reasoning sessions (``simulator.workloads.sessions``): rounds chained by the client
after each tool call, their shared content hitting the prefix cache, session affinity, the
session metrics."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from simulator.engine_args import EngineArgs
from simulator.request import Request, RequestSpec
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec, generate_requests, generate_sessions
from simulator.workloads.sessions import Round, Session


def _workload(**kw) -> WorkloadSpec:
    return WorkloadSpec(**{"dataset_name": "reasoning", "num_prompts": 6, "request_rate": 2.0, "reasoning_rounds": 3.0,
                           "reasoning_first_input_len": 1000, "reasoning_round_input_len": 300,
                           "reasoning_round_output_len": 50, "reasoning_answer_len": 80,
                           "reasoning_tool_latency_ms": 250.0, **kw})


def test_sessions_are_seeded_and_long_tailed():
    sessions = generate_sessions(_workload(num_prompts=400, reasoning_max_rounds=8))
    counts = [len(s.rounds) for s in sessions]
    assert min(counts) == 1 and max(counts) == 8 and 2.5 < sum(counts) / 400 < 3.2     # geometric, mean 3, capped
    s = next(s for s in sessions if len(s.rounds) == 3)
    assert [(r.new_tokens, r.output_len, r.tool_latency_s) for r in s.rounds] == [
        (1000, 50, 0.25), (300, 50, 0.25), (300, 80, 0.0)]
    assert generate_sessions(_workload(num_prompts=400, reasoning_max_rounds=8)) == sessions
    firsts = generate_requests(_workload())
    assert [(r.request_id, r.prompt_len, r.session_id) for r in firsts[:2]] == [("0.0", 1000, "0"), ("1.0", 1000, "1")]


def test_a_rounds_prompt_continues_its_sessions_content():
    # round 0: 64 prompt tokens + 20 outputs; round 1 = those 84 tokens + 30 new: its first 5 blocks
    # are round 0's (the session is the content key); another session's are not
    session = Session("s", 0.0, (Round(64, 20, 0.1), Round(30, 10)))
    r0 = Request.from_spec(session.round_spec(0, 0.0, 0), 16)
    for _ in range(20):
        r0.append_output_token()
    r1 = Request.from_spec(session.round_spec(1, 1.0, 84), 16)
    assert (r1.prompt_len, r1.request_id) == (114, "s.1")
    assert r1.block_hashes[:5] == r0.block_hashes[:5] and len(r1.block_hashes) == 7
    other = Request.from_spec(Session("t", 0.0, (Round(64, 20),)).round_spec(0, 0.0, 0), 16)
    assert not set(other.block_hashes) & set(r0.block_hashes)
    with pytest.raises(ValueError, match="a session's round has unique content"):
        RequestSpec("x", 0.0, 4, 1, prompt_token_ids=(1, 2, 3, 4), session_id="s")


def _run(**kw):
    return run_simulation(SimulationSpec(engine=EngineArgs(max_model_len=8192, **kw.pop("engine", {})),
                                         workload=_workload(**kw), debug=True, keep_batch_trace=True))


def test_the_client_sends_each_round_after_the_tool_call_and_it_hits_the_cache():
    result = _run()
    sessions = {s.session_id: s for s in generate_sessions(_workload())}
    rounds = {r.request_id: r for r in result.records}
    assert len(rounds) == sum(len(s.rounds) for s in sessions.values()) == result.summary["completed"]
    for sid, s in sessions.items():
        context = 0
        for k, spec in enumerate(s.rounds):
            rec = rounds[f"{sid}.{k}"]
            assert rec.prompt_len == context + spec.new_tokens
            if k:
                before = rounds[f"{sid}.{k - 1}"]
                assert rec.send_s == pytest.approx(before.finish_s + 0.25, abs=1e-12)
                # the earlier rounds' computed tokens (all but the last sampled one) in whole blocks
                assert rec.num_prefix_hit_tokens == (context - 1) // 16 * 16
            context = rec.prompt_len + rec.output_len
    summary = result.summary
    records = result.records
    finals = [rounds[f"{sid}.{len(s.rounds) - 1}"] for sid, s in sessions.items()]
    attft = [f.first_token_s - sessions[f.request_id.split(".")[0]].arrival_s for f in finals]
    assert summary["sessions_completed"] == 6 and summary["sessions_failed"] == 0
    assert summary["mean_attft_ms"] == pytest.approx(1e3 * sum(attft) / 6, rel=1e-12)
    hidden = sum(r.output_len for r in records if r not in finals)
    assert summary["hidden_planning_tokens"] == hidden
    assert summary["mean_rounds_per_session"] == len(records) / 6


def test_every_round_of_a_session_goes_to_its_first_rounds_replica():
    result = _run(num_prompts=12, engine={"num_replicas": 3})
    cols = result.trace.req_cols
    replica_of: dict[str, set[int]] = {}
    for replica, rid in zip(cols["replica_id"], cols["request_id"]):
        replica_of.setdefault(rid.split(".")[0], set()).add(replica)
    assert all(len(r) == 1 for r in replica_of.values())
    assert {min(r) for r in replica_of.values()} == {0, 1, 2}      # first rounds round-robin over the replicas


@pytest.mark.parametrize("kw, message", [
    ({"reasoning_rounds": 0.5}, "reasoning_rounds=0.5 is invalid; need a mean >= 1"),
    ({"reasoning_answer_len": 0}, "reasoning_answer_len=0 is invalid"),
    ({"reasoning_tool_latency_ms": -1.0}, "reasoning_tool_latency_ms=-1.0 is invalid"),
    ({"dataset_path": "x.jsonl"}, "is not used by dataset_name='reasoning'"),
])
def test_bad_reasoning_settings_are_one_line(kw, message):
    with pytest.raises(ValueError, match=message):
        _workload(**kw)


def test_sessions_outside_colocated_or_pd_vllm_are_refused_and_the_cli_prints_them():
    for args, message in [(["--architecture", "afd", "--model", "Qwen/Qwen3-30B-A3B"],
                           "with --architecture afd is not simulated"),
                          (["--engine", "sglang"], "with --engine sglang is not simulated")]:
        res = CliRunner().invoke(app, ["simulate", "--dataset-name", "reasoning", "--num-prompts", "3", *args])
        assert res.exit_code == 2 and message in res.output, res.output
    res = CliRunner().invoke(app, ["simulate", "--dataset-name", "reasoning", "--num-prompts", "5", "--request-rate",
                                   "1", "--reasoning-first-input-len", "500", "--reasoning-tool-latency-ms", "100"])
    assert res.exit_code == 0, res.output
    assert "sessions: 5 completed, 0 failed" in res.output and "answer-visible TTFT" in res.output


def test_pd_sessions_keep_their_prefill_and_decode_replicas_and_hit_the_prefill_cache():
    from simulator.control_plane import PddSpec, RoleLayout
    result = run_simulation(SimulationSpec(
        engine=EngineArgs(max_model_len=8192), workload=_workload(num_prompts=8), debug=True, architecture="pdd",
        pdd=PddSpec(prefill=RoleLayout("prefill", replicas=2), decode=RoleLayout("decode", replicas=2))))
    assert result.summary["sessions_completed"] == 8
    rounds = {r.request_id: r for r in result.records}
    routes: dict[str, set[tuple[int, int]]] = {}
    for rid, rec in rounds.items():
        sid, k = rid.split(".")
        routes.setdefault(sid, set()).add((rec.prefill_replica, rec.decode_replica))
        if int(k):     # P computed the earlier round's prompt (its outputs were decoded on D)
            assert rec.num_prefix_hit_tokens == rounds[f"{sid}.{int(k) - 1}"].prompt_len // 16 * 16
    assert all(len(r) == 1 for r in routes.values())
    assert len({next(iter(r)) for r in routes.values()}) > 1        # the sessions spread over the replicas


def test_a_session_trace_replays_its_rounds(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"session_id": "a", "arrival_time_s": 0.5, "rounds": [{"input_len": 2000, "output_len": 100, '
                    '"tool_latency_s": 0.3}, {"input_len": 500, "output_len": 50}]}\n'
                    '{"arrival_time_s": 0, "rounds": [{"input_len": 800, "output_len": 30}]}\n')
    spec = WorkloadSpec(dataset_name="session_trace", dataset_path=str(path), num_prompts=10)
    assert generate_sessions(spec) == [Session("1", 0.0, (Round(800, 30),)),
                                       Session("a", 0.5, (Round(2000, 100, 0.3), Round(500, 50)))]
    result = run_simulation(SimulationSpec(engine=EngineArgs(max_model_len=8192), workload=spec, debug=True))
    rounds = {r.request_id: r for r in result.records}
    assert rounds["a.1"].prompt_len == 2100 + 500 and rounds["a.1"].num_prefix_hit_tokens == 2099 // 16 * 16
    assert rounds["a.1"].send_s == pytest.approx(rounds["a.0"].finish_s + 0.3, abs=1e-12)
    assert result.summary["sessions_completed"] == 2 and result.summary["hidden_planning_tokens"] == 100
    for text, message in [('{"arrival_time_s": 0}\n', "row 0: need arrival_time_s and a non-empty list of rounds"),
                          ('{"arrival_time_s": 0, "rounds": [{"input_len": 0, "output_len": 1}]}\n',
                           "input_len=0 is invalid"),
                          ('{"arrival_time_s": 0, "rounds": [{"input_len": 5, "output_len": 1, "tool_latency_s": -1}]}\n',
                           "tool_latency_s=-1 is invalid"),
                          ('{"session_id": 1, "arrival_time_s": 0, "rounds": [{"input_len": 5, "output_len": 1}]}\n'
                           '{"session_id": "1", "arrival_time_s": 0, "rounds": [{"input_len": 5, "output_len": 1}]}\n',
                           "session_id='1' repeats")]:
        path.write_text(text)
        with pytest.raises(ValueError, match=message):
            generate_sessions(spec)
    with pytest.raises(ValueError, match="needs dataset_path"):
        WorkloadSpec(dataset_name="session_trace")
