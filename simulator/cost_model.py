"""Operator cost models: the fidelity plane's answer to "how long does this op take".

`CostModel` is the protocol the batch engine calls. `RooflineCostModel` is the
**no-data fallback**: it prices an op from its FLOPs and bytes against the GPU's
datasheet peaks, scaled by stated efficiency factors. It is used when no calibrated
bundle covers an op family, and results priced by it must say so (`name == "roofline"`).

Timing modes (DESIGN.md §2): "kernel" = GPU time only (ops replayed inside a CUDA
graph); "launch" = kernel time plus a CPU launch overhead per kernel (eager ops).
The overhead is added, not overlapped: conservative for long eager prefills (about
1-2 % there), right for short CPU-bound eager decode steps.

Every kernel also has a GPU-side fixed time in both modes (``KERNEL_LATENCY_S`` per kernel:
grid launch, ramp-up, tail and the gap to the next kernel of a graph), added to its
roofline time: ``t = kernels(op) * KERNEL_LATENCY_S + max(compute, memory)``. It is
negligible for prefill and dominates small decode steps at high TP (a Llama-3.1-70B
layer at TP8 runs ~16 kernels of a few us each). A fused MoE call has its own measured
fixed time (``MOE_FIXED_S``) instead of a kernel count.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from frontier.gpu import GpuSpec
from frontier.ops import (GDN_CHUNK_TOKENS, AttentionOp, CommOp, ElementwiseOp, EncoderAttentionOp, GdnOp, GemmOp,
                          LoraOp, MoeOp, OpSpec)
from simulator.comm.analytical import ALPHA_S, LINK_EFF, AnalyticalCommBackend
from simulator.comm.backend import CommBackend
from simulator.comm.group import CommGroup

TIMING_MODES = ("kernel", "launch")

# --- efficiency factors (fraction of datasheet peak actually reached) ---------------
# cuBLAS/cuBLASLt bf16/fp8 GEMMs reach ~70-80 % of dense tensor peak on large shapes (H100);
# an fp32 GEMM (SGEMM, CUDA cores, `GpuSpec.fp32_flops`) is taken at the same share of its peak.
GEMM_COMPUTE_EFF = 0.75
# Skinny (decode) GEMMs stream weights at ~80 % of HBM bandwidth.
GEMM_MEMORY_EFF = 0.80
# FlashAttention-3 prefill reaches ~55-70 % of bf16 peak; short sequences sit lower.
ATTN_COMPUTE_EFF = 0.55
# Paged decode attention reads KV at ~60-70 % of HBM bandwidth (block-table gathers).
ATTN_MEMORY_EFF = 0.65
# Fused MoE (grouped GEMM + routing/permute) streams expert weights at ~70 % of HBM bandwidth
# (the AIC moe tables below fit 0.7-0.9); its compute efficiency is per kernel class (below).
MOE_MEMORY_EFF = 0.70
# Small fused norm/rotary/activation kernels get ~60 % of HBM bandwidth.
ELEMENTWISE_MEMORY_EFF = 0.60
# The gated delta rule (Gated DeltaNet layers, ``GdnOp``): each kernel's constants fitted on
# AIConfigurator's measured vLLM 0.24 tables of H100 (systems/data/h100_sxm/linear_attention/vllm/
# 0.24.0/gdn_perf.parquet, Qwen3.5 shapes; least squares on relative error: `bench/gdn_tables.py
# --fit h100_sxm`): FlashInfer's chunked prefill scan = 11.1 us + 2.0 us per 64-token chunk of the
# longest sequence (the scan runs its chunks one after another) + FLOPs / (bf16 peak x 0.30); the
# packed recurrent decode update = 3.4 us + bytes / (HBM x 1.05) (the count of
# GdnOp.recurrent_work overstates its traffic by ~5 %). Mean APE on the 2,014 / 197 H100 shapes
# 22.6 / 15.0 %, on H200's, held out, 22.3 / 13.0 % (attention's factors, used before: 45.6 /
# 37.8 % and 57.4 / 26.5 %).
GDN_CHUNKED_LATENCY_S = 11.1e-6
GDN_CHUNK_STEP_S = 2.0e-6
GDN_CHUNKED_COMPUTE_EFF = 0.30
GDN_RECURRENT_LATENCY_S = 3.4e-6
GDN_RECURRENT_MEMORY_EFF = 1.05
# Communication constants live with the analytical comm backend (simulator/comm/analytical.py).
NVLINK_EFF = LINK_EFF["nvlink"]
NETWORK_EFF = LINK_EFF["network"]
COMM_LATENCY_S = ALPHA_S
# CPU cost to launch one kernel from eager PyTorch (dispatch + cudaLaunchKernel), ~4-6 us.
LAUNCH_OVERHEAD_S = 5e-6
# Kernels launched per op when eager: attention = KV-cache write + attention kernel;
# fused MoE = routing top-k, align/permute, two grouped GEMMs, activation, combine;
# gdn = the recurrent (decode) or chunked (prefill) gated-delta-rule kernel, or the causal conv1d.
KERNELS_PER_OP = {"linear": 1, "attention": 2, "moe": 6, "elementwise": 1, "gdn": 1, "comm": 1, "lora": 1,
                  "encoder_attention": 1}
# GPU-side fixed time of one kernel (graph or eager). Source: AIConfigurator's measured vLLM
# 0.24 GEMM tables (systems/data/{h100,h200}_sxm/gemm/vllm/0.24.0): the smallest bf16 GEMM
# (m=1, n=k=32) takes 2.4-2.5 us on H200, and mid-size skinny GEMMs fit
# 2.5 us + bytes / (0.8 * HBM bw) within ~10 %.
KERNEL_LATENCY_S = 2.5e-6
# Kernels per op for that fixed time. linear: the GEMM, plus the activation-quantization
# kernel for fp8 / fp4 compute (the same tables: fp8 GEMMs bottom out at 4.5 us = 2 x 2.4).
# attention: vLLM's FlashAttention-3 path runs the scheduler-metadata kernel, the KV-cache
# write, the attention kernel and the split-KV combine: 4 (the AIC generation-attention table,
# vLLM 0.24 fa3, bottoms out at 9.7 us on H200 = 4 x 2.4). comm: 0 (the comm backend's latency
# term already holds it). (The gated delta rule's fixed times are fitted: GDN_*_LATENCY_S.)
LATENCY_KERNELS = {"linear": 1, "attention": 4, "elementwise": 1, "comm": 0}
# Fused-MoE kernels by class (``moe_kernel_class``): vLLM's triton fused_moe for bf16 and
# fp8 (block-scaled) experts, the Marlin WNA16 MoE for int4 weight-only experts and the
# OAI triton kernel for gpt-oss MXFP4 experts. Both constants below come from AIConfigurator's
# measured vLLM 0.24 moe_perf tables (systems/data/{h100,h200}_sxm/moe/vllm/0.24.0, balanced
# routing), figures H100 / H200:
# MOE_FIXED_S: fixed time of one fused-MoE call (routing, align/sort, both grouped GEMMs,
# activation, combine): median of (measured - weight bytes / HBM bw) over num_tokens <= 8:
# bf16 39 / 39 us, fp8_block 41 / 41, int4 Marlin 51 / 52, MXFP4 65 / 67.
MOE_FIXED_S = {"bf16": 39e-6, "fp8": 41e-6, "int4": 52e-6, "mxfp4": 66e-6}
# MOE_COMPUTE_EFF: achieved FLOP rate / peak of the op's compute dtype (bf16 peak for the
# weight-only int4 / MXFP4 kernels, fp8 peak for fp8), median over num_tokens >= 4096 and
# moe_tp * moe_ep <= 8 (one node): bf16 0.33 / 0.38, fp8_block 0.20 / 0.22, int4 Marlin
# 0.215 / 0.218, MXFP4 0.40 / 0.40. (The former single 0.60 priced MoE prefill 2-3x too fast.)
MOE_COMPUTE_EFF = {"bf16": 0.36, "fp8": 0.21, "int4": 0.22, "mxfp4": 0.40}
MXFP4_BYTES_PER_PARAM = 0.5 + 1.0 / 32       # frontier.quant: 4-bit + one E8M0 scale per 32


class CostModel(Protocol):
    """Prices operator specs of one rank. Returns one time per op, in seconds."""

    name: str

    def op_times_s(self, ops: Sequence[OpSpec], timing_mode: str) -> list[float]: ...


class RooflineCostModel:
    """Roofline fallback: time = max(FLOPs / (peak * eff_c), bytes / (bw * eff_m)).

    Used only where no measured data exists. GEMM/MoE FLOP rate follows the op's
    `compute_dtype` ("fp8" uses `gpu.fp8_flops`, falling back to bf16 if the GPU has
    none; "fp4" falls back to fp8 then bf16). Attention and the gated delta rule (GdnOp)
    always run at the bf16 rate.
    """

    name = "roofline"

    def __init__(self, gpu: GpuSpec, comm: CommBackend | None = None) -> None:
        if gpu.bf16_flops <= 0 or gpu.hbm_bw_bytes_per_s <= 0:
            raise ValueError(f"RooflineCostModel: gpu {gpu.name} needs bf16_flops and "
                             f"hbm_bw_bytes_per_s > 0, got {gpu.bf16_flops}, {gpu.hbm_bw_bytes_per_s}")
        self.gpu = gpu
        fp8 = gpu.fp8_flops if gpu.fp8_flops > 0 else gpu.bf16_flops
        fp4 = gpu.fp4_flops if gpu.fp4_flops > 0 else fp8
        self._flops_rate = {"bf16": gpu.bf16_flops, "fp8": fp8, "fp4": fp4, "fp32": gpu.fp32_flops}
        self.comm: CommBackend = comm if comm is not None else AnalyticalCommBackend(gpu)

    def op_times_s(self, ops: Sequence[OpSpec], timing_mode: str) -> list[float]:
        if timing_mode not in TIMING_MODES:
            raise ValueError(f"timing_mode={timing_mode!r}; valid: {TIMING_MODES}")
        launch = timing_mode == "launch"
        out = []
        for op in ops:
            t = self.kernel_time_s(op)
            if launch:
                t += LAUNCH_OVERHEAD_S * KERNELS_PER_OP[op.family]
            out.append(t)
        return out

    def kernel_time_s(self, op: OpSpec) -> float:
        """GPU time of one op (fixed kernel latency + roofline), no launch overhead."""
        bw = self.gpu.hbm_bw_bytes_per_s
        if isinstance(op, GemmOp):
            kernels = 2 if op.compute_dtype in ("fp8", "fp4") else 1   # + the activation quantization
            return kernels * KERNEL_LATENCY_S + max(
                op.flops / (self._flops_rate[op.compute_dtype] * GEMM_COMPUTE_EFF),
                op.bytes_moved / (bw * GEMM_MEMORY_EFF))
        if isinstance(op, AttentionOp):
            return self._attention_kernel_s(op.flops, op.bytes_moved)
        if isinstance(op, MoeOp):
            kind = moe_kernel_class(op)
            return MOE_FIXED_S[kind] + max(
                op.flops / (self._flops_rate[op.compute_dtype] * MOE_COMPUTE_EFF[kind]),
                moe_bytes(op) / (bw * MOE_MEMORY_EFF))
        if isinstance(op, ElementwiseOp):
            return KERNEL_LATENCY_S + op.bytes_moved / (bw * ELEMENTWISE_MEMORY_EFF)
        if isinstance(op, GdnOp) and op.kernel == "conv1d":    # memory-bound, as an elementwise kernel
            return KERNEL_LATENCY_S + op.bytes_moved / (bw * ELEMENTWISE_MEMORY_EFF)
        if isinstance(op, GdnOp):      # the chunked kernel for the prefills, the recurrent one for the decodes
            t = 0.0
            if op.prefill_new:
                t += (GDN_CHUNKED_LATENCY_S + GDN_CHUNK_STEP_S * -(-max(op.prefill_new) // GDN_CHUNK_TOKENS)
                      + op.prefill_work[0] / (self.gpu.bf16_flops * GDN_CHUNKED_COMPUTE_EFF))
            if op.num_decodes:
                t += GDN_RECURRENT_LATENCY_S + op.recurrent_work[1] / (bw * GDN_RECURRENT_MEMORY_EFF)
            return t
        if isinstance(op, CommOp):
            return self.comm_time_s(op)
        if isinstance(op, EncoderAttentionOp):     # one flash-attention kernel, no KV cache
            return KERNEL_LATENCY_S + max(op.flops / (self.gpu.bf16_flops * ATTN_COMPUTE_EFF),
                                          op.bytes_moved / (bw * ATTN_MEMORY_EFF))
        if isinstance(op, LoraOp):     # a skinny GEMM over the batch's adapters: the GEMM roofline
            return KERNEL_LATENCY_S + max(op.flops / (self.gpu.bf16_flops * GEMM_COMPUTE_EFF),
                                          op.bytes_moved / (bw * GEMM_MEMORY_EFF))
        raise ValueError(f"RooflineCostModel: unknown op type {type(op).__name__}")

    def attention_time_s(self, flops: float, bytes_moved: float, timing_mode: str) -> float:
        """``op_times_s([op], timing_mode)[0]`` of an AttentionOp with these ``flops`` and
        ``bytes_moved`` (the same floats; step pricing of decode-only attention, which gets
        both from ``AttentionOp.decode_work`` without building the op)."""
        if timing_mode not in TIMING_MODES:
            raise ValueError(f"timing_mode={timing_mode!r}; valid: {TIMING_MODES}")
        t = self._attention_kernel_s(flops, bytes_moved)
        if timing_mode == "launch":
            t += LAUNCH_OVERHEAD_S * KERNELS_PER_OP["attention"]
        return t

    def _attention_kernel_s(self, flops: float, bytes_moved: float) -> float:
        return LATENCY_KERNELS["attention"] * KERNEL_LATENCY_S + max(
            flops / (self.gpu.bf16_flops * ATTN_COMPUTE_EFF),
            bytes_moved / (self.gpu.hbm_bw_bytes_per_s * ATTN_MEMORY_EFF))

    def comm_time_s(self, op: CommOp) -> float:
        """Delegated to the comm backend (default analytical: ring/tree, hierarchical across
        nodes; see simulator/comm/analytical.py) over the group the op describes."""
        group = CommGroup.from_op(op, self.gpu)
        if op.moe is not None:
            return self.comm.moe_a2a_time_s(op.moe, op.bytes, group)
        return self.comm.collective_time_s(op.kind, op.bytes, group)


def moe_kernel_class(op: MoeOp) -> str:
    """The fused-MoE kernel vLLM runs for these experts, from the weight bytes per element:
    > 1.5 -> "bf16", >= 0.75 -> "fp8", exactly MXFP4's 0.53125 -> "mxfp4", else "int4"
    (an int4 checkpoint with group size 64 has MXFP4's byte count and would be priced as MXFP4)."""
    wb = op.weight_bytes_per_param
    if wb > 1.5:
        return "bf16"
    if wb >= 0.75:
        return "fp8"
    return "mxfp4" if wb == MXFP4_BYTES_PER_PARAM else "int4"


def expected_active_experts(op: MoeOp) -> float:
    """Local experts holding at least one token, expected under random top-k routing.

    Balanced ops (``tokens_per_expert`` None) do not say which experts the tokens pick. Each
    of the ``tokens`` entering the layer picks ``topk`` of ``num_experts`` experts; with
    uniformly random picks a given expert is missed by one token with probability
    ``1 - topk / num_experts``, so ``local * (1 - (1 - topk / E) ** tokens)`` local experts are
    read (gpt-oss, 32 tokens, top-4 of 128: 81.66, not min(128, 128 pairs) = 128). Capped by
    the routed pairs of the rank. Measured per-expert loads use their own count.
    """
    if op.tokens_per_expert is not None:
        return float(op.active_experts)
    miss = (1.0 - min(op.topk, op.num_experts) / op.num_experts) ** op.tokens
    return min(op.num_local_experts * (1.0 - miss), float(op.routed_pairs))


def moe_bytes(op: MoeOp) -> float:
    """``MoeOp.bytes_moved`` with the expected (not the maximal) number of experts read."""
    weights = expected_active_experts(op) * op.matrices * op.hidden * op.inter * op.weight_bytes_per_param
    acts = op.routed_pairs * (2 * op.hidden + op.matrices * op.inter) * op.act_bytes
    return weights + acts
