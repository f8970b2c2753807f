"""Roofline cost model: hand-computed numbers on a synthetic GPU."""

import pytest

from frontier.gpu import GpuSpec
from frontier.ops import AttentionOp, CommOp, ElementwiseOp, GemmOp, MoeOp
from simulator import cost_model as cm
from simulator.cost_model import RooflineCostModel

GPU = GpuSpec(name="toy", memory_bytes=80 << 30, hbm_bw_bytes_per_s=2e12, bf16_flops=1e15, fp8_flops=2e15,
              fp4_flops=0, fp32_flops=67e12, nvlink_bw_bytes_per_s=4e11, network_bw_bytes_per_s=5e10, gpus_per_node=8,
              price_per_hour_usd=0.0, sm_version=90, source="test")


def test_large_gemm_is_compute_bound():
    t, = RooflineCostModel(GPU).op_times_s([GemmOp("x", 4096, 4096, 4096)], "kernel")
    assert t == pytest.approx(cm.KERNEL_LATENCY_S + 2 * 4096**3 / (1e15 * cm.GEMM_COMPUTE_EFF))
    assert t == pytest.approx(1.8575e-4, rel=1e-4)


def test_decode_gemm_is_memory_bound_and_fp8_doubles_compute_rate():
    model = RooflineCostModel(GPU)
    t, = model.op_times_s([GemmOp("x", 1, 4096, 4096)], "kernel")
    assert t == pytest.approx(2.5e-6 + (4096 * 4096 * 2 + 2 * 4096 * 2) / (2e12 * cm.GEMM_MEMORY_EFF))
    bf16, fp8 = model.op_times_s([GemmOp("x", 4096, 4096, 4096),
                                  GemmOp("x", 4096, 4096, 4096, 1.0, 2.0, "fp8")], "kernel")
    # fp8: twice the FLOP rate, and two kernels (activation quantization + scaled GEMM)
    assert fp8 - 2 * cm.KERNEL_LATENCY_S == pytest.approx((bf16 - cm.KERNEL_LATENCY_S) / 2)


def test_launch_mode_adds_overhead_per_kernel():
    model = RooflineCostModel(GPU)
    ops = [GemmOp("x", 1, 64, 64), ElementwiseOp("norm", 1, 64, 256.0)]
    kernel = model.op_times_s(ops, "kernel")
    launch = model.op_times_s(ops, "launch")
    assert [b - a for a, b in zip(kernel, launch)] == pytest.approx([cm.LAUNCH_OVERHEAD_S] * 2)


def test_fixed_kernel_latency_dominates_tiny_ops():
    """Tiny ops cost their kernels' fixed time: 1 GEMM, 4 attention kernels, one fused MoE
    (MXFP4 weights: 66 us, bf16: 39 us; int4 is told from MXFP4 by its byte count)."""
    model = RooflineCostModel(GPU)
    gemm, attn, moe4, moe16 = model.op_times_s([
        GemmOp("x", 1, 32, 32), AttentionOp((), (), (1,), 1, 1, 2),
        MoeOp(1, 8, 8, 1, 16, 8, 1, 0.53125), MoeOp(1, 8, 8, 1, 16, 8, 1)], "kernel")
    assert gemm == pytest.approx(2.5e-6 + (32 * 32 * 2 + 2 * 32 * 2) / (2e12 * cm.GEMM_MEMORY_EFF))
    assert attn == pytest.approx(4 * 2.5e-6 + attn_bytes_s(AttentionOp((), (), (1,), 1, 1, 2)))
    assert moe4 == pytest.approx(66e-6, rel=1e-3) and moe16 == pytest.approx(39e-6, rel=1e-3)
    assert cm.moe_kernel_class(MoeOp(1, 8, 8, 1, 16, 8, 1, 0.515625)) == "int4"


def attn_bytes_s(op: AttentionOp) -> float:
    return max(op.flops / (1e15 * cm.ATTN_COMPUTE_EFF), op.bytes_moved / (2e12 * cm.ATTN_MEMORY_EFF))


def test_ring_all_reduce():
    model = RooflineCostModel(GPU)
    t, = model.op_times_s([CommOp("all_reduce", 1 << 20, 8)], "kernel")
    assert t == pytest.approx(cm.COMM_LATENCY_S["nvlink"] + 2 * 7 / 8 * (1 << 20) / (4e11 * cm.NVLINK_EFF))
    assert model.op_times_s([CommOp("all_reduce", 1 << 20, 1)], "kernel") == [0.0]


def test_attention_counts_causal_pairs_and_kv_bytes():
    op = AttentionOp((4,), (0,), (10,), num_heads=1, num_kv_heads=1, head_dim=2)
    # prefill 4 tokens, no context: 4*5/2 = 10 pairs; decode ctx 10: 11 pairs
    assert op.flops == 2 * 1 * (2 + 2) * 21
    # KV read+write: (0 + 4 + 10 + 1) + 5 new tokens, 2*1*2*2 = 8 bytes per token; Q+O 5*1*4*2
    assert op.bytes_moved == 20 * 8 + 5 * 4 * 2
    assert op.num_tokens == 5 and op.num_reqs == 2


def test_moe_balanced_and_measured_loads():
    op = MoeOp(tokens=4, num_experts=8, num_local_experts=8, topk=2, hidden=16, inter=8, routed_pairs=8)
    assert op.active_experts == 8 and op.flops == 6 * 16 * 8 * 8
    skewed = MoeOp(4, 8, 8, 2, 16, 8, 8, tokens_per_expert=(8, 0, 0, 0, 0, 0, 0, 0))
    assert skewed.active_experts == 1 and skewed.bytes_moved < op.bytes_moved


def test_bad_inputs():
    model = RooflineCostModel(GPU)
    with pytest.raises(ValueError, match="timing_mode"):
        model.op_times_s([], "wall")
    with pytest.raises(ValueError, match="GemmOp.m"):
        GemmOp("x", 0, 1, 1)
    with pytest.raises(ValueError, match="compute_dtype"):
        GemmOp("x", 1, 1, 1, compute_dtype="int8")
    with pytest.raises(ValueError, match="CommOp.kind"):
        CommOp("broadcast", 1, 2)
    with pytest.raises(ValueError, match="prefill_ctx"):
        AttentionOp((1, 2), (0,), (), 1, 1, 1)
    assert RooflineCostModel.name == "roofline"


def test_moe_reads_the_expected_distinct_experts_of_random_routing():
    """32 tokens, top-4 of 128 experts: 128 * (1 - (124/128)**32) = 81.66 experts, not 128."""
    op = MoeOp(32, 128, 128, 4, 2880, 2880, 128, 0.53125)
    assert cm.expected_active_experts(op) == pytest.approx(128 * (1 - (124 / 128) ** 32))
    assert cm.expected_active_experts(op) == pytest.approx(81.66, abs=0.01)
    one = MoeOp(1, 128, 128, 4, 2880, 2880, 4, 0.53125)
    assert cm.expected_active_experts(one) == pytest.approx(4.0)   # one token: its topk experts
    skewed = MoeOp(4, 8, 8, 2, 16, 8, 8, tokens_per_expert=(8, 0, 0, 0, 0, 0, 0, 0))
    assert cm.expected_active_experts(skewed) == 1.0 and cm.moe_bytes(skewed) == skewed.bytes_moved
