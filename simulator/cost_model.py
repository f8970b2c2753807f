"""Operator cost models: the fidelity plane's answer to "how long does this op take".

`CostModel` is the protocol the batch engine calls. `RooflineCostModel` is the
**no-data fallback**: it prices an op from its FLOPs and bytes against the GPU's
datasheet peaks, scaled by stated efficiency factors. It is used when no calibrated
bundle covers an op family, and results priced by it must say so (`name == "roofline"`).

Timing modes (DESIGN.md §2): "kernel" = GPU time only (ops replayed inside a CUDA
graph); "launch" = kernel time plus a CPU launch overhead per kernel (eager ops).
The overhead is added, not overlapped: conservative for long eager prefills (about
1-2 % there), right for short CPU-bound eager decode steps.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from frontier.gpu import GpuSpec
from frontier.ops import AttentionOp, CommOp, ElementwiseOp, GemmOp, MoeOp, OpSpec
from simulator.comm.analytical import ALPHA_S, LINK_EFF, AnalyticalCommBackend
from simulator.comm.backend import CommBackend
from simulator.comm.group import CommGroup

TIMING_MODES = ("kernel", "launch")

# --- efficiency factors (fraction of datasheet peak actually reached) ---------------
# cuBLAS/cuBLASLt bf16/fp8 GEMMs reach ~70-80 % of dense tensor peak on large shapes (H100).
GEMM_COMPUTE_EFF = 0.75
# Skinny (decode) GEMMs stream weights at ~80 % of HBM bandwidth.
GEMM_MEMORY_EFF = 0.80
# FlashAttention-3 prefill reaches ~55-70 % of bf16 peak; short sequences sit lower.
ATTN_COMPUTE_EFF = 0.55
# Paged decode attention reads KV at ~60-70 % of HBM bandwidth (block-table gathers).
ATTN_MEMORY_EFF = 0.65
# Fused MoE (grouped GEMM + routing/permute) is less efficient than one dense GEMM.
MOE_COMPUTE_EFF = 0.60
MOE_MEMORY_EFF = 0.70
# Small fused norm/rotary/activation kernels get ~60 % of HBM bandwidth.
ELEMENTWISE_MEMORY_EFF = 0.60
# Communication constants live with the analytical comm backend (simulator/comm/analytical.py).
NVLINK_EFF = LINK_EFF["nvlink"]
NETWORK_EFF = LINK_EFF["network"]
COMM_LATENCY_S = ALPHA_S
# CPU cost to launch one kernel from eager PyTorch (dispatch + cudaLaunchKernel), ~4-6 us.
LAUNCH_OVERHEAD_S = 5e-6
# Kernels launched per op when eager: attention = KV-cache write + attention kernel;
# fused MoE = routing top-k, align/permute, two grouped GEMMs, activation, combine.
KERNELS_PER_OP = {"linear": 1, "attention": 2, "moe": 6, "elementwise": 1, "comm": 1}


class CostModel(Protocol):
    """Prices operator specs of one rank. Returns one time per op, in seconds."""

    name: str

    def op_times_s(self, ops: Sequence[OpSpec], timing_mode: str) -> list[float]: ...


class RooflineCostModel:
    """Roofline fallback: time = max(FLOPs / (peak * eff_c), bytes / (bw * eff_m)).

    Used only where no measured data exists. GEMM/MoE FLOP rate follows the op's
    `compute_dtype` ("fp8" uses `gpu.fp8_flops`, falling back to bf16 if the GPU has
    none; "fp4" falls back to fp8 then bf16). Attention always runs at the bf16 rate.
    """

    name = "roofline"

    def __init__(self, gpu: GpuSpec, comm: CommBackend | None = None) -> None:
        if gpu.bf16_flops <= 0 or gpu.hbm_bw_bytes_per_s <= 0:
            raise ValueError(f"RooflineCostModel: gpu {gpu.name} needs bf16_flops and "
                             f"hbm_bw_bytes_per_s > 0, got {gpu.bf16_flops}, {gpu.hbm_bw_bytes_per_s}")
        self.gpu = gpu
        fp8 = gpu.fp8_flops if gpu.fp8_flops > 0 else gpu.bf16_flops
        fp4 = gpu.fp4_flops if gpu.fp4_flops > 0 else fp8
        self._flops_rate = {"bf16": gpu.bf16_flops, "fp8": fp8, "fp4": fp4}
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
        """GPU time of one op, no launch overhead."""
        bw = self.gpu.hbm_bw_bytes_per_s
        if isinstance(op, GemmOp):
            return max(op.flops / (self._flops_rate[op.compute_dtype] * GEMM_COMPUTE_EFF),
                       op.bytes_moved / (bw * GEMM_MEMORY_EFF))
        if isinstance(op, AttentionOp):
            return max(op.flops / (self.gpu.bf16_flops * ATTN_COMPUTE_EFF),
                       op.bytes_moved / (bw * ATTN_MEMORY_EFF))
        if isinstance(op, MoeOp):
            return max(op.flops / (self._flops_rate[op.compute_dtype] * MOE_COMPUTE_EFF),
                       op.bytes_moved / (bw * MOE_MEMORY_EFF))
        if isinstance(op, ElementwiseOp):
            return op.bytes_moved / (bw * ELEMENTWISE_MEMORY_EFF)
        if isinstance(op, CommOp):
            return self.comm_time_s(op)
        raise ValueError(f"RooflineCostModel: unknown op type {type(op).__name__}")

    def comm_time_s(self, op: CommOp) -> float:
        """Delegated to the comm backend (default analytical: ring/tree, hierarchical across
        nodes; see simulator/comm/analytical.py) over the group the op describes."""
        return self.comm.collective_time_s(op.kind, op.bytes, CommGroup.from_op(op, self.gpu))
