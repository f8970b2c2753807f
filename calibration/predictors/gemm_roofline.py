"""A GEMM roofline fitted per kernel class: the reference time of the linear family's "ratio" target.

    reference_s = fixed + FLOPs x s_per_flop + weight bytes x s_per_weight_byte
                  + activation bytes x s_per_act_byte

with FLOPs = 2 m n k, weight bytes = n k x the dtype's bytes per weight, activation bytes =
2 (m k + m n) (bf16 in and out), the quantities ``calibration.features`` uses. The four
coefficients are fitted per sub-model key (GEMM dtype, i.e. the kernel family: cuBLAS bf16,
Cutlass fp8, DeepGEMM / FlashInfer / Cutlass fp8 block-scaled) by non-negative least squares
on relative error (rows weighted 1 / latency) over the training rows, so the forest then
learns only log(latency / fitted roofline): the efficiency left after the kernel's own fixed
latency and its fitted compute and memory rates. A nominal roofline (``features.reference_s``)
is one shape for every kernel; the fp8 block-scaled rows of AIC's vLLM tables, for instance,
sit on a ~70 us floor that a 2 us fixed term does not describe.

Measured (AIC vLLM 0.24.0 GEMM tables, 20 % held out, seed 0, p95 APE; fitted on the
training split only): with the nominal reference the forest reached H200 rows 10.7 %, H100
token points 13.6 %; with this fitted one 9.8 % and 13.3 % (same features v2, 32 trees).
Tried (2026-11-30, features v7): a padded-FLOPs term (m rounded up to 64) and a wave term
(ceil(128 x 128 tiles / 132 SMs) x a tile's FLOPs): rows p95 H200 9.62 -> 9.31 %, H100
10.96 -> 10.84 %; not adopted for a few tenths of a point.

The fit (``fit_roofline``, ``fit_per_key``) and the keyed evaluation (``keyed_s``) serve every
family that fits its ratio reference (``FamilyPredictor.roofline_terms``): GEMM here and MoE
(``moe_roofline``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from calibration import features as F

TERMS = ("fixed_s", "s_per_flop", "s_per_weight_byte", "s_per_act_byte")
MIN_FIXED_S = 1e-9   # floor of the fixed term: the reference stays > 0 whatever the fit


def roofline_terms(canon: F.Canon) -> np.ndarray:
    """Rows x TERMS design matrix of a linear canonical table: 1, FLOPs, weight bytes, activation bytes."""
    m, n, k = (np.asarray(canon[c], dtype=float) for c in ("m", "n", "k"))
    return np.column_stack([np.ones_like(m), 2 * m * n * k, n * k * F.dtype_bytes(canon["dtype"]),
                            2 * (m * k + m * n)])


def fit_roofline(terms: np.ndarray, latency_s: np.ndarray) -> np.ndarray:
    """Non-negative coefficients (TERMS) minimising sum((terms @ c) / latency - 1)^2; the
    fixed term is floored at MIN_FIXED_S."""
    from scipy.optimize import nnls          # fitting only: loading a bundle does not import scipy

    latency_s = np.asarray(latency_s, dtype=float)
    coef = nnls(terms / latency_s[:, None], np.ones(len(latency_s)))[0]
    coef[0] = max(coef[0], MIN_FIXED_S)
    return coef


def fit_per_key(terms: np.ndarray, latency_s: np.ndarray, keys: np.ndarray) -> dict[str, np.ndarray]:
    """``fit_roofline`` on the rows of each sub-model key: {key: coefficients} (terms: a
    family's ``roofline_terms`` matrix)."""
    return {str(key): fit_roofline(terms[keys == key], latency_s[keys == key]) for key in sorted(set(keys))}


def keyed_s(terms: np.ndarray, keys: np.ndarray, coefs: dict[str, Sequence[float]]) -> np.ndarray:
    """Reference seconds per row: the row's terms times the coefficients of its sub-model key;
    NaN for a key without a fit."""
    if len(keys) and (keys == keys[0]).all():            # one key (e.g. a token table): no masks
        coef = coefs.get(str(keys[0]))
        return terms @ np.asarray(coef, dtype=float) if coef is not None else np.full(len(terms), np.nan)
    out = np.full(len(terms), np.nan)
    for key in set(keys.tolist()):
        if key in coefs:
            rows = keys == key
            out[rows] = terms[rows] @ np.asarray(coefs[key], dtype=float)
    return out
