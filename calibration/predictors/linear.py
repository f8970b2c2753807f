"""Linear (token-count) family: GEMMs, one extra-trees forest (32 bagged trees) per dtype
over log m, n, k, FLOPs, bytes, tile counts, SM waves, the fill of the last 128-row tile and
the k / n divisibility that picks vLLM's fp8 block-scaled kernel (the dtype picks the kernel
family: bf16 cuBLAS, fp8 Cutlass, fp8_block DeepGEMM (k % 128 == 0, m >= 32) / FlashInfer
(k % 128 == 0, m < 32) / Cutlass (otherwise)), on the "log" target. Bagging (half the rows
per tree, leaves of 3) beats unbagged trees on these noisy tables (H100 rows split p95 12.3 %
vs 13.1 %). The "ratio" target measured 0.3-0.4 points better (H100 p95 rows 11.9 %,
token points 13.6 %); not switched yet (it needs a refit of every cached bundle for a
gain below the 5 % target's gap)."""

from __future__ import annotations

from calibration.predictors.base import FamilyPredictor


class LinearPredictor(FamilyPredictor):
    family = "linear"
    kernels_per_op = 1

    defaults = {"target": "log", "n_estimators": 32}
