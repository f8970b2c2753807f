"""AFD: the ping-pong schedule (hand-computed timelines), lane split, the AFD engine, end to end."""

import pytest

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.ops import MoeOp
from frontier.parallel import ParallelSpec
from simulator.afd import AfdEngine, AfdRole, AfdSpec, afd_timeline, split_lanes
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.comm.backend import make_comm_backend
from simulator.control_plane import PddSpec, RoleLayout
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec

MOE = "Qwen/Qwen3-30B-A3B"


# ------------------------------------------------------------------ the recurrence
def test_one_layer_one_lane_is_a_chain():
    # head 0.5 | A 0.5-1.5 | S 1.5-3.5 | F 3.5-6.5 | R 6.5-10.5 | tail -> 10.75
    tl = afd_timeline([[1.0]], [[2.0]], [[3.0]], [[4.0]], head_s=0.5, tail_s=0.25)
    assert tl.a_end == ((1.5,),) and tl.f_end == ((6.5,),) and tl.r_end == ((10.5,),)
    assert tl.end_s == 10.75
    assert tl.a_busy_s == 1.75 and tl.f_busy_s == 3.0 and tl.xfer_s == 6.0


def test_one_layer_two_lanes_overlap():
    # lane 0: A 0-1, S 1-2, F 2-4, R 4-5
    # lane 1: A 1-2, S 2-3, F 4-6 (waits for F), R 6-7
    tl = afd_timeline([[1, 1]], [[1, 1]], [[2, 2]], [[1, 1]])
    assert tl.a_end == ((1, 2),) and tl.f_end == ((4, 6),) and tl.r_end == ((5, 7),)
    assert tl.end_s == 7


def test_two_layers_one_lane_serializes():
    # layer 0: A 0-1, S 1-2, F 2-4, R 4-5; layer 1: A 5-6, S 6-7, F 7-9, R 9-10
    tl = afd_timeline([[1], [1]], [[1], [1]], [[2], [2]], [[1], [1]])
    assert tl.a_end == ((1,), (6,)) and tl.f_end == ((4,), (9,)) and tl.r_end == ((5,), (10,))
    assert tl.end_s == 10


def test_two_layers_two_lanes_ping_pong():
    # layer 0: lane 0 A 0-1 S 1-2 F 2-4 R 4-5 | lane 1 A 1-2 S 2-3 F 4-6 R 6-7
    # layer 1: lane 0 A 5-6 S 6-7 F 7-9 R 9-10 | lane 1 A 7-8 S 8-9 F 9-11 R 11-12
    tl = afd_timeline([[1, 1]] * 2, [[1, 1]] * 2, [[2, 2]] * 2, [[1, 1]] * 2)
    assert tl.a_end == ((1, 2), (6, 8))
    assert tl.f_end == ((4, 6), (9, 11))
    assert tl.r_end == ((5, 7), (10, 12))
    assert tl.end_s == 12


def test_two_half_lanes_beat_one_full_lane():
    # Same work split in two lanes: layer 0 ends R 2.5 / 3.5, layer 1 R 5 / 6 -> 6 (vs 10 in one lane)
    half = afd_timeline([[.5, .5]] * 2, [[.5, .5]] * 2, [[1, 1]] * 2, [[.5, .5]] * 2)
    assert half.r_end == ((2.5, 3.5), (5, 6)) and half.end_s == 6
    full = afd_timeline([[1]] * 2, [[1]] * 2, [[2]] * 2, [[1]] * 2)
    assert full.end_s == 10 and half.f_busy_s == full.f_busy_s


def test_timeline_rejects_ragged_inputs():
    with pytest.raises(ValueError, match="same"):
        afd_timeline([[1]], [[1]], [[1], [1]], [[1]])
    with pytest.raises(ValueError, match="lanes"):
        afd_timeline([[1, 1]], [[1]], [[1, 1]], [[1, 1]])


def test_split_lanes_balances_tokens_and_keeps_requests_whole():
    assert split_lanes((1, 1, 1, 1), 2) == [(0, 2), (2, 4)]
    assert split_lanes((1,), 2) == [(0, 1)]
    assert split_lanes((5, 1, 1, 1, 1, 1), 2) == [(0, 1), (1, 6)]
    assert split_lanes((1, 1, 1), 3) == [(0, 1), (1, 2), (2, 3)]
    assert split_lanes((1, 1, 1, 1, 1), 1) == [(0, 5)]


# ------------------------------------------------------------------ the engine
def _engine(ffn_gpu: str, *, dp: int = 8, ep: int = 8, lanes: int = 2) -> AfdEngine:
    model = load_model_spec(MOE)
    a_gpu, f_gpu = get_gpu("H100"), get_gpu(ffn_gpu)
    graphs = CudaGraphConfig.from_vllm(512, 8192, enforce_eager=False, sm_version=a_gpu.sm_version)
    attn = BatchEngine(model, ParallelSpec(tp=1), a_gpu,
                       RooflineCostModel(a_gpu, make_comm_backend("analytical", a_gpu)), graphs)
    ffn = BatchEngine(model, ParallelSpec(tp=1, dp=ep, ep=ep, ffn_tp=1), f_gpu,
                      RooflineCostModel(f_gpu, make_comm_backend("analytical", f_gpu)), graphs)
    return AfdEngine(attn, ffn, lanes=lanes, attention_dp=dp, ffn_tp=1, ffn_ep=ep,
                     link_bw_bytes_per_s=50e9, link_latency_s=1e-5)


def test_engine_prices_a_step_with_lanes_and_records_stats():
    eng = _engine("H100")
    batch = BatchShape((1,) * 64, (1000,) * 64)
    cost = eng.step_cost(batch)
    st = eng.stats[-1]
    assert st.lanes == 2 and cost.num_tokens == 64
    assert cost.duration_s >= max(st.a_busy_s, st.f_busy_s)
    assert cost.duration_s < st.a_busy_s + st.f_busy_s + st.xfer_s    # the lanes overlap
    one = _engine("H100", lanes=1)
    one.step_cost(batch)
    assert one.stats[-1].lanes == 1 and one.stats[-1].xfer_s < st.xfer_s   # 2 lanes: 2x the latencies


def test_h20_ffn_is_compute_bound_at_large_batch():
    """H20: 4.0 TB/s but 148 TFLOP/s. Small lanes are weight-read bound (H20 F faster than
    H100 F); large lanes (~64 tokens per expert) are compute bound (H20 F much slower)."""
    small, large = BatchShape((1,) * 8, (512,) * 8), BatchShape((1,) * 256, (512,) * 256)
    f = {}
    for gpu in ("H100", "H20"):
        for name, batch in (("small", small), ("large", large)):
            eng = _engine(gpu)
            eng.step_cost(batch)
            f[gpu, name] = eng.stats[-1].f_busy_s
    assert f["H20", "small"] < f["H100", "small"]
    assert f["H20", "large"] > 1.3 * f["H100", "large"]


def test_skewed_routing_gives_ep_wait():
    eng = _engine("H100")
    from simulator.moe_routing import make_router
    eng.ffn.moe_router = make_router("power_law:1.2", eng.model, eng.ffn.parallel, 0)
    eng.step_cost(BatchShape((1,) * 64, (100,) * 64))
    assert eng.stats[-1].ep_wait_s > 0
    bal = _engine("H100")
    bal.step_cost(BatchShape((1,) * 64, (100,) * 64))
    assert bal.stats[-1].ep_wait_s == 0


# ------------------------------------------------------------------ end to end
def _spec(ffn_gpu: str | None = None, n: int = 48, **ffn) -> SimulationSpec:
    return SimulationSpec(
        engine=EngineArgs(model=MOE, gpu="H100", max_model_len=4096),
        workload=WorkloadSpec(num_prompts=n, random_input_len=256, random_output_len=32, seed=0),
        architecture="afd", pdd=PddSpec(prefill=RoleLayout("prefill", replicas=1)),
        afd=AfdSpec(attention=AfdRole("attention", dp=4), ffn=AfdRole("ffn", ep=ffn.pop("ep", 4), gpu=ffn_gpu, **ffn)))


def test_afd_run_completes_every_request_with_role_outputs():
    res = run_simulation(_spec())
    s = res.summary
    assert s["completed"] == 48 and s["failed"] == 0
    assert s["architecture"] == "afd"
    assert (s["num_prefill_gpus"], s["num_attention_gpus"], s["num_ffn_gpus"], s["num_gpus"]) == (1, 4, 4, 9)
    assert 0 < s["attention_busy_fraction"] < 1 and 0 < s["ffn_busy_fraction"] < 1
    assert s["afd_transfer_s"] > 0 and s["mean_tpot_ms"] > 0
    # the prefill role looks every prompt up (random prompts: no hits)
    assert (s["prefix_cache_queries"], s["prefix_cache_hits"], s["prefix_cache_scope"]) == (48 * 256, 0, "prefill role")
    steps = res.trace.steps_table().to_pydict()
    assert set(steps["role"]) == {"P", "A"}
    a_rows = [i for i, r in enumerate(steps["role"]) if r == "A"]
    assert all(steps["afd_f_busy_s"][i] > 0 and steps["afd_lanes"][i] >= 1 for i in a_rows)
    assert all(steps["afd_a_busy_s"][i] is None for i, r in enumerate(steps["role"]) if r == "P")


def test_h20_ffn_side_is_busier_than_attention():
    h100 = run_simulation(_spec()).summary
    h20 = run_simulation(_spec("H20")).summary
    assert h20["completed"] == 48 and h20["ffn_gpu"] == "H20" and h20["attention_gpu"] == "H100-SXM"
    assert h20["ffn_busy_fraction"] > h20["attention_busy_fraction"]
    assert h100["ffn_busy_fraction"] > h100["attention_busy_fraction"]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(ffn=AfdRole("ffn", ep=3)), "--ffn-ep 3 must divide the 128 experts"),
    (dict(ffn=AfdRole("ffn", gpu="X100")), "ffn role: unknown GPU 'X100'"),
    (dict(attention=AfdRole("attention", gpu="X100")), "attention role: unknown GPU 'X100'"),
    (dict(ffn=AfdRole("ffn", replicas=2)), "--ffn-replicas 2 must equal --attention-replicas 1"),
])
def test_afd_errors(kwargs, needle):
    spec = SimulationSpec(engine=EngineArgs(model=MOE, gpu="H100", max_model_len=4096),
                          workload=WorkloadSpec(num_prompts=2), architecture="afd", afd=AfdSpec(**kwargs))
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        run_simulation(spec)


def test_afd_spec_errors():
    with pytest.raises(ValueError, match="--attention-replicas must be a positive integer"):
        AfdRole("attention", replicas=0)
    with pytest.raises(ValueError, match="--afd-lanes must be a positive integer"):
        AfdSpec(lanes=0)
    with pytest.raises(ValueError, match="need --architecture afd"):
        SimulationSpec(afd=AfdSpec())
    with pytest.raises(ValueError, match="needs an MoE model"):
        run_simulation(SimulationSpec(engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=4096),
                                      workload=WorkloadSpec(num_prompts=2), architecture="afd",
                                      afd=AfdSpec(ffn=AfdRole("ffn", ep=2))))


def test_transfer_matches_link_pool_sharing_of_the_ffn_port():
    """The attention_dp engines' lanes land on one F GPU at once: equal shares of its port,
    as LinkPool gives; the A->F time is that landing (F side busiest here: dp 8 > ep 8 / tp 1)."""
    from simulator.comm.link_pool import LinkPool
    eng = _engine("H100", dp=8, ep=8)
    lane_tokens = 32
    per_flow = lane_tokens * eng.model.hidden_size * 2 * eng._copies() / eng.ffn_ep   # one engine -> one F GPU
    pool = LinkPool(eng.link_bw, eng.link_latency)
    for i in range(eng.attention_dp):
        pool.add(0.0, i, per_flow)
    landed = pool.next_landing_s()          # all eight land together
    assert pool.num_active == 8
    assert eng._xfer_s(lane_tokens, eng._copies()) == pytest.approx(landed)
    assert 5.3 < eng._copies() < 5.4          # 8 distinct experts of 128 over 8 ranks: ~5.34 ranks


class _RecordingCost(RooflineCostModel):
    """Roofline that keeps the MoE ops it prices."""

    def __init__(self, gpu):
        super().__init__(gpu, make_comm_backend("analytical", gpu))
        self.moe_ops = []

    def op_times_s(self, ops, timing_mode):
        self.moe_ops += [op for op in ops if isinstance(op, MoeOp)]
        return super().op_times_s(ops, timing_mode)


def test_ffn_moe_ops_carry_the_f_replicas_sharding():
    """F's expert ops name moe_tp / moe_ep / weight format, so a bundle prices them from the matching row."""
    eng = _engine("H100", ep=4)
    eng.ffn.cost_model = recording = _RecordingCost(get_gpu("H100"))
    eng.step_cost(BatchShape((1,) * 16, (500,) * 16))
    assert recording.moe_ops
    assert {(op.moe_tp, op.moe_ep, op.quant_method, op.num_local_experts) for op in recording.moe_ops} == {
        (1, 4, "none", 32)}


def test_attention_role_budget_takes_every_memory_flag():
    """The attention role's KV budget is build_memory's (on a GPU enlarged by the MLP weights
    it does not hold): --kv-cache-memory-bytes and -O 0 reach it as they reach a co-located
    engine (both were ignored when it spelled out its own argument list)."""
    from simulator.afd import attention_memory
    from simulator.simulation import build_memory, resolve_engine

    def blocks(**kw):
        resolved = resolve_engine(EngineArgs(model=MOE, gpu="H100", max_model_len=4096, **kw))
        return attention_memory(resolved), build_memory(resolved)

    base, _ = blocks()
    assert base.num_gpu_blocks == 46344 and base.cuda_graph_bytes == 356515840
    fixed, colocated = blocks(kv_cache_memory_bytes=4 << 30)
    assert fixed.num_gpu_blocks == colocated.num_gpu_blocks == 2730      # 4 GiB // 48 layers x 32 KiB
    o0, _ = blocks(optimization_level=0)
    eager, _ = blocks(enforce_eager=True)
    assert o0.cuda_graph_bytes == eager.cuda_graph_bytes == 0
    assert o0.num_gpu_blocks == eager.num_gpu_blocks == 46570
