"""Collective family: one small forest per collective kind over message bytes, group size,
link class and nccl-tests bus bytes. All-reduce trains on the framework's own (vLLM custom)
all-reduce rows where the profiles hold any, since that is what vLLM runs for TP; NCCL
all-reduce rows are used only when there are none."""

from __future__ import annotations

import pandas as pd

from calibration.predictors.base import FamilyPredictor


class CommPredictor(FamilyPredictor):
    family = "comm"
    kernels_per_op = 1

    defaults = {"n_estimators": 32, "min_samples_leaf": 1, "max_samples": None, "kind": "rf", "target": "ratio"}

    def select_rows(self, df: pd.DataFrame) -> pd.DataFrame:
        ar = df["op_name"] == "all_reduce"
        own = ar & (df["framework"].astype(str).str.lower() == "vllm")
        return df[~ar | own] if own.any() else df
