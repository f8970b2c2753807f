"""Attention family: random forests over the batch's length distribution.

Features (calibration.features): batch size, prefill/decode request counts, total tokens,
min/max/mean/p50/p90 of prefill lengths and of decode context lengths, cached-prefix max,
head shape, window, KV dtype, plus FLOPs of the causal pairs, decode KV bytes, query
tiles, and per-request work terms (causal pairs per prefill, 128-query tiles per SM wave,
128-key tiles per decode, decode CTAs, query heads per KV head). One extra-trees forest
(randomized split points interpolate between the measured length grid better than
RandomForest's mid-points: p95 15.9 % vs 16.9 % on H100) per (MHA | MLA module) x KV
dtype, on the "ratio" target: 8 unbagged trees with leaves of 2 (H100 rows split p95
8.3 % vs 10.5 % for 16 bagged trees with leaves of 3; 16 MB vs 8.5 MB pickled).

Tried, not kept (2026-11-30, features v8): a reference fitted per sub-model as GEMM and MoE
have (``FamilyPredictor.roofline_terms``; terms: fixed, prefill FLOPs, decode FLOPs at their own
rate, KV bytes, query/output bytes). Held-out p95 of AIC's tables: H200 rows 8.12 -> 7.28 %,
H100 8.46 -> 7.74 %, token points H200 14.06 -> 11.53 %, H100 13.6 -> 12.3 %, B300 rows 12.0 ->
11.1 %, but B200 rows 16.4 -> 16.7 %; end to end (``bench/silicon_e2e.py --predictor-bundle
auto``, 1,309 rows) TTFT / TPOT MAPE 33.3 / 15.3 -> 33.5 / 15.8 %, the Blackwell MiniMax-M2.5
rows' TPOT 13.1-17.0 -> 15.3-18.3 %, H100 / H200 unchanged. The measured grid holds uniform
batches of a few head shapes; what the simulator asks (mixed, non-uniform batches, MiniMax's
per-rank heads) sits partly outside it, where the nominal reference extrapolates better.

Scope: ``module_keys`` names the sub-models fitted on "module" rows (AIC's MLA tables time the
whole attention layer, its projections included); ``simulator.predictor_cost`` does not price
with them (they sit ~2x above the layer's pieces at decode; see there): it prices the MLA kernel
with the roofline and the projections as GEMMs.

Mixed batches: measured tables (AIC) hold only uniform batches (all prefill of one length,
or all decode of one context). When the training rows hold no "mixed" rows, a mixed batch
is priced as the sum of its prefill part and its decode part, each from its own length
distribution (vLLM runs one varlen kernel, so this counts one kernel's fixed cost twice:
a few microseconds). Rows with op_name "mixed" (from the profiler) are fitted directly, and
then mixed batches are queried as one vector. Measured on our H200 torch-backend profiles
(``bench/mixed_attention.py``, kernel mode): the sum fitted on the 192 uniform rows misses the
120 mixed rows by p50 5.7 % / p95 16.0 % (median ratio 1.057); a fit that also sees mixed rows
reaches p95 6.2 % on 24 held-out ones (the sum rule there: 15.5 %).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from calibration import features as F
from calibration.predictors.base import FamilyPredictor


class AttentionPredictor(FamilyPredictor):
    family = "attention"
    kernels_per_op = 2   # KV-cache write + attention kernel

    defaults = {"target": "ratio", "min_samples_leaf": 2, "max_samples": None, "n_estimators": 8}

    def submodel_keys(self, canon: F.Canon) -> np.ndarray:
        mla = np.asarray(canon["is_mla"], dtype=bool)
        return np.asarray([f"{'mla' if m else 'mha'}:{d}" for m, d in zip(mla, canon["kv_dtype"])], dtype=object)

    def fit(self, df: pd.DataFrame) -> "AttentionPredictor":
        self.has_mixed = bool((df["op_name"] == "mixed").any())
        super().fit(df)
        keys = self.submodel_keys(F.canon_from_rows(df, self.family))
        module = (df["scope"] == "module").to_numpy(bool) if "scope" in df.columns else np.zeros(len(df), bool)
        self.module_keys = tuple(sorted(set(keys[module])))
        return self

    def describe(self) -> dict:
        return {**super().describe(), "module_keys": list(getattr(self, "module_keys", ()))}

    def predict_canon(self, canon: F.Canon, timing_mode: str = "kernel"):
        names = np.asarray(canon["op_name"]).astype(str)
        mixed = names == "mixed"
        if self.has_mixed or not mixed.any():
            return super().predict_canon(canon, timing_mode)
        out = np.full(len(names), np.nan)
        oor = np.ones(len(names), dtype=bool)
        if (~mixed).any():
            rest = {k: np.asarray(v)[~mixed] for k, v in canon.items()}
            out[~mixed], oor[~mixed] = super().predict_canon(rest, timing_mode)
        sub = {k: np.asarray(v)[mixed] for k, v in canon.items()}
        pre, dec = F.split_mixed(sub)
        p1, m1 = super().predict_canon(pre, timing_mode)
        p2, m2 = super().predict_canon(dec, timing_mode)
        out[mixed], oor[mixed] = p1 + p2, m1 | m2
        return out, oor
