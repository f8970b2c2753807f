"""Collective family: one small forest per collective kind over message bytes, group size,
link class and nccl-tests bus bytes. All-reduce trains on the framework's own (vLLM custom)
all-reduce rows where the profiles hold any, since that is what vLLM runs for TP; NCCL
all-reduce rows are used only when there are none. MoE dispatch / combine rows (DeepEP) are
left out: they are priced by tokens and shape, from their own tables (``simulator.comm.moe_a2a``),
which these features (bytes, group, link) cannot tell apart."""

from __future__ import annotations

import pandas as pd

from calibration.predictors.base import FamilyPredictor
from frontier.ops import MOE_A2A_OPS


class CommPredictor(FamilyPredictor):
    family = "comm"
    kernels_per_op = 1

    defaults = {"n_estimators": 32, "min_samples_leaf": 1, "max_samples": None, "kind": "rf", "target": "ratio"}

    def select_rows(self, df: pd.DataFrame) -> pd.DataFrame:
        df = df[~df["op_name"].isin(MOE_A2A_OPS)]
        ar = df["op_name"] == "all_reduce"
        own = ar & (df["framework"].astype(str).str.lower() == "vllm")
        return df[~ar | own] if own.any() else df
