"""Linear (token-count) family: GEMMs, one extra-trees forest (20 bagged trees) per dtype
over log m, n, k, FLOPs, bytes, tile counts (16- to 256-row tiles), SM waves, the fill of
the last 128-row tile and the k / n divisibility that picks vLLM's fp8 block-scaled kernel
(the dtype picks the kernel family: bf16 cuBLAS, fp8 Cutlass, fp8_block DeepGEMM
(k % 128 == 0, m >= 32) / FlashInfer (k % 128 == 0, m < 32) / Cutlass (otherwise)).

Target "ratio" (default): log(latency / a roofline fitted per dtype,
``calibration.predictors.gemm_roofline``), so the forest learns the efficiency left after the
kernel's fixed latency and fitted compute / memory rates; "log": log(latency).

Measured (AIC vLLM 0.24.0 GEMM tables, 20 % held out, seed 0, p95 APE, forest fitted on the
training split): log target, features v2 (before): H100 rows 12.3 %, H200 rows 11.5 %, token
points 13.9 % / 13.6 %; see README for the figures of this version. Tried and dropped:
- per-shape interpolation (same dtype, n, k; latency interpolated in log m between the
  neighbouring training rows, the forest outside): p95 26-30 %, worse everywhere but one
  token-count band; the forest's residual interpolated the same way: 14-17 %. The tables are
  not smooth along m (AIC times m and m + 1 at each tile edge, and rows jump by 10-60 % from
  both m-neighbours: 12 % of rows by > 10 %, 2.7 % by > 20 %), so pooling across shapes beats
  a shape's own neighbours.
- 32 trees (the former default): p95 0.1-0.25 points lower, but the ratio target's forest
  changes leaf more often along m, so a token table's monotone walk visited 30-60 % more nodes
  than the former log-target forest; 20 trees visit fewer (bf16 ~600, fp8 ~710 per 128-count
  block, against 760 / 736 before).
- features with a period under 128 rows (m odd, fill of the last 16/32/64-row tile): 0.3-0.9
  points better by token points, but not monotone in m, which the token tables'
  ``predict_monotone`` walk needs (base.py); 64 trees, leaves of 2 or 5, 70 % bags: within
  the seed noise (~0.2 points).
"""

from __future__ import annotations

from calibration.predictors.base import FamilyPredictor
from calibration.predictors.gemm_roofline import TERMS, roofline_terms


class LinearPredictor(FamilyPredictor):
    family = "linear"
    kernels_per_op = 1
    ratio_reference = "calibration.predictors.gemm_roofline (fitted per dtype)"
    roofline_terms = staticmethod(roofline_terms)
    roofline_term_names = TERMS

    defaults = {"target": "ratio", "n_estimators": 20}

