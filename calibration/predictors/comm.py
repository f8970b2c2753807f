"""Collective family: one small forest per collective kind over message bytes, group size,
link class and nccl-tests bus bytes. All-reduce trains on the framework's own (vLLM custom)
all-reduce rows where the profiles hold any, since that is what vLLM runs for TP; NCCL
all-reduce rows are used only when there are none."""

from __future__ import annotations

import pandas as pd

from calibration.predictors.base import FamilyPredictor, forest


class CommPredictor(FamilyPredictor):
    family = "comm"
    kernels_per_op = 1

    def __init__(self, n_estimators: int = 32, min_samples_leaf: int = 1, max_features: float = 1.0,
                 max_samples: float | None = None, seed: int = 0, kind: str = "rf", target: str = "ratio"):
        if target not in ("log", "ratio"):
            raise ValueError(f"target={target!r}; valid: log, ratio")
        self.target = target
        self.params = dict(n_estimators=n_estimators, min_samples_leaf=min_samples_leaf,
                           max_features=max_features, max_samples=max_samples, seed=seed, kind=kind)

    def make_model(self, n_rows: int):
        return forest(**self.params)(n_rows)

    def select_rows(self, df: pd.DataFrame) -> pd.DataFrame:
        ar = df["op_name"] == "all_reduce"
        own = ar & (df["framework"].astype(str).str.lower() == "vllm")
        return df[~ar | own] if own.any() else df
