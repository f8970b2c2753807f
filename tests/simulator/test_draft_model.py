"""Speculative decoding with a separate draft model (vLLM's method "draft_model").

What vLLM 0.33 does with it (``simulator.spec_decode``): the scheduler charges one input slot per
scheduled request and keeps plain block hashes (tests/oracle/test_spec_parity.py checks it against
vLLM's own scheduler); the drafter is the whole draft model, run eagerly (model runner V2's
StandaloneARSpeculator); its weights and every layer's KV come off the target's budget.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.comm.backend import make_comm_backend
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig
from simulator.engine_args import EngineArgs
from simulator.request import RequestSpec
from simulator.scheduler_config import SchedulerConfig
from simulator.scheduler_trace import run_spec_scheduler_only
from simulator.simulation import SimulationSpec, build_memory, resolve_engine, run_simulation
from simulator.spec_decode import spec_config_from_vllm, spec_method
from simulator.workload import WorkloadSpec

QWEN_DRAFT = {"model": "Qwen/Qwen3-0.6B", "num_speculative_tokens": 4}


def _draft(rates=(0.7,), **cfg):
    return spec_config_from_vllm({**QWEN_DRAFT, **cfg}, list(rates))


def test_a_model_without_a_method_is_a_draft_model_unless_its_name_says_eagle():
    spec = _draft()
    assert (spec.method, spec.draft.name, spec.draft_vocab_size) == ("draft_model", "Qwen/Qwen3-0.6B", 151936)
    assert (spec.num_draft_slots, spec.eagle_drafter, spec.num_lookahead_tokens) == (1, False, 4)
    assert spec_config_from_vllm({**QWEN_DRAFT, "method": "draft_model"}, [0.7]) == spec
    # vLLM's name rules (SpeculativeConfig.__post_init__)
    assert spec_method(None, "yuhuili/EAGLE-LLaMA3-Instruct-8B") == "eagle"
    assert spec_method(None, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B") == "eagle3"
    assert spec_method("draft_model", "AngelSlim/Qwen3-8B_eagle3") == "eagle3"
    assert spec_method("eagle3", "Qwen/Qwen3-0.6B") == "eagle3"
    eagle = spec_config_from_vllm({"model": "yuhuili/EAGLE-LLaMA3-Instruct-8B", "num_speculative_tokens": 2}, [0.5])
    assert (eagle.method, eagle.draft, eagle.num_draft_slots, eagle.eagle_drafter) == ("eagle", None, 0, True)
    with pytest.raises(ValueError, match="method 'dflash' is not simulated"):
        spec_config_from_vllm({"model": "z-lab/Qwen3-8B-DFlash-b16", "num_speculative_tokens": 2}, [0.5])


@pytest.mark.parametrize("target, tp, pp, cfg, message", [
    ("meta-llama/Llama-3.1-8B", 1, 1, {}, "has vocab_size 151936, meta-llama/Llama-3.1-8B 128256: vLLM requires"),
    ("Qwen/Qwen3-32B", 2, 1, {"draft_tensor_parallel_size": 1}, "draft_tensor_parallel_size 1 with "
                                                                "--tensor-parallel-size 2"),
    ("Qwen/Qwen3-32B", 1, 2, {}, "with pipeline parallelism is not simulated"),
    ("Qwen/Qwen3-32B", 2, 1, {"model": "Qwen/Qwen3-30B-A3B"}, "is a mixture-of-experts model"),
    ("openai/gpt-oss-120b", 2, 1, {"model": "openai/gpt-oss-20b"}, "target openai/gpt-oss-120b's sliding-window "
                                                                  "layers is not simulated"),
    ("Qwen/Qwen3.5-27B", 2, 1, {"model": "Qwen/Qwen3-0.6B"}, "method 'draft_model' with Qwen/Qwen3.5-27B's Gated "
                                                            "DeltaNet layers is not simulated"),
])
def test_draft_models_vllm_refuses_or_that_are_not_modelled_are_refused(target, tp, pp, cfg, message):
    with pytest.raises(ValueError, match=message):
        resolve_engine(EngineArgs(model=target, gpu="H100", tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                  speculative_config=_draft(**cfg)))


def test_an_unknown_draft_model_is_one_line():
    with pytest.raises(ValueError, match=r"^--speculative-config model 'nope/Nope-1B' \(the draft model\): unknown "
                                         r"model 'nope/Nope-1B'"):
        _draft(model="nope/Nope-1B")


def test_the_draft_models_weights_and_every_layers_kv_come_off_the_budget():
    r = resolve_engine(EngineArgs(model="Qwen/Qwen3-32B", gpu="H100", tensor_parallel_size=2,
                                  speculative_config=_draft()))
    m = build_memory(r)
    draft = r.draft_model
    assert (draft.num_layers, draft.kv_bytes_per_token_per_layer(2)) == (28, 2048.0)
    # one block of the shared pool: 16 tokens of the 64 target and the 28 draft layers (2,048 bytes a
    # token and layer on a TP-2 rank each): vLLM's UniformTypeKVCacheSpecs, one full-attention group
    assert m.bytes_per_block == (64 + 28) * 16 * 2048 == 3014656
    assert [(g.kind, len(g.layers)) for g in m.layout.groups] == [("full", 92)]
    target_only = load_model_spec("Qwen/Qwen3-32B").weight_bytes_per_rank(r.parallel)
    assert m.weights_bytes - target_only == draft.weight_bytes_per_rank(r.parallel) == 596101120
    available = m.requested_bytes - m.weights_bytes - m.non_torch_bytes - m.activation_bytes - m.cuda_graph_bytes
    assert m.num_gpu_blocks == int(available // m.bytes_per_block) == 13761
    # the draft's KV takes --kv-cache-dtype as the target's does
    fp8 = resolve_engine(EngineArgs(model="Qwen/Qwen3-32B", gpu="H100", tensor_parallel_size=2, kv_cache_dtype="fp8",
                                    speculative_config=_draft()))
    assert build_memory(fp8).bytes_per_block == 3014656 // 2


def _engines(rates=(0.7,)):
    r = resolve_engine(EngineArgs(model="Qwen/Qwen3-32B", gpu="H100", tensor_parallel_size=2,
                                  speculative_config=_draft(rates)))
    cost = RooflineCostModel(r.gpu, make_comm_backend("analytical", r.gpu))
    engine = BatchEngine(r.model, r.parallel, r.gpu, cost, r.cudagraph_config(), spec=r.args.speculative_config,
                         draft_model=r.draft_model)
    eager = CudaGraphConfig.from_vllm(r.max_num_seqs, r.max_num_batched_tokens, enforce_eager=True,
                                      sm_version=r.gpu.sm_version)
    alone = BatchEngine(r.draft_model, ParallelSpec(tp=2), r.gpu, cost, eager)     # the draft model served eagerly
    return engine, alone


def test_the_drafter_is_the_whole_draft_model_run_eagerly():
    engine, alone = _engines()
    new, ctx = (5, 5, 300), (100, 200, 0)
    # pass 1: every request's tokens plus the sampled one; passes 2-4: one token a request, contexts growing
    first = alone.step_cost(BatchShape((6, 6, 301), ctx)).duration_s
    later = [alone.step_cost(BatchShape((1, 1, 1), (106 + j, 206 + j, 301 + j))).duration_s for j in range(3)]
    assert alone.step_cost(BatchShape((6, 6, 301), ctx)).cudagraph_mode == "NONE"
    assert engine.draft_time_s(BatchShape(new, ctx, 8, 1), "FULL", 16) == pytest.approx(first, rel=1e-12)
    assert engine.draft_time_s(BatchShape(new, ctx, 8, 4), "FULL", 16) == pytest.approx(first + sum(later), rel=1e-12)
    # the step prices it after the target's forward (and the verified drafts' logits rows)
    bare = engine.step_cost(BatchShape(new, ctx, 8, 0)).duration_s
    assert engine.step_cost(BatchShape(new, ctx, 8, 4)).duration_s - bare == pytest.approx(first + sum(later),
                                                                                              rel=1e-9)


def test_every_scheduled_request_costs_one_input_slot():
    # four 8-token prompts (k = 2, nothing accepted) under a 14-token budget: with the draft model's
    # slot every scheduled request costs its tokens + 1, so r1's first chunk is 14 - 9 - 1 = 4 tokens,
    # not 6, and once three decodes of 1 + 2 tokens hold 12 of the 14, r3 gets 14 - 12 - 1 = 1 a step
    reqs = [RequestSpec(f"r{i}", 0.0, 8, 6) for i in range(4)]

    def run(slots: int):
        cfg = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=14, max_model_len=256, async_scheduling=False,
                              num_speculative_tokens=2, num_lookahead_tokens=2, num_draft_slots=slots,
                              eagle_drafter=not slots, enable_prefix_caching=False)
        return run_spec_scheduler_only(reqs, cfg, 100, lambda r, c, d: 0)

    assert run(1)[:5] == [{"r0": (8, 0), "r1": (4, 0)}, {"r0": (3, 2), "r1": (4, 0), "r2": (4, 0)},
                          {"r0": (3, 2), "r1": (3, 2), "r2": (4, 0)},
                          {"r0": (3, 2), "r1": (3, 2), "r2": (3, 2), "r3": (1, 0)},
                          {"r0": (3, 2), "r1": (3, 2), "r2": (3, 2), "r3": (1, 0)}]
    assert run(0)[:2] == [{"r0": (8, 0), "r1": (6, 0)}, {"r0": (3, 2), "r1": (2, 0), "r2": (8, 0), "r3": (1, 0)}]
    with pytest.raises(ValueError, match="num_draft_slots=1 without speculative decoding"):
        SchedulerConfig(num_draft_slots=1)


def _run(spec, architecture="colocated"):
    return run_simulation(SimulationSpec(
        engine=EngineArgs(model="Qwen/Qwen3-32B", gpu="H100", tensor_parallel_size=2, max_model_len=4096,
                          speculative_config=spec),
        workload=WorkloadSpec(dataset_name="random", num_prompts=30, random_input_len=500, random_output_len=100),
        max_concurrency=8, architecture=architecture, debug=True))


def test_a_simulation_with_a_draft_model_verifies_its_drafts():
    plain, drafted = _run(None), _run(_draft((0.8,)))
    s = drafted.summary
    assert s["completed"] == 30 and s["spec_num_drafts"] > 0
    assert s["spec_num_draft_tokens"] == 4 * s["spec_num_drafts"]
    assert s["spec_per_position_acceptance_rate"] == pytest.approx([0.8, 0.64, 0.512, 0.41], abs=0.05)
    assert s["mean_tpot_ms"] < plain.summary["mean_tpot_ms"]
    assert drafted.memory.num_gpu_blocks < plain.memory.num_gpu_blocks
    pd = _run(_draft((0.8,)), architecture="pdd")
    assert pd.summary["completed"] == 30 and pd.summary["spec_num_drafts"] > 0
    # a P/D pull moves the draft model's KV too: 64 target + 28 draft layers, 2,048 bytes a token each
    from simulator.control_plane import kv_pull
    prefill, decode = pd.roles
    assert kv_pull(decode.resolved.model, prefill, decode).full_bytes_per_token == (64 + 28) * 2048


def test_the_cli_simulates_and_sizes_a_draft_model():
    cfg = json.dumps(QWEN_DRAFT)
    res = CliRunner().invoke(app, ["simulate", "--model", "Qwen/Qwen3-32B", "--tensor-parallel-size", "2",
                                   "--max-model-len", "4096", "--num-prompts", "10", "--random-input-len", "200",
                                   "--random-output-len", "20", "--speculative-config", cfg,
                                   "--spec-acceptance-rate", "0.7"])
    assert res.exit_code == 0, res.output
    assert "speculative decoding (draft_model, 4 drafts): mean acceptance length" in res.output
    mem = CliRunner().invoke(app, ["memory", "--model", "Qwen/Qwen3-32B", "--gpu", "H100", "--tensor-parallel-size",
                                   "2", "--speculative-config", cfg])
    assert mem.exit_code == 0, mem.output
    assert "3014656 bytes per block" in mem.output and "groups 92 full layers" in mem.output
    assert "of which draft model             0.56 GiB" in mem.output
    bad = CliRunner().invoke(app, ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--num-prompts", "5",
                                   "--speculative-config", cfg, "--spec-acceptance-rate", "0.7"])
    assert bad.exit_code == 2 and bad.output.startswith("error: draft model 'Qwen/Qwen3-0.6B' has vocab_size 151936")


def test_a_draft_of_fewer_positions_lowers_max_model_len(tmp_path):
    # vLLM's _limit_max_model_len_to_draft (model runner V2): the engine serves at most the draft's length
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024, "intermediate_size": 3072,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 28,
        "vocab_size": 151936, "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "tie_word_embeddings": True}))
    spec = spec_config_from_vllm({"model": str(tmp_path), "num_speculative_tokens": 2}, [0.7])
    assert spec.draft.max_position_embeddings == 8192
    r = resolve_engine(EngineArgs(model="Qwen/Qwen3-32B", gpu="H100", tensor_parallel_size=2, speculative_config=spec))
    assert r.max_model_len == 8192
    longer = resolve_engine(EngineArgs(model="Qwen/Qwen3-32B", gpu="H100", tensor_parallel_size=2,
                                       max_model_len=16384, speculative_config=spec))
    assert longer.max_model_len == 8192
    assert resolve_engine(EngineArgs(model="Qwen/Qwen3-32B", gpu="H100", tensor_parallel_size=2,
                                     speculative_config=_draft())).max_model_len == 40960
