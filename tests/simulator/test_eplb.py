"""--enable-eplb: vLLM's expert placement by load, redundant replicas, their weights and routing."""

import json

import numpy as np
import pytest

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from simulator.engine_args import EngineArgs
from simulator.eplb import balanced_packing, eplb_placement, replicate_experts
from simulator.moe_routing import MoeRouter, RoutingSpec, make_router
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


def test_replicas_go_to_the_heaviest_expert_per_replica_and_pack_evenly():
    """[10, 1, 1, 1] in 6 slots on 2 ranks: both extra replicas to expert 0 (10 -> 5 -> 3.33 per
    replica); heaviest first into the lightest open rank: rank 0 {0, 0, 2} = 7.67, rank 1 {0, 1, 3} = 5.67."""
    phy2log, count = replicate_experts(np.array([10.0, 1, 1, 1]), 6)
    assert phy2log.tolist() == [0, 1, 2, 3, 0, 0] and count.tolist() == [3, 1, 1, 1]
    assert balanced_packing(np.array([4.0, 3, 2, 1]), 2)[0].tolist() == [0, 1, 1, 0]
    assert eplb_placement(np.array([10.0, 1, 1, 1]), 6, 2).tolist() == [0, 0, 2, 0, 1, 3]
    assert eplb_placement(np.array([10.0, 1, 1, 1]), 4, 2).tolist() == [0, 3, 1, 2]     # no replicas: a swap
    with pytest.raises(ValueError, match="need at least one slot per expert"):
        eplb_placement(np.ones(4), 3, 1)


def test_a_skewed_trace_is_spread_over_the_ranks(tmp_path):
    """16 experts, the first four 8x as hot, EP 4, top-2, 64 tokens: vLLM's linear map puts them all
    on rank 0 (92 of 128 pairs); EPLB with 4 replicas leaves 33 / 33 / 31 / 31."""
    trace = tmp_path / "load.json"
    trace.write_text(json.dumps([8.0] * 4 + [1.0] * 12))
    spec = RoutingSpec("trace", path=str(trace))
    linear = MoeRouter(spec, 16, 2, 4)
    placed = MoeRouter(spec, 16, 2, 4, placement=eplb_placement(np.array([8.0] * 4 + [1.0] * 12), 20, 4))
    assert linear.rank_pairs(64).tolist() == [92, 12, 12, 12]
    assert placed.rank_pairs(64).tolist() == [33, 33, 31, 31]
    assert placed.rank_loads(64)[0] == (12, 12, 3, 3, 3)        # a hot expert's 23 pairs split 12 / 11
    assert placed.slot_counts(64).sum() == 128 and not placed.balanced


def test_redundant_experts_cost_weight_memory_and_need_eplb():
    model = load_model_spec("deepseek-ai/DeepSeek-V3")
    base = ParallelSpec.from_vllm(dp=8, enable_expert_parallel=True)
    eplb = ParallelSpec.from_vllm(dp=8, enable_expert_parallel=True, enable_eplb=True, num_redundant_experts=32)
    assert (base.local_experts(256), eplb.local_experts(256)) == (32, 36)
    expert = 3 * 7168 * 2048 * model.quant.bytes_per_param("routed_experts")
    assert eplb.local_experts(256) - base.local_experts(256) == 4
    assert model.weight_bytes_per_rank(eplb) - model.weight_bytes_per_rank(base) == pytest.approx(
        4 * model.num_moe_layers * expert, rel=1e-9)
    with pytest.raises(ValueError, match="num_redundant_experts is set to 32 but EPLB is not enabled"):
        ParallelSpec.from_vllm(dp=8, enable_expert_parallel=True, num_redundant_experts=32)
    with pytest.raises(ValueError, match="--enable-eplb needs --enable-expert-parallel"):
        ParallelSpec.from_vllm(dp=8, enable_eplb=True)
    with pytest.raises(ValueError, match="ep=8 must divide num_experts=256 \\+ 4 redundant"):
        ParallelSpec.from_vllm(dp=8, enable_expert_parallel=True, enable_eplb=True,
                               num_redundant_experts=4).check_model(model)


def test_deepseek_groups_are_packed_to_nodes():
    """DeepSeek-V3's 8 expert groups over the 2 nodes of EP 16 (8 GPUs each): the hierarchical policy,
    so every node holds 4 whole groups of 32 experts (plus its replicas)."""
    model = load_model_spec("deepseek-ai/DeepSeek-V3")
    par = ParallelSpec.from_vllm(dp=16, enable_expert_parallel=True, enable_eplb=True, num_redundant_experts=32)
    router = make_router("balanced", model, par, gpus_per_node=8)
    node0 = set(router.placement[:144].tolist())              # 8 ranks x 36 slots
    groups = {e // 32 for e in node0}
    assert len(groups) == 4 and node0 == {e for g in groups for e in range(32 * g, 32 * g + 32)}


def test_eplb_lowers_tpot_under_a_skewed_trace(tmp_path):
    trace = tmp_path / "load.json"
    trace.write_text(json.dumps([20.0] * 8 + [1.0] * 120))

    def tpot(**kw):
        engine = EngineArgs(model="Qwen/Qwen3-30B-A3B", gpu="H100", data_parallel_size=4, enable_expert_parallel=True,
                            max_model_len=4096, **kw)
        recs = run_simulation(SimulationSpec(engine=engine, moe_routing=f"trace:{trace}", workload=WorkloadSpec(
            num_prompts=32, random_input_len=256, random_output_len=16))).records
        return float(np.mean([(r.finish_s - r.first_token_s) / 15 for r in recs]))

    linear, placed, replicas = tpot(), tpot(enable_eplb=True), tpot(enable_eplb=True, num_redundant_experts=8)
    assert placed < linear and replicas < linear
    resolved = EngineArgs(model="Qwen/Qwen3-30B-A3B", data_parallel_size=4, enable_expert_parallel=True,
                          enable_eplb=True, num_redundant_experts=8).resolve(load_model_spec("Qwen/Qwen3-30B-A3B"),
                                                                             get_gpu("H100"))
    assert resolved.parallel.local_experts(128) == 34
