"""MoE routing: balanced and skewed loads, the slowest EP rank, determinism, wiring into steps."""

import json

import numpy as np
import pytest

from frontier.gpu import GpuSpec, get_gpu
from frontier.model_spec import ModelSpec, load_model_spec
from frontier.ops import CommOp, MoeOp
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig
from simulator.engine_args import ALL2ALL_PRICED_AS, EngineArgs
from simulator.moe_routing import MoeRouter, RoutingSpec, allocate_pairs, make_router
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec

H100 = GpuSpec(name="H100-SXM", memory_bytes=85520809984, hbm_bw_bytes_per_s=3.35e12, bf16_flops=989e12,
               fp8_flops=1979e12, fp4_flops=0, fp32_flops=67e12, nvlink_bw_bytes_per_s=450e9, network_bw_bytes_per_s=50e9,
               gpus_per_node=8, price_per_hour_usd=0.0, sm_version=90, source="test")
MOE = ModelSpec(name="toy-moe", architecture="Qwen3MoeForCausalLM", hidden_size=2048, num_layers=48,
                num_attention_heads=32, num_kv_heads=4, head_dim=128, intermediate_size=0, vocab_size=151936,
                tie_word_embeddings=False, max_position_embeddings=40960, num_experts=128,
                num_experts_per_tok=8, moe_intermediate_size=768)
BALANCED, SKEWED = RoutingSpec.parse("balanced"), RoutingSpec.parse("power_law:1.2")


def test_parse():
    assert SKEWED == RoutingSpec("power_law", alpha=1.2)
    assert RoutingSpec.parse("trace:/x.json") == RoutingSpec("trace", path="/x.json")
    assert RoutingSpec.parse("random") == RoutingSpec("random")
    for bad in ("zipf", "power_law", "power_law:-1", "balanced:2", "trace:", "random:1"):
        with pytest.raises(ValueError, match="moe-routing"):
            RoutingSpec.parse(bad)
    for bad, shown in (("power_law:0", "0.0"), ("power_law:inf", "inf"), ("power_law:nan", "nan")):
        with pytest.raises(ValueError, match=rf"power_law:{shown}: the exponent must be a finite number > 0"):
            RoutingSpec.parse(bad)                      # numbers, out of range
    with pytest.raises(ValueError, match="needs a number"):
        RoutingSpec.parse("power_law:x")


def test_balanced_gives_equal_loads():
    r = MoeRouter(BALANCED, 128, 8, ep=8)
    for tokens in (3, 16, 1000):
        per_rank = r.rank_pairs(tokens)
        assert per_rank.sum() == tokens * 8 and per_rank.max() - per_rank.min() <= 1
        assert sum(r.slowest_rank(tokens)) == -(-tokens * 8 // 8)       # ceil(pairs / ep)
    assert r.rank_pairs(16).tolist() == [16] * 8 and set(r.expert_counts(16)) == {1}


def test_power_law_max_load_exceeds_balanced_and_respects_caps():
    bal, skew = MoeRouter(BALANCED, 128, 8, ep=8), MoeRouter(SKEWED, 128, 8, ep=8, seed=0)
    for tokens in (64, 512, 4096):
        counts = skew.expert_counts(tokens)
        assert counts.sum() == tokens * 8 and counts.max() <= tokens and counts.min() >= 0
        assert skew.rank_pairs(tokens).max() > bal.rank_pairs(tokens).max()
        assert sum(skew.slowest_rank(tokens)) == skew.rank_pairs(tokens).max()


def test_power_law_draws_are_the_ones_calibration_featurizes():
    """The router draws with the sampler calibration uses for AIC's power_law rows, so the busiest
    rank's (max, variance) over seeds averages to the rows' features (features.power_law_rank_stats)."""
    from calibration.features import power_law_rank_stats
    for tokens, experts, topk, ep in ((1024, 128, 4, 1), (64, 256, 8, 8), (4, 256, 8, 1)):
        busiest = [np.array(max(MoeRouter(RoutingSpec("power_law", alpha=1.01), experts, topk, ep, seed=s)
                                .rank_loads(tokens), key=sum), dtype=float) for s in range(64)]
        mx, var = np.mean([(b.max(), b.var()) for b in busiest], axis=0)
        want_mx, want_var = power_law_rank_stats(tokens, experts, topk, ep, 1.01)
        assert abs(mx / want_mx - 1) < 0.04 and abs(var / want_var - 1) < 0.06
    counts = MoeRouter(RoutingSpec("power_law", alpha=1.01), 128, 4, 1, seed=0).expert_counts(1024)
    assert (int(counts.sum()), int(counts.max()), int((counts > 0).sum())) == (4096, 203, 116)
    flat = MoeRouter(RoutingSpec("power_law", alpha=1.0), 128, 4, 2, seed=0).expert_counts(300)  # log-uniform
    assert (int(flat.sum()), int(flat.max()), int((flat > 0).sum())) == (1200, 46, 101)


def test_random_routing_picks_distinct_experts_per_token():
    r = MoeRouter(RoutingSpec("random"), 128, 4, ep=4, seed=0)
    for tokens in (1, 32, 64):       # exact draws: k distinct experts per token
        counts = r.expert_counts(tokens)
        assert counts.sum() == tokens * 4 and counts.max() <= tokens and counts.min() >= 0
    assert (r.expert_counts(1) <= 1).all() and (r.expert_counts(1) > 0).sum() == 4
    # fewer distinct experts than balanced's min(E, pairs): E(1 - (1 - k/E)^T) = 81.5 at T = 32
    mean_active = np.mean([(MoeRouter(RoutingSpec("random"), 128, 4, 1, seed=s).expert_counts(32) > 0).sum()
                           for s in range(200)])
    assert 80.0 < mean_active < 83.0
    assert (MoeRouter(BALANCED, 128, 4, 1).expert_counts(32) > 0).sum() == 128
    big = r.expert_counts(5000)      # multinomial above RANDOM_EXACT_PAIRS
    assert big.sum() == 20000 and big.max() <= 5000 and (big > 0).all()
    assert np.array_equal(big, MoeRouter(RoutingSpec("random"), 128, 4, ep=4, seed=0).expert_counts(5000))


def test_deterministic_given_the_seed_and_independent_of_call_order():
    a, b = MoeRouter(SKEWED, 128, 8, 4, seed=7), MoeRouter(SKEWED, 128, 8, 4, seed=7)
    first = [a.slowest_rank(t) for t in (100, 50, 7)]
    second = [b.slowest_rank(t) for t in (7, 50, 100)][::-1]
    assert first == second
    other = MoeRouter(SKEWED, 128, 8, 4, seed=8)
    assert not np.array_equal(other.expert_counts(100), a.expert_counts(100))


def test_trace_weights(tmp_path):
    w = [4.0] + [1.0] * 7
    path = tmp_path / "load.json"
    path.write_text(json.dumps({"expert_load": w}))
    r = MoeRouter(RoutingSpec.parse(f"trace:{path}"), 8, 2, ep=2)
    counts = r.expert_counts(100)                 # 200 pairs; expert 0 wants 4/11 -> 72.7, cap 100
    assert counts.tolist() == [73, 19, 18, 18, 18, 18, 18, 18]   # largest remainder, ties -> lower index
    assert r.rank_pairs(100).tolist() == [128, 72]
    (tmp_path / "short.txt").write_text("1 2 3")
    with pytest.raises(ValueError, match="need 8"):
        MoeRouter(RoutingSpec.parse(f"trace:{tmp_path / 'short.txt'}"), 8, 2, ep=2)


def test_trace_weight_files_that_hold_no_weights_are_named(tmp_path):
    """Each was a bare decoder message, a KeyError or "could not convert string to float" before."""
    cases = {"bin.json": (b"\xcb\x00", "is not a UTF-8 text file (byte 0)"),
             "broken.json": (b'{"expert_load": [1,', "is not valid JSON: Expecting value at line 1 column 20"),
             "other.json": (b'{"load": [1, 2]}', 'holds a JSON object without "expert_load" (a list of weights)'),
             "words.txt": (b"1 2 abc", "holds no list of expert weights (could not convert string to float: 'abc')"),
             "junk.npy": (b"\x93NUMPY", "is not a .npy array of numbers (")}
    for name, (content, want) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ValueError) as err:
            MoeRouter(RoutingSpec.parse(f"trace:{path}"), 8, 2, ep=2)
        assert str(err.value).startswith(f"--moe-routing trace file {str(path)!r} {want}"), str(err.value)


def test_allocate_pairs_water_fills_the_cap():
    assert allocate_pairs(np.array([100.0, 1.0, 1.0]), 6, 3).tolist() == [3, 2, 1]
    assert allocate_pairs(np.array([1.0, 1.0, 1.0]), 7, 3).tolist() == [3, 2, 2]


def _engine(parallel, router=None, all2all="allgather_reducescatter"):
    cg = CudaGraphConfig.from_vllm(256, 8192, False, H100.sm_version)
    return BatchEngine(MOE, parallel, H100, RooflineCostModel(H100), cg, moe_router=router, all2all_backend=all2all)


def _moe_op(engine, m):
    return next(op for op, _ in engine.layer_ops(m) if isinstance(op, MoeOp))


def test_ep_step_is_priced_on_the_slowest_rank():
    par = ParallelSpec.from_vllm(tp=8, enable_expert_parallel=True)
    skew = MoeRouter(SKEWED, 128, 8, par.ep, seed=1)
    model = RooflineCostModel(H100)
    for m in (512, 16):                 # prefill: compute-bound; decode: weight-bound
        op = _moe_op(_engine(par, skew), m)
        ranks = [MoeOp(m, 128, 16, 8, 2048, 768, max(sum(r), 1), tokens_per_expert=r) for r in skew.rank_loads(m)]
        assert op.tokens_per_expert in skew.rank_loads(m)
        assert model.kernel_time_s(op) == max(model.kernel_time_s(r) for r in ranks)
    assert _moe_op(_engine(par, skew), 512).tokens_per_expert == skew.slowest_rank(512)
    batch = BatchShape((512,), (0,))
    balanced = _engine(par).step_cost(batch).duration_s
    assert _engine(par, MoeRouter(BALANCED, 128, 8, par.ep)).step_cost(batch).duration_s == balanced
    assert _engine(par, skew).step_cost(batch).duration_s > balanced


def test_an_idle_ep_rank_is_not_priced(tmp_path):
    """A rank no pair reaches does no expert work: the engine prices only the loads of ranks with
    pairs (a calibrated model, asked about an empty rank, answers out of its rows' range)."""
    path = tmp_path / "w.json"
    path.write_text(json.dumps([1.0] * 64 + [0.0] * 64))    # experts 64..127 (ranks 4..7 of 8) never chosen
    par = ParallelSpec.from_vllm(tp=8, enable_expert_parallel=True)
    router = MoeRouter(RoutingSpec.parse(f"trace:{path}"), 128, 8, par.ep)
    assert sum(map(any, router.rank_loads(16))) == 4
    seen = []

    class Recording(RooflineCostModel):
        def op_times_s(self, ops, timing_mode):
            seen.extend(op for op in ops if isinstance(op, MoeOp))
            return super().op_times_s(ops, timing_mode)

    cg = CudaGraphConfig.from_vllm(256, 8192, False, H100.sm_version)
    BatchEngine(MOE, par, H100, Recording(H100), cg, moe_router=router).step_cost(BatchShape((16,), (0,)))
    assert seen and all(op.routed_pairs == sum(op.tokens_per_expert) > 0 for op in seen)


def test_minimax_tp_wide_qk_norm_all_reduces_the_variances_and_runs_its_kernels():
    """MiniMax-M2's q/k RMSNorm spans the TP-sharded projection: vLLM all-reduces each token's
    q and k variance (fp32, [T, 2]) across TP every layer; at TP 1 there is nothing to reduce.
    vLLM 0.33 (from 0.23): up to 2,048 tokens at TP > 1 one fused kernel (priced as the all-reduce),
    else a variance and an apply kernel around it, which earlier releases ran at every size."""
    import dataclasses

    from frontier.ops import ElementwiseOp
    mm = dataclasses.replace(MOE, tp_wide_qk_norm=True)
    cg = CudaGraphConfig.from_vllm(256, 8192, False, H100.sm_version)

    def ops(model, tp, m, version=(0, 33)):
        eng = BatchEngine(model, ParallelSpec(tp=tp), H100, RooflineCostModel(H100), cg, vllm_version=version)
        return [(op, n) for op, n in eng.layer_ops(m)
                if isinstance(op, CommOp) or getattr(op, "name", "").startswith("qk_norm")]
    hidden = lambda m: (CommOp("all_reduce", m * 2048 * 2, 4, "nvlink"), 96)             # noqa: E731
    qk_ar = lambda m: (CommOp("all_reduce", m * 2 * 4, 4, "nvlink"), 48)                 # noqa: E731
    assert ops(mm, 4, 2048) == [qk_ar(2048), hidden(2048)]                             # the fused kernel
    w4, w1 = (32 // 4 + 4 // 4) * 128, (32 + 4) * 128                                  # q + k per rank
    assert ops(mm, 4, 2049) == [(ElementwiseOp("qk_norm_var", 2049, w4, 2 * w4), 48), qk_ar(2049),
                                (ElementwiseOp("qk_norm_apply", 2049, w4, 4 * w4), 48), hidden(2049)]
    assert ops(mm, 1, 64) == [(ElementwiseOp("qk_norm_var", 64, w1, 2 * w1), 48),
                              (ElementwiseOp("qk_norm_apply", 64, w1, 4 * w1), 48)]
    assert ops(MOE, 4, 64) == [hidden(64)] and ops(MOE, 1, 64) == []
    # before vLLM 0.23 (MiniMaxText01RMSNormTP.forward_qk): the three steps at every size
    assert ops(mm, 4, 16, (0, 22)) == [(ElementwiseOp("qk_norm_var", 16, w4, 2 * w4), 48), qk_ar(16),
                                       (ElementwiseOp("qk_norm_apply", 16, w4, 4 * w4), 48), hidden(16)]
    assert ops(mm, 4, 16, (0, 23)) == [qk_ar(16), hidden(16)]


def test_fp32_router_runs_as_vllm_gate_linear_runs_it():
    """MiniMax-M2's router holds fp32 weights. vLLM 0.33's GateLinear: up to 32 tokens a dedicated
    fp32 kernel on sm_90 / sm_100-family GPUs; above that the bf16x3 GEMM on the sm_100 family and,
    elsewhere (Hopper included), a cast to fp32 and an fp32 F.linear (SGEMM on CUDA cores), which
    is all releases before 0.23 ran, at every size."""
    import dataclasses

    from frontier.ops import ElementwiseOp, GemmOp
    mm = dataclasses.replace(MOE, router_dtype="fp32")
    h, e = MOE.hidden_size, MOE.num_experts

    def router(model, gpu, m, version=(0, 33)):
        cg = CudaGraphConfig.from_vllm(256, 8192, False, gpu.sm_version)
        eng = BatchEngine(model, ParallelSpec(tp=2), gpu, RooflineCostModel(gpu), cg, vllm_version=version)
        return [op for op, n in eng.layer_ops(m) if getattr(op, "name", "").startswith("router")]
    b200, a100 = dataclasses.replace(H100, sm_version=100), dataclasses.replace(H100, sm_version=80)
    assert router(MOE, H100, 64) == [GemmOp("router", 64, e, h, 2.0, 2.0, "bf16")]
    assert router(mm, H100, 32) == [GemmOp("router", 32, e, h, 4.0, 2.0, "fp32")]
    assert router(mm, b200, 32) == [GemmOp("router", 32, e, h, 4.0, 2.0, "fp32")]
    assert router(mm, H100, 33) == [ElementwiseOp("router_cast", 33, h, 6 * h), GemmOp("router", 33, e, h, 4.0, 4.0, "fp32")]
    assert router(mm, a100, 8) == [ElementwiseOp("router_cast", 8, h, 6 * h), GemmOp("router", 8, e, h, 4.0, 4.0, "fp32")]
    assert router(mm, b200, 33) == [GemmOp("router_bf16x3", 33, 3 * e, h, 2.0, 2.0, "bf16")]
    # earlier releases (simulator/vllm_version.py): no bf16x3 before 0.26, no GateLinear before 0.23
    cast_sgemm = lambda m: [ElementwiseOp("router_cast", m, h, 6 * h), GemmOp("router", m, e, h, 4.0, 4.0, "fp32")]  # noqa: E731
    assert router(mm, b200, 33, (0, 25)) == cast_sgemm(33)
    assert router(mm, b200, 33, (0, 26)) == [GemmOp("router_bf16x3", 33, 3 * e, h, 2.0, 2.0, "bf16")]
    assert router(mm, b200, 32, (0, 23)) == [GemmOp("router", 32, e, h, 4.0, 2.0, "fp32")]
    assert router(mm, b200, 32, (0, 22)) == cast_sgemm(32) and router(mm, H100, 1, (0, 19)) == cast_sgemm(1)
    assert router(MOE, H100, 8, (0, 19)) == [GemmOp("router", 8, e, h, 2.0, 2.0, "bf16")]
    # the SGEMM at the fp32 CUDA-core rate: 8,192 tokens, 2 x 8192 x 128 x 2048 FLOP at 0.75 x 67 TFLOP/s
    sgemm = router(mm, H100, 8192)[1]
    assert RooflineCostModel(H100).kernel_time_s(sgemm) == pytest.approx(2.5e-6 + 2 * 8192 * e * h / (0.75 * 67e12), rel=1e-12)


def test_dp_ep_dispatch_and_combine_go_through_the_comm_backend():
    par = ParallelSpec.from_vllm(tp=1, dp=16, enable_expert_parallel=True)     # 2 nodes of 8
    default = [op for op, _ in _engine(par).layer_ops(64) if isinstance(op, CommOp)]
    assert [(o.kind, o.group_size, o.ranks_per_node) for o in default] == [("all_gather", 16, 8), ("reduce_scatter", 16, 8)]
    a2a = [op for op, _ in _engine(par, all2all="deepep_high_throughput").layer_ops(64) if isinstance(op, CommOp)]
    assert [(o.kind, o.group_size) for o in a2a] == [("all_to_all", 16)] * 2
    assert a2a[0].bytes == -(-64 * 16 * 8 // 16) * 2048 * 2                      # slowest rank's routed pairs
    with pytest.raises(ValueError, match="all2all_backend"):
        _engine(par, all2all="deepep")


def test_all2all_backend_flag_picks_the_priced_shape():
    """--all2all-backend takes vLLM 0.33's names; the dispatch / combine kernels (DeepEP, ...) price
    as all_to_all over EP, vLLM's default and its removed naive / pplx as all_gather + reduce_scatter."""
    assert [ALL2ALL_PRICED_AS[EngineArgs(all2all_backend=b).all2all_backend] for b in
            ("allgather_reducescatter", "naive", "pplx", "deepep_high_throughput", "deepep_low_latency",
             "flashinfer_nvlink_one_sided")] == ["allgather_reducescatter"] * 3 + ["all_to_all"] * 3
    with pytest.raises(ValueError, match=r"^--all2all-backend 'passthrough' is not one of allgather_reducescatter, "):
        EngineArgs(all2all_backend="passthrough")        # vLLM binds it itself, not from the CLI

    def run(backend, model="Qwen/Qwen3-30B-A3B"):
        engine = EngineArgs(model=model, gpu="H200", data_parallel_size=2, enable_expert_parallel=True,
                            max_model_len=4096, all2all_backend=backend)
        return run_simulation(SimulationSpec(engine=engine, workload=WorkloadSpec(
            num_prompts=16, random_input_len=256, random_output_len=8))).records

    tpot = lambda recs: [r.finish_s - r.first_token_s for r in recs]     # noqa: E731
    assert tpot(run("deepep_low_latency")) != tpot(run("allgather_reducescatter"))
    assert tpot(run("naive")) == tpot(run("allgather_reducescatter"))
    dense = "meta-llama/Llama-3.1-8B"                     # no experts: nothing to dispatch
    assert tpot(run("mori_high_throughput", dense)) == tpot(run("allgather_reducescatter", dense))


def test_batched_dp_moe_backends_default_the_token_budget_to_256():
    """vLLM 0.20+ (``use_batched_dp_moe``): deepep_low_latency or nixl_ep with EP and DP > 1 default
    max_num_batched_tokens to 256, model or not MoE; a defaulted max_num_seqs follows it down."""
    h100 = get_gpu("H100")
    model = load_model_spec("Qwen/Qwen3-30B-A3B")

    def limits(**kw):
        r = EngineArgs(model=model.name, data_parallel_size=2, enable_expert_parallel=True, **kw).resolve(model, h100)
        return r.max_num_batched_tokens, r.max_num_seqs

    assert limits(all2all_backend="deepep_low_latency") == (256, 256)
    assert limits(all2all_backend="nixl_ep") == (256, 256)
    assert limits(all2all_backend="deepep_low_latency", max_num_seqs=128) == (256, 128)
    assert limits(all2all_backend="deepep_low_latency", max_num_batched_tokens=1024) == (1024, 1024)
    assert limits(all2all_backend="deepep_high_throughput") == (8192, 1024)
    assert limits(all2all_backend="deepep_low_latency", vllm_version="0.19.0") == (8192, 1024)
    no_ep = EngineArgs(model=model.name, data_parallel_size=2, all2all_backend="deepep_low_latency").resolve(model, h100)
    assert no_ep.max_num_batched_tokens == 8192


def test_make_router_and_simulation_spec_validation():
    assert make_router("balanced", MOE, ParallelSpec(), 0).balanced
    assert make_router("power_law:1.2", MOE, ParallelSpec.from_vllm(tp=4, enable_expert_parallel=True), 0).ep == 4
    with pytest.raises(ValueError, match="moe-routing"):
        SimulationSpec(moe_routing="zipf")
    with pytest.raises(ValueError, match="comm-model"):
        SimulationSpec(comm_model="ns3")


class _Recording(RooflineCostModel):
    """A roofline that keeps the MoE and collective ops it prices (``seen``)."""

    seen: list = []

    def op_times_s(self, ops, timing_mode):
        self.seen = self.seen + [op for op in ops if isinstance(op, (MoeOp, CommOp))]
        return super().op_times_s(ops, timing_mode)


def test_lockstep_dp_ranks_pad_to_the_busiest_only_while_every_rank_runs_a_graph_from_0_17():
    """vLLM's dp_utils: from 0.17 the ranks pad to the busiest rank's tokens only when the step's
    CUDA-graph mode (their minimum) is not NONE; a 2,048-token prefill (eager: above the 256
    capture sizes) beside a one-token decode makes both run their own tokens, the MoE gathering
    2,048 + 1 + 2 (two idle ranks' dummy tokens); before 0.17 every rank runs 2,048 eager."""
    par = ParallelSpec.from_vllm(tp=1, dp=4, enable_expert_parallel=True)
    cg = CudaGraphConfig.from_vllm(256, 8192, False, H100.sm_version)
    prefill, decode = BatchShape((2048,), (0,)), BatchShape((1,), (500,))

    def engine(version):
        return BatchEngine(MOE, par, H100, _Recording(H100), cg, vllm_version=version)

    new, old = engine((0, 33)), engine((0, 16))
    padded = [new.step_cost(prefill), new.step_cost(decode)]
    assert [c.cudagraph_mode for c in padded] == ["NONE", "FULL"]
    before = old.lockstep_costs([prefill, decode], 2)
    assert before[0] == old.step_cost(prefill)
    assert (before[1].num_tokens, before[1].padded_tokens, before[1].cudagraph_mode) == (1, 2048, "NONE")
    assert before[1].duration_s == pytest.approx(old._dense_time_s(2048, "launch") + old._head_time_s(1)
                                                 + old._attention_time_s(decode, "launch"), rel=1e-12)
    got = new.lockstep_costs([prefill, decode], 2)
    assert [(c.num_tokens, c.padded_tokens, c.cudagraph_mode) for c in got] == [(2048, 2048, "NONE"), (1, 1, "NONE")]
    assert got[0].duration_s < padded[0].duration_s       # the MoE over 2,051 tokens, not 4 x 2,048
    # a 7-token chunk dispatches PIECEWISE at the capture size 8; unpadded, it runs eager on those 8
    new.cost_model.seen = []
    new.lockstep_costs([prefill, BatchShape((7,), (90,))], 2)     # prefill's step_cost is memoized
    moe = [op.tokens for op in new.cost_model.seen if isinstance(op, MoeOp)]
    comm = [(op.kind, op.bytes) for op in new.cost_model.seen if isinstance(op, CommOp)]
    assert moe == [4 * 8, 2048 + 8 + 2, 2048 + 8 + 2]    # the chunk's own (padded) step_cost, then both ranks
    assert comm[2:] == [("all_gather", 2058 * 2048 * 2), ("reduce_scatter", 2058 * 2048 * 2)] * 2
    same = [decode, BatchShape((1,), (20,))]             # both FULL at 1 token: their own step costs
    assert new.lockstep_costs(same, 2) == [new.step_cost(b) for b in same]


def test_padded_lockstep_ranks_run_the_largest_count_in_the_minimum_graph_mode():
    """Padded, every rank re-dispatches at the largest padded count within the synced (minimum)
    mode: a one-request FULL decode rank beside a 7-token chunk (PIECEWISE at 8) runs PIECEWISE
    at 8 tokens, its attention eager; the chunk's rank keeps its own cost."""
    par = ParallelSpec.from_vllm(tp=1, dp=2, enable_expert_parallel=True)
    cg = CudaGraphConfig.from_vllm(256, 8192, False, H100.sm_version)
    eng = BatchEngine(MOE, par, H100, RooflineCostModel(H100), cg)
    decode, chunk = BatchShape((1,), (4000,)), BatchShape((7,), (90,))
    assert [(eng.step_cost(b).padded_tokens, eng.step_cost(b).cudagraph_mode) for b in (decode, chunk)] == [
        (1, "FULL"), (8, "PIECEWISE")]
    got = eng.lockstep_costs([decode, chunk], 0)
    assert got[1] == eng.step_cost(chunk)
    assert (got[0].num_tokens, got[0].padded_tokens, got[0].cudagraph_mode) == (1, 8, "PIECEWISE")
    assert got[0].duration_s == pytest.approx(eng._dense_time_s(8, "kernel") + eng._head_time_s(1)
                                              + eng._attention_time_s(decode, "launch"), rel=1e-12)
    two = [decode, BatchShape((1, 1), (10, 20))]         # FULL at 1 and at 2: the first runs FULL at 2
    got = eng.lockstep_costs(two, 0)
    assert got[1] == eng.step_cost(two[1]) and (got[0].padded_tokens, got[0].cudagraph_mode) == (2, "FULL")
    assert got[0].duration_s == pytest.approx(eng._dense_time_s(2, "kernel") + eng._head_time_s(1)
                                              + eng._attention_time_s(decode, "kernel"), rel=1e-12)


def test_pipeline_stages_split_a_lockstep_ranks_unpadded_cost():
    """pp > 1: a lockstep rank's stages split the cost lockstep_costs gives it (unpadded here)."""
    par = ParallelSpec(tp=1, pp=2, dp=4, ep=4, ffn_tp=1)
    cg = CudaGraphConfig.from_vllm(256, 8192, False, H100.sm_version)
    eng = BatchEngine(MOE, par, H100, RooflineCostModel(H100), cg)
    prefill, decode = BatchShape((2048,), (0,)), BatchShape((1,), (500,))
    unpadded = eng.lockstep_costs([prefill, decode], 2)
    stages = eng.stage_times_s(prefill, unpadded[0])
    assert len(stages) == 2 and sum(stages) == pytest.approx(unpadded[0].duration_s, rel=1e-12)
    assert sum(eng.stage_times_s(prefill)) == pytest.approx(eng.step_cost(prefill).duration_s, rel=1e-12)
    assert unpadded[0].duration_s < eng.step_cost(prefill).duration_s
