"""MoE family: the fused routed-expert MLP on one rank. One extra-trees forest (no
bootstrap: p95 15.1 % vs 17.8 % with it, token-point split) per MoE dtype, on the "ratio"
target, over tokens, experts (global and local), top-k, per-rank shapes, TP and EP sizes
(EP > 1 switches vLLM's fp8 MoE from Triton to FlashInfer-Cutlass), routed pairs, the
routed load statistics (max and std of tokens per local expert, skew = max / mean) and
the grouped-GEMM row blocks (each active expert's tokens padded to 16 / 64 / 128 rows)."""

from __future__ import annotations

from calibration.predictors.base import FamilyPredictor


class MoePredictor(FamilyPredictor):
    family = "moe"
    kernels_per_op = 5   # router top-k, align/sort, gate_up, activation, down (+reduce)

    defaults = {"min_samples_leaf": 2, "max_samples": None, "target": "ratio"}
