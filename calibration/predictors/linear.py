"""Linear (token-count) family: GEMMs, one extra-trees forest per dtype over log m, n, k, FLOPs,
bytes and tile counts (the dtype picks the kernel: bf16 cuBLAS, fp8 Cutlass, fp8_block
DeepGEMM/Cutlass/FlashInfer, ...)."""

from __future__ import annotations

from calibration.predictors.base import FamilyPredictor


class LinearPredictor(FamilyPredictor):
    family = "linear"
    kernels_per_op = 1

    defaults = {"target": "log"}
