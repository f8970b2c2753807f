"""Gated DeltaNet hybrids (Qwen3.5 / Qwen3-Next): the gated delta rule's work (GdnOp), its
roofline price, and a step's layer counts: attention ops x the full-attention layers, GDN ops x
the GDN layers, norms / MoE x every layer. Non-GDN models' steps are priced as before."""

import pandas as pd
import pytest

from calibration.bundle import load_bundle, save_bundle
from calibration.predictors import make_predictor
from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.ops import AttentionOp, GdnOp
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig
from simulator.predictor_cost import PredictorCostModel

H100 = get_gpu("H100")          # 3.35e12 B/s HBM, 989e12 bf16 FLOP/s
QWEN35 = load_model_spec("Qwen/Qwen3.5-35B-A3B")   # 40 layers: 30 GDN + 10 full attention (every 4th)
BW_REC = 3.35e12 * 1.05         # HBM x GDN_RECURRENT_MEMORY_EFF (fitted on AIC's measured H100 table)
REC_S, CHUNK_S, STEP_S = 3.4e-6, 11.1e-6, 2.0e-6   # GDN_RECURRENT_LATENCY_S, GDN_CHUNKED_LATENCY_S, GDN_CHUNK_STEP_S
CHUNK_FLOPS = 989e12 * 0.30     # bf16 peak x GDN_CHUNKED_COMPUTE_EFF
BW_ELEM = 3.35e12 * 0.60        # HBM x ELEMENTWISE_MEMORY_EFF


def engine(model=QWEN35, tp=1, pp=1, eager=False, cost_model=None):
    cg = CudaGraphConfig.from_vllm(256, 8192, eager, H100.sm_version)
    return BatchEngine(model, ParallelSpec(tp=tp, pp=pp), H100, cost_model or RooflineCostModel(H100), cg)


def test_qwen35_shape():
    m = QWEN35
    assert (m.num_layers, m.num_linear_attention_layers, m.linear_num_key_heads, m.linear_num_value_heads,
            m.linear_key_head_dim, m.linear_value_head_dim, m.linear_conv_kernel_dim, m.mamba_ssm_dtype,
            m.attn_output_gate) == (40, 30, 16, 32, 128, 128, 4, "float32", True)
    assert [i for i in range(40) if not m.is_linear_attention_layer(i)] == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]


def test_gdn_op_work_qwen35_tp1_and_tp2():
    # a 1000-token prefill, a 24-token prefill chunk and 3 decodes: 1027 tokens, 5 states
    # TP 1: nv 32, nk 16, dk = dv = 128, fp32 state
    op = GdnOp((1000, 24), 3, 32, 128, 128, 16, 4.0, 2.0)
    assert (op.num_tokens, op.state_bytes) == (1027, 2_097_152)           # 32 x 128 x 128 x 4 = 2 MiB
    # per value head: prefill token 4 x 128 x 128 + 2 x 64 x 256 = 65,536 + 32,768 = 98,304;
    # decode 65,536. 32 x (1024 x 98,304 + 3 x 65,536) = 32 x 100,859,904
    assert op.flops == 3_227_516_928
    # states: 5 read + 5 written x 2,097,152 = 20,971,520; per token (2 x 16 x 128 q, k + 32 x 128 v
    # + 32 g + 32 beta in, 32 x 128 out) x 2 B = 12,352 x 2 = 24,704 B, x 1027 = 25,371,008
    assert op.bytes_moved == 20_971_520 + 25_371_008 == 46_342_528
    # TP 2: nv 16, nk 8 per rank: everything per rank halves
    op2 = GdnOp((1000, 24), 3, 16, 128, 128, 8, 4.0, 2.0)
    assert op2.state_bytes == 1_048_576
    assert op2.flops == 16 * 100_859_904 == 1_613_758_464
    assert op2.bytes_moved == 10 * 1_048_576 + 1027 * 12_352 == 23_171_264


def test_gdn_op_verify_writes_a_state_per_token():
    # 4 verifies of 1 + 3 tokens: 4 states read, 16 written; 16 recurrent tokens
    op = GdnOp((), 4, 32, 128, 128, 16, 4.0, 2.0, spec_tokens=12)
    assert op.flops == 32 * 16 * 65_536 == 33_554_432
    assert op.bytes_moved == 20 * 2_097_152 + 16 * 24_704 == 42_338_304
    with pytest.raises(ValueError, match="num_decodes"):
        GdnOp((0,), 1, 32, 128, 128, 16)


def test_roofline_prices_gdn_op():
    """The recurrent kernel prices the decodes' bytes, the chunked one the prefills' FLOPs, each
    with its fixed time (fitted on AIConfigurator's measured vLLM 0.24 H100 table); a mixed batch
    runs both."""
    op = GdnOp((), 64, 32, 128, 128, 16, 4.0, 2.0)
    # bytes 128 x 2,097,152 + 64 x 24,704 = 270,016,512 (the recurrent kernel's)
    kernel = REC_S + 270_016_512 / BW_REC
    roofline = RooflineCostModel(H100)
    assert roofline.op_times_s([op], "kernel") == [pytest.approx(kernel, rel=1e-15)]
    assert roofline.op_times_s([op], "launch") == [pytest.approx(kernel + 5e-6, rel=1e-15)]   # one kernel launched
    prefill = GdnOp((8192, 100), 0, 32, 128, 128, 16, 4.0, 2.0)
    # the longest sequence scans 8192 / 64 = 128 chunks one after another; flops 32 x 8292 x 98,304
    # = 26,084,376,576 at 989e12 x 0.30: 11.1 + 256.0 + 87.9 us (AIC measures 388 us for the 8,192
    # tokens alone at 32 value heads)
    assert prefill.prefill_work[0] == 26_084_376_576
    assert roofline.kernel_time_s(prefill) == pytest.approx(CHUNK_S + 128 * STEP_S + 26_084_376_576 / CHUNK_FLOPS,
                                                            rel=1e-15)
    mixed = GdnOp((8192, 100), 64, 32, 128, 128, 16, 4.0, 2.0)
    assert roofline.kernel_time_s(mixed) == pytest.approx(roofline.kernel_time_s(prefill) + kernel, rel=1e-15)


def test_prefill_step_layer_counts():
    e = engine()
    ops = {getattr(op, "name", type(op).__name__): (op, n) for op, n in e.layer_ops(8192)}
    counts = {name: n for name, (_, n) in ops.items()}
    assert {k: counts[k] for k in ("qkv_proj", "rotary", "attn_gate", "o_proj")} == dict.fromkeys(
        ("qkv_proj", "rotary", "attn_gate", "o_proj"), 10)
    assert {k: counts[k] for k in ("in_proj_qkvz", "in_proj_ba", "gdn_norm", "out_proj")} == dict.fromkeys(
        ("in_proj_qkvz", "in_proj_ba", "gdn_norm", "out_proj"), 30)
    assert {k: counts[k] for k in ("input_norm", "post_norm", "router", "shared_gate_up_proj")} == dict.fromkeys(
        ("input_norm", "post_norm", "router", "shared_gate_up_proj"), 40)
    # qkv_proj: (2 x 16 q + gate + 2 x 2 kv) x 256 = 9216 wide; in_proj_qkvz: 2 x 2048 + 2 x 4096 = 12288
    shapes = {k: (ops[k][0].n, ops[k][0].k) for k in ("qkv_proj", "o_proj", "in_proj_qkvz", "in_proj_ba", "out_proj")}
    assert shapes == {"qkv_proj": (9216, 2048), "o_proj": (2048, 4096), "in_proj_qkvz": (12288, 2048),
                      "in_proj_ba": (64, 2048), "out_proj": (2048, 4096)}
    # the GEMMs read the weights ModelSpec counts: attention all of them, GDN all but its small bf16 params
    attn = sum(ops[k][0].n * ops[k][0].k * 2.0 for k in ("qkv_proj", "o_proj"))
    gdn = sum(ops[k][0].n * ops[k][0].k * 2.0 for k in ("in_proj_qkvz", "in_proj_ba", "out_proj"))
    small = (8192 * 4 + 2 * 32 + 128) * 2.0          # conv1d (conv_dim x 4), A_log, dt_bias, gated norm
    assert (attn, gdn + small) == (QWEN35._attention_bytes(1), QWEN35._gdn_bytes(1))
    # the batch-dependent part: attention x 10 layers, the GDN cores x 30
    batch = BatchShape((8192,), (0,))
    assert e.attention_ops(batch) == [(AttentionOp((8192,), (0,), (), 16, 2, 256, 2.0, 2.0), 10)]
    (conv, _), rule = e.gdn_ops(batch.new_tokens, batch.context_lens)
    assert rule == (GdnOp((8192,), 0, 32, 128, 128, 16, 4.0, 2.0), 30)
    assert conv == GdnOp((8192,), 0, 32, 128, 128, 16, 4.0, 2.0, kernel="conv1d", conv_kernel=4)
    # the conv1d: 8,192 channels of the tokens and the sequence's 3 conv-state rows, read and written
    assert (conv.conv_dim, conv.bytes_moved) == (8192, (8192 + 3) * 2 * 8192 * 2.0)


def test_tp2_gdn_shapes():
    e = engine(tp=2)
    ops = {getattr(op, "name", type(op).__name__): op for op, _ in e.layer_ops(16)}
    assert [(ops[k].n, ops[k].k) for k in ("qkv_proj", "in_proj_qkvz", "in_proj_ba", "out_proj")] == [
        (4608, 2048), (6144, 2048), (32, 2048), (2048, 2048)]
    assert e.gdn_ops((1, 5), (10, 0)) == [
        (GdnOp((5,), 1, 16, 128, 128, 8, 4.0, 2.0, kernel="conv1d"), 30), (GdnOp((5,), 1, 16, 128, 128, 8, 4.0, 2.0), 30)]
    assert e.gdn_ops((1, 5), (10, 0))[0][0].bytes_moved == (6 + 2 * 3) * 2 * 4096 * 2.0


def test_decode_steps_pay_the_gdn_state_traffic():
    e = engine()
    new, ctx = (1,) * 64, (1000,) * 64
    assert e.gdn_ops(new, ctx) == [(GdnOp((), 64, 32, 128, 128, 16, 4.0, 2.0, kernel="conv1d"), 30),
                                   (GdnOp((), 64, 32, 128, 128, 16, 4.0, 2.0), 30)]
    assert e.gdn_ops(new, ctx)[0][0].bytes_moved == 4 * 64 * 32768.0
    # per layer: conv 256 rows x 32,768 B; delta rule 270,016,512 B (test_roofline_prices_gdn_op)
    conv = 2.5e-6 + 256 * 32768 / BW_ELEM
    rule = REC_S + 270_016_512 / BW_REC
    assert e._gdn_time_s(new, ctx, "kernel") == pytest.approx(30 * (conv + rule), rel=1e-14)
    # decode attention (10 layers, fast path) + the GDN cores
    full = RooflineCostModel(H100).op_times_s([AttentionOp((), (), ctx, 16, 2, 256, 2.0, 2.0)], "kernel")[0]
    assert e.attention_time_s(new, ctx, "kernel") == pytest.approx(10 * full + 30 * (conv + rule), rel=1e-14)
    # 32 more decodes add 32 x 30 x (4 MiB of state + 24,704 B in / out + 4 conv rows of 32,768 B)
    g32, g64 = (e._gdn_time_s((1,) * n, (1000,) * n, "kernel") for n in (32, 64))
    assert g64 - g32 == pytest.approx(32 * 30 * (4_219_008 / BW_REC + 131_072 / BW_ELEM), rel=1e-9)
    t8, t32, t64 = (e.step_cost(BatchShape((1,) * n, (1000,) * n)).duration_s for n in (8, 32, 64))
    assert t8 < t32 < t64 and t64 - t32 > g64 - g32 > 1.2e-3


def test_decode_fast_path_equals_the_built_ops():
    fast, plain = engine(), engine()
    plain._decode_attn = None
    assert fast._decode_attn is not None
    for n, c in ((1, 0), (7, 300), (64, 5000)):
        new, ctx = (1,) * n, tuple(c + i for i in range(n))
        for timing in ("kernel", "launch"):
            assert fast.attention_time_s(new, ctx, timing) == plain.attention_time_s(new, ctx, timing)
        assert fast.step_cost(BatchShape(new, ctx)) == plain.step_cost(BatchShape(new, ctx))


def test_mixed_step_splits_decodes_from_prefills_and_pp_stages_sum():
    e = engine(pp=2)
    batch = BatchShape((300, 1, 1), (0, 40, 50))
    ((_, n), (core, _)) = e.gdn_ops(batch.new_tokens, batch.context_lens)
    assert (n, core.prefill_new, core.num_decodes, core.spec_tokens) == (30, (300,), 2, 0)
    assert sum(e.stage_times_s(batch)) == pytest.approx(e.step_cost(batch).duration_s, rel=1e-12)


def _rms_norm_rows() -> pd.DataFrame:
    return pd.DataFrame([{"op_name": "rms_norm", "num_tokens": t, "hidden_size": 2048, "dtype": "bf16",
                          "timing_mode": mode, "latency_s_median": 3e-6 + 8192 * t / 2e12}
                         for t in (1, 2, 4, 8, 16, 32, 64) for mode in ("kernel", "launch")])


def test_calibrated_cost_model_sends_gdn_ops_to_the_roofline(tmp_path):
    path = tmp_path / "H100.joblib"
    save_bundle(path, {"elementwise": make_predictor("elementwise").fit(_rms_norm_rows())},
                {"gpu": "H100-SXM", "framework": "vllm", "framework_version": "test"})
    roofline = RooflineCostModel(H100)
    cost = PredictorCostModel(load_bundle(path), roofline)
    e = engine(cost_model=cost)
    (conv, _), (core, _) = e.gdn_ops((1, 1), (10, 20))
    ops = {getattr(op, "name", type(op).__name__): op for op, _ in e.layer_ops(8)}
    gate, norm, final = ops["attn_gate"], ops["gdn_norm"], ops["final_norm"]
    times = cost.op_times_s([core, conv, gate, norm, final], "kernel")
    assert times[:4] == roofline.op_times_s([core, conv, gate, norm], "kernel")
    assert (cost.num_fallback, cost.num_predicted) == (4, 1)       # the final norm: the rms_norm rows
    assert times[4] != roofline.op_times_s([final], "kernel")[0]
    assert e.step_cost(BatchShape((1, 1), (10, 20))).duration_s > 0


@pytest.mark.parametrize("name, tp, pp, eager, batch, want", [
    # recorded with the code before GDN pricing (Llama and Qwen3 have no GDN layer)
    ("meta-llama/Meta-Llama-3.1-8B", 1, 1, False, BatchShape((1,) * 8, (1000,) * 8), 0.007107190685342517),
    ("meta-llama/Meta-Llama-3.1-8B", 1, 1, False, BatchShape((512,) + (1,) * 16, (100,) + (3000,) * 16),
     0.01747364084893949),
    ("meta-llama/Meta-Llama-3.1-8B", 2, 1, False, BatchShape((2048,), (0,)), 0.030672487417525318),
    ("meta-llama/Meta-Llama-3.1-8B", 2, 1, False, BatchShape((1,) * 64, tuple(range(100, 6500, 100))),
     0.010803034333358847),
    ("Qwen/Qwen3-30B-A3B", 1, 1, False, BatchShape((1,) * 64, tuple(range(100, 6500, 100))), 0.03807100681818243),
    ("Qwen/Qwen3-30B-A3B", 1, 1, False, BatchShape((8192,), (0,)), 0.16933632293646136),
    ("Qwen/Qwen3-30B-A3B", 2, 1, True, BatchShape((512,) + (1,) * 16, (100,) + (3000,) * 16), 0.02394986918374199),
    ("Qwen/Qwen3-30B-A3B", 1, 2, False, BatchShape((1,) * 8, (1000,) * 8), 0.014391328905321379),
])
def test_non_gdn_step_costs_unchanged(name, tp, pp, eager, batch, want):
    assert engine(load_model_spec(name), tp, pp, eager).step_cost(batch).duration_s == want


def test_spec_decode_verifies_run_the_recurrent_kernel():
    from simulator.spec_decode import SpecDecodeConfig
    cg = CudaGraphConfig.from_vllm(256, 8192, False, H100.sm_version, num_spec_tokens=3)
    e = BatchEngine(QWEN35, ParallelSpec(), H100, RooflineCostModel(H100), cg, spec=SpecDecodeConfig("mtp", 3, (0.7,)))
    # two verifies of 1 + 3 tokens on a context, a 4-token prompt (no context: a prefill), a decode
    (conv, _), (core, n) = e.gdn_ops((4, 4, 4, 1), (100, 200, 0, 300))
    assert (n, core.prefill_new, core.num_decodes, core.spec_tokens, conv.num_tokens) == (30, (4,), 3, 6, 13)
    assert conv.bytes_moved == (13 + 4 * 3) * 2 * 8192 * 2.0     # + 3 conv-state rows a sequence
