"""Speculative decoding: --speculative-config, the acceptance draws, the scheduler's verify steps,
the drafter's price, the KV budget, the client's chunks (vLLM parity: tests/oracle/test_spec_parity.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchShape
from simulator.engine_args import EngineArgs
from simulator.request import RequestSpec
from simulator.scheduler_config import SchedulerConfig
from simulator.scheduler_trace import make_scheduler, run_spec_scheduler_only
from simulator.simulation import SimulationSpec, build_memory, resolve_engine, run_simulation
from simulator.spec_decode import DraftAcceptance, SpecDecodeConfig, spec_config_from_vllm, with_draft_layer
from simulator.workload import WorkloadSpec

EAGLE3 = SpecDecodeConfig("eagle3", 3, (0.8, 0.6, 0.45))


def _config(k: int, async_scheduling: bool) -> SchedulerConfig:
    return SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=256, max_model_len=4096,
                           async_scheduling=async_scheduling, num_speculative_tokens=k, num_lookahead_tokens=k,
                           enable_prefix_caching=False)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_one_request_verifies_k_drafts_a_step(async_scheduling):
    # prompt 20, 5 outputs, k = 2: the prefill samples token 1; every later step verifies 2 drafts.
    # Nothing accepted: one token a step (4 more steps). All accepted: 3 tokens a step, so two
    # steps (tokens 2-4, then 5-7 trimmed to 5); async schedules the same here.
    reqs = [RequestSpec("r0", 0.0, 20, 5)]
    none = run_spec_scheduler_only(reqs, _config(2, async_scheduling), 100, lambda r, c, d: 0)
    assert none == [{"r0": (20, 0)}] + [{"r0": (3, 2)}] * 4
    every = run_spec_scheduler_only(reqs, _config(2, async_scheduling), 100, lambda r, c, d: d)
    assert every == [{"r0": (20, 0)}, {"r0": (3, 2)}, {"r0": (3, 2)}]


def test_rejected_drafts_roll_back_and_tokens_come_in_chunks():
    sched = make_scheduler(_config(3, False), 100)
    sched.accept_drafts = lambda r, ctx, d: 1
    r = sched.add_request(RequestSpec("r0", 0.0, 20, 10))
    out = sched.schedule()
    res = sched.update_from_output(out)
    assert res.num_new_tokens == (1,) and r.spec_tokens == 3       # the drafter proposed 3
    out = sched.schedule()
    assert out.num_scheduled_tokens == (4,) and out.spec_tokens == (3,) and out.context_lens == (20,)
    assert r.num_computed_tokens == 24
    res = sched.update_from_output(out)
    # 1 accepted: 2 rejected drafts roll the computed tokens back to 22; tokens 2 and 3 arrive together
    assert r.num_computed_tokens == 22 and r.num_output_tokens == 3 and res.num_new_tokens == (2,)
    assert sched.spec_stats.summary()["spec_num_draft_tokens"] == 3
    assert sched.spec_stats.summary()["spec_num_accepted_tokens"] == 1


def test_acceptance_draws_follow_the_per_position_rates():
    acc = DraftAcceptance(EAGLE3)
    counts = [0, 0, 0, 0]
    for _ in range(20000):
        counts[acc(None, 0, 3)] += 1
    assert counts == [3949, 4024, 2997, 9030]       # seed 0
    rates = [sum(counts[i:]) / 20000 for i in (1, 2, 3)]
    assert rates == pytest.approx([0.8, 0.6, 0.45], abs=0.01)
    again = DraftAcceptance(EAGLE3)
    assert [again(None, 0, 3) for _ in range(6)] == [0, 3, 2, 3, 0, 2]
    assert SpecDecodeConfig("eagle", 3, (0.5,)).acceptance_rates == (0.5, 0.25, 0.125)


@pytest.mark.parametrize("cfg, rates, message", [
    ({"method": "ngram", "num_speculative_tokens": 3}, [0.5], "method 'ngram' is not simulated (its proposals"),
    ({"method": "eagle"}, [0.5], "needs num_speculative_tokens and a method or a draft model"),
    ({"num_speculative_tokens": 2}, [0.5], "needs num_speculative_tokens and a method or a draft model"),
    ({"method": "eagle", "num_speculative_tokens": 2, "x": 1}, [0.5], "key 'x' is not simulated"),
    ({"method": "eagle", "num_speculative_tokens": 2}, None, "needs --spec-acceptance-rate"),
    ({"method": "eagle", "num_speculative_tokens": 2}, [0.5, 0.6], "must not increase with the position"),
    ({"method": "eagle", "num_speculative_tokens": 2}, [0.5, 0.4, 0.3], "must be one value or 2"),
    ({"method": "eagle", "num_speculative_tokens": True}, [0.5], "must be an integer >= 1, got True"),
])
def test_bad_speculative_configs_are_refused(cfg, rates, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        spec_config_from_vllm(cfg, rates)


def test_vllms_synthetic_acceptance_in_the_config_gives_the_rates():
    cfg = {"method": "eagle", "num_speculative_tokens": 3, "rejection_sample_method": "synthetic"}
    rates = spec_config_from_vllm({**cfg, "synthetic_acceptance_rates": [0.8, 0.5, 0.3]}, None)
    assert rates.acceptance_rates == (0.8, 0.5, 0.3)
    # vLLM's minimum-variance schedule for a mean acceptance length
    assert spec_config_from_vllm({**cfg, "synthetic_acceptance_length": 2.5}, None).acceptance_rates == (1.0, 0.5, 0.0)
    assert spec_config_from_vllm({**cfg, "synthetic_acceptance_length": 4}, None).acceptance_rates == (1.0, 1.0, 1.0)
    for bad, message in [({**cfg}, "exactly one of"),
                         ({**cfg, "synthetic_acceptance_length": 4.5}, r"must be in \[1, 4\], got 4.5"),
                         ({**cfg, "synthetic_acceptance_rates": [0.5]}, "list of 3"),
                         ({"method": "eagle", "num_speculative_tokens": 3, "synthetic_acceptance_length": 2},
                          "only valid with rejection_sample_method 'synthetic'"),
                         ({**cfg, "rejection_sample_method": "block"}, "'block' is not simulated")]:
        with pytest.raises(ValueError, match=message):
            spec_config_from_vllm(bad, None)
    with pytest.raises(ValueError, match="give the acceptance once"):
        spec_config_from_vllm({**cfg, "synthetic_acceptance_length": 2}, [0.5])
    res = CliRunner().invoke(app, ["memory", "--speculative-config", json.dumps({**cfg, "synthetic_acceptance_length": 2})])
    assert res.exit_code == 0, res.output
    assert "num_gpu_blocks                    27672" in res.output      # the draft head's layer counted


def test_the_draft_head_adds_one_layer_of_weights_and_kv():
    llama, tp1 = load_model_spec("meta-llama/Llama-3.1-8B"), ParallelSpec.from_vllm(tp=1, pp=1, dp=1)
    drafted = with_draft_layer(llama, SpecDecodeConfig("eagle", 2, (0.5,)))
    assert drafted.weight_bytes_per_rank(tp1) - llama.weight_bytes_per_rank(tp1) == 436224000
    assert drafted.kv_bytes_per_token_per_rank(tp1) == 33 * 4096
    ds = load_model_spec("deepseek-ai/DeepSeek-V3")
    assert ds.num_mtp_layers == 1
    mtp = with_draft_layer(ds, SpecDecodeConfig("mtp", 1, (0.5,)))
    eagle = with_draft_layer(ds, SpecDecodeConfig("eagle3", 1, (0.5,)))
    assert (mtp.num_moe_layers, mtp.num_dense_layers) == (ds.num_moe_layers + 1, ds.num_dense_layers)
    assert (eagle.num_moe_layers, eagle.num_dense_layers) == (ds.num_moe_layers, ds.num_dense_layers + 1)
    plain = resolve_engine(EngineArgs())
    spec = resolve_engine(EngineArgs(speculative_config=EAGLE3))
    assert build_memory(plain).num_gpu_blocks == 28746 and build_memory(spec).num_gpu_blocks == 27672


def test_an_eagle3_heads_draft_vocabulary_is_read_from_its_config(tmp_path):
    from simulator.spec_decode import drafter_note
    (tmp_path / "config.json").write_text('{"hidden_size": 4096, "vocab_size": 128256, "draft_vocab_size": 32000}')
    cfg = {"method": "eagle3", "num_speculative_tokens": 3}
    found = spec_config_from_vllm({**cfg, "model": str(tmp_path)}, [0.5])
    assert found.draft_vocab_size == 32000 and drafter_note(found) is None
    hub = spec_config_from_vllm({**cfg, "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}, [0.5])
    assert hub.draft_vocab_size == 0
    assert drafter_note(hub).startswith("speculative decoding: draft head 'yuhuili/EAGLE3-LLaMA3.1-Instruct-8B' "
                                        "not found")
    assert drafter_note(spec_config_from_vllm({"method": "eagle", "num_speculative_tokens": 3}, [0.5])) is None
    faster = _run(found).summary["mean_tpot_ms"]
    assert faster < _run(hub).summary["mean_tpot_ms"]       # 32k-token draft logits cost less than 128k


def test_mtp_needs_the_checkpoints_mtp_layers():
    with pytest.raises(ValueError, match="Llama-3.1-8B has none"):
        resolve_engine(EngineArgs(speculative_config=SpecDecodeConfig("mtp", 1, (0.5,))))


def test_a_verify_step_costs_its_logits_rows_and_the_drafters_passes():
    from simulator.batch_engine import BatchEngine
    from simulator.cost_model import RooflineCostModel
    from simulator.comm.backend import make_comm_backend
    r = resolve_engine(EngineArgs(speculative_config=EAGLE3))
    engine = BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu, make_comm_backend("analytical", r.gpu)),
                         r.cudagraph_config(), spec=EAGLE3)
    new, ctx = (4, 4, 4), (100, 200, 300)
    bare = engine.step_cost(BatchShape(new, ctx)).duration_s
    rows = engine.step_cost(BatchShape(new, ctx, num_drafts=9)).duration_s
    assert rows - bare == pytest.approx(engine._head_time_s(12) - engine._head_time_s(3), rel=1e-12)
    cost = engine.step_cost(BatchShape(new, ctx, num_drafts=9, draft_passes=3))
    assert cost.cudagraph_mode == "FULL"            # a uniform decode of 1 + k tokens a request
    assert cost.duration_s - rows == pytest.approx(engine.draft_time_s(BatchShape(new, ctx, 9, 3), "FULL",
                                                                       cost.padded_tokens), rel=1e-12)
    one = engine.draft_time_s(BatchShape(new, ctx, 9, 1), "FULL", cost.padded_tokens)
    three = engine.draft_time_s(BatchShape(new, ctx, 9, 3), "FULL", cost.padded_tokens)
    assert three > one > 0 and engine._draft_decode_dispatch(3) == ("FULL", 4)     # passes 2, 3: V2's decode graphs
    assert engine._draft_decode_dispatch(100_000)[0] == "NONE"


def test_a_verify_is_priced_as_a_decode_of_its_context_and_new_tokens():
    from simulator.batch_engine import BatchEngine
    from simulator.cost_model import RooflineCostModel
    from simulator.comm.backend import make_comm_backend
    r = resolve_engine(EngineArgs(speculative_config=EAGLE3))
    cost = RooflineCostModel(r.gpu, make_comm_backend("analytical", r.gpu))
    engine = BatchEngine(r.model, r.parallel, r.gpu, cost, r.cudagraph_config(), spec=EAGLE3)
    (op,) = engine._attention_for((4, 2, 300, 5), (100, 200, 0, 50))
    assert op.decode_ctx == (103, 201) and op.prefill_new == (300, 5) and op.prefill_ctx == (0, 50)
    plain = BatchEngine(r.model, r.parallel, r.gpu, cost, r.cudagraph_config())
    (op,) = plain._attention_for((4, 2, 300, 5), (100, 200, 0, 50))      # without a drafter: prefills
    assert op.decode_ctx == () and op.prefill_new == (4, 2, 300, 5)


def test_lockstep_dp_ranks_each_pay_their_verify_rows_and_the_drafter_at_the_padded_size():
    from simulator.batch_engine import BatchEngine
    from simulator.cost_model import RooflineCostModel
    from simulator.comm.backend import make_comm_backend
    spec = SpecDecodeConfig("eagle3", 2, (0.5,))
    r = resolve_engine(EngineArgs(model="Qwen/Qwen3-30B-A3B", data_parallel_size=2, enable_expert_parallel=True,
                                  speculative_config=spec))
    engine = BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu, make_comm_backend("analytical", r.gpu)),
                         r.cudagraph_config(), spec=spec)
    shapes = [BatchShape((3,) * 4, (100,) * 4, 8, 2), BatchShape((3,) * 9, (50,) * 9, 18, 2)]
    plain = engine.lockstep_costs([BatchShape(b.new_tokens, b.context_lens) for b in shapes], 0)
    drafted = engine.lockstep_costs(shapes, 0)
    assert [c.padded_tokens for c in drafted] == [33, 33] and {c.cudagraph_mode for c in drafted} == {"FULL"}
    for b, c, p in zip(shapes, drafted, plain):     # both ranks padded to 33 tokens: the drafter at 33 too
        assert c.duration_s - p.duration_s == pytest.approx(engine._spec_time_s(b, "FULL", 33), rel=1e-9)


def test_a_moe_dp_deployment_drafts_in_lockstep():
    run = run_simulation(SimulationSpec(
        engine=EngineArgs(model="Qwen/Qwen3-30B-A3B", data_parallel_size=2, enable_expert_parallel=True,
                          max_model_len=4096, speculative_config=SpecDecodeConfig("eagle3", 2, (0.7,))),
        workload=WorkloadSpec(dataset_name="random", num_prompts=24, random_input_len=200, random_output_len=40),
        max_concurrency=8))
    s = run.summary
    assert s["completed"] == 24 and s["spec_num_drafts"] > 0
    assert all(1 <= len(r.token_times_s) < r.output_len for r in run.records if r.output_len > 8)


def _run(spec_config, seed=0, **engine):
    return run_simulation(SimulationSpec(
        engine=EngineArgs(max_model_len=4096, speculative_config=spec_config, **engine),
        workload=WorkloadSpec(dataset_name="random", num_prompts=40, random_input_len=300, random_output_len=60,
                              seed=seed),
        max_concurrency=8, save_detailed=True))


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_scheduler_invariants_hold_with_drafts(async_scheduling):
    # --debug: blocks and tokens conserved at every step, drafts in flight included; a tight KV
    # budget preempts
    run = run_simulation(SimulationSpec(
        engine=EngineArgs(max_model_len=4096, speculative_config=EAGLE3, num_gpu_blocks_override=120,
                          async_scheduling=async_scheduling),
        workload=WorkloadSpec(dataset_name="random", num_prompts=40, random_input_len=300, random_output_len=120),
        max_concurrency=16, debug=True))
    assert run.summary["completed"] == 40 and sum(r.num_preemptions for r in run.records) > 0


def test_a_simulation_with_drafts_is_faster_and_reports_its_acceptance():
    plain, spec = _run(None), _run(EAGLE3)
    assert spec.summary["mean_tpot_ms"] < plain.summary["mean_tpot_ms"]
    s = spec.summary
    # seeded: the same draws every run (40 requests of 300 / 60 tokens at concurrency 8)
    assert (s["spec_num_drafts"], s["spec_num_draft_tokens"], s["spec_num_accepted_tokens"]) == (854, 2562, 1552)
    assert s["spec_num_draft_tokens"] == 3 * s["spec_num_drafts"]
    assert s["spec_mean_acceptance_length"] == 1 + s["spec_num_accepted_tokens"] / s["spec_num_drafts"]
    assert s["spec_per_position_acceptance_rate"] == pytest.approx([0.8, 0.6, 0.45], abs=0.05)
    # one time per output chunk: fewer chunks than tokens, the first chunk is the first token
    rec = spec.records[0]
    assert (len(rec.token_times_s), rec.output_len) == (21, 60) and rec.token_times_s[0] == rec.first_token_s
    assert all(b > a for a, b in zip(rec.token_times_s, rec.token_times_s[1:]))
    again = _run(EAGLE3)         # same seed, same draws: the same requests' times
    assert [r.token_times_s for r in again.records] == [r.token_times_s for r in spec.records]


def _architecture_run(architecture: str, spec_config):
    return run_simulation(SimulationSpec(
        engine=EngineArgs(max_model_len=4096, speculative_config=spec_config),
        workload=WorkloadSpec(dataset_name="random", num_prompts=30, random_input_len=300, random_output_len=60),
        max_concurrency=8, architecture=architecture, debug=True))


def test_pipeline_stages_put_the_drafter_on_the_last_stage():
    from simulator.batch_engine import BatchEngine
    from simulator.cost_model import RooflineCostModel
    from simulator.comm.backend import make_comm_backend
    r = resolve_engine(EngineArgs(pipeline_parallel_size=2, speculative_config=EAGLE3))
    engine = BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu, make_comm_backend("analytical", r.gpu)),
                         r.cudagraph_config(), spec=EAGLE3)
    drafted, plain = BatchShape((4,) * 3, (100, 200, 300), 9, 3), BatchShape((4,) * 3, (100, 200, 300))
    cost = engine.step_cost(drafted)
    first, last = engine.stage_times_s(drafted)
    p_first, p_last = engine.stage_times_s(plain)
    assert first + last == pytest.approx(cost.duration_s, rel=1e-12) and first == pytest.approx(p_first, rel=1e-12)
    assert last - p_last == pytest.approx(engine._spec_time_s(drafted, cost.cudagraph_mode, cost.padded_tokens),
                                          rel=1e-9)
    run = run_simulation(SimulationSpec(
        engine=EngineArgs(max_model_len=4096, pipeline_parallel_size=2, speculative_config=EAGLE3),
        workload=WorkloadSpec(dataset_name="random", num_prompts=20, random_input_len=200, random_output_len=40),
        max_concurrency=8, debug=True))
    assert run.summary["completed"] == 20 and run.summary["spec_num_drafts"] > 0
    with pytest.raises(ValueError, match="is simulated with async scheduling only"):
        resolve_engine(EngineArgs(pipeline_parallel_size=2, async_scheduling=False, speculative_config=EAGLE3))


def test_pd_decode_instances_verify_the_drafts():
    plain, drafted = _architecture_run("pdd", None), _architecture_run("pdd", EAGLE3)
    s = drafted.summary
    assert s["completed"] == 30
    assert (s["spec_num_drafts"], s["spec_num_draft_tokens"], s["spec_num_accepted_tokens"]) == (669, 2007, 1163)
    assert drafted.summary["mean_tpot_ms"] < plain.summary["mean_tpot_ms"]
    with pytest.raises(ValueError, match="--architecture afd is not simulated yet"):
        _architecture_run("afd", EAGLE3)


def test_cli_runs_and_prints_the_spec_decoding_line(tmp_path):
    import pyarrow.parquet as pq
    res = CliRunner().invoke(app, [
        "simulate", "--max-model-len", "4096", "--num-prompts", "20", "--random-input-len", "200",
        "--random-output-len", "20", "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 2}',
        "--spec-acceptance-rate", "0.7", "--batch-trace", str(tmp_path / "bt.parquet")])
    assert res.exit_code == 0, res.output
    assert "speculative decoding (eagle3, 2 drafts): mean acceptance length" in res.output
    trace = pq.read_table(tmp_path / "bt.parquet").to_pydict()     # verifies: 1 + 2 tokens, 2 of them drafts
    rows = list(zip(trace["num_scheduled_tokens"], trace["num_spec_tokens"]))
    assert (3, 2) in rows and all(d <= 2 and d < n for n, d in rows if d)
    bad = CliRunner().invoke(app, ["simulate", "--num-prompts", "5", "--spec-acceptance-rate", "0.5"])
    assert bad.exit_code == 2 and bad.output.strip() == "error: --spec-acceptance-rate needs --speculative-config"


def test_a_scenario_file_gives_the_speculative_config_as_a_mapping(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "num_prompts: 10\nmax_model_len: 4096\nrandom_output_len: 20\n"
        "speculative_config:\n  method: eagle\n  num_speculative_tokens: 2\nspec_acceptance_rate: [0.7, 0.5]\n")
    res = CliRunner().invoke(app, ["simulate", "--config", str(tmp_path / "s.yaml")])
    assert res.exit_code == 0, res.output
    assert "speculative decoding (eagle, 2 drafts)" in res.output


def test_draft_layer_is_a_full_attention_layer_of_a_hybrid_model():
    # gpt-oss-20b's 24 layers alternate sliding / full; the EAGLE head's layer is full attention,
    # so vLLM pads 12 sliding + 13 full to two groups of 13 (its grouping comment)
    from simulator.memory import kv_layout
    model = with_draft_layer(load_model_spec("openai/gpt-oss-20b"), SpecDecodeConfig("eagle3", 2, (0.5,)))
    assert (model.num_layers, model.num_sliding_layers, model.is_sliding_layer(24)) == (25, 12, False)
    groups = kv_layout(model, ParallelSpec(), 16).groups
    assert [(g.kind, len(g.layers)) for g in groups] == [("full", 13), ("sliding", 12)]
    assert 24 in groups[0].layers
