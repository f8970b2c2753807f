"""Elementwise family: norms, RoPE, activation and KV write, one sub-model per (op kind, dtype).

Features (calibration.features): log2 tokens in the TP slice, log2 width (elements per token
on the rank), log2 bytes moved (passes x tokens x width x element bytes) and the element
bytes; target log(latency). These kernels are memory bound: latency = fixed + bytes /
bandwidth (+ a per-token term) is a linear regression (`BytesLinear`) that extrapolates past
the largest profiled batch, where a forest stays flat; a forest wins where the curve bends
(e.g. a launch floor up to some size). Each sub-model picks one of the two by held-out error
on its own training rows (`PickByHoldout`), and `describe()` names the pick and both errors.

On CPU profiles of Llama-3.1-8B (TP 1/2/4/8, 1..512 tokens, fp32, OMP_NUM_THREADS=1) the
held-out error (calibration.evaluate, 20 %, seed 0; 400 rows) was p50 / p95 / MAPE 6.7 / 85 /
15.9 % split by rows and 4.3 / 97 / 30.2 % split by token points, next to the per-shape
token-line baseline's 6.4 / 89 / 15.8 % and 4.4 / 96 / 30.4 %: the same model class on noisy
CPU timings of a shared box. GPU profiles are what this family is for.
"""

from __future__ import annotations

import numpy as np

from calibration import features as F
from calibration.predictors.base import FamilyPredictor, forest

HOLDOUT_FRACTION = 1 / 3   # share of a sub-model's distinct token counts held out to choose
MIN_TOKEN_POINTS = 3       # below this there is nothing to hold out: linear regression


class BytesLinear:
    """latency = a + b x bytes + c x tokens, least squares on relative error (weights 1 /
    latency), over features X (columns lg_tokens, lg_width, lg_bytes, ...: log2(1 + v)) and
    y = log(latency). Predicts log(latency), floored at 1 ns."""

    def _design(self, X: np.ndarray) -> np.ndarray:
        return np.column_stack([np.ones(len(X)), np.exp2(X[:, 2]) - 1.0, np.exp2(X[:, 0]) - 1.0])

    def fit(self, X: np.ndarray, y: np.ndarray) -> "BytesLinear":
        t = np.exp(y)
        A = self._design(X) / t[:, None]
        self.coef = np.linalg.lstsq(A, np.ones(len(t)), rcond=None)[0]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(self._design(X) @ self.coef, 1e-9))


class PickByHoldout:
    """Regressor that is a linear regression or a small forest, whichever has the lower mean
    absolute percentage error on held-out token counts (column 0 of X), refitted on all rows.

    y is a log-space target, so the percentage error of a prediction p is |exp(p - y) - 1|.
    Ties go to the linear regression. ``choice`` is "linear" or "forest"; ``errors`` holds
    both held-out MAPEs in percent (None when there were too few token counts to hold out).
    """

    def __init__(self, forest_params: dict, seed: int = 0) -> None:
        self.forest_params = forest_params
        self.seed = seed

    def _candidates(self, n_rows: int) -> dict:
        return {"linear": BytesLinear(), "forest": forest(**self.forest_params)(n_rows)}

    def fit(self, X: np.ndarray, y: np.ndarray) -> "PickByHoldout":
        tokens = np.unique(X[:, 0])
        self.errors: dict[str, float | None] = {"linear": None, "forest": None}
        self.choice = "linear"
        if len(tokens) >= MIN_TOKEN_POINTS:
            rng = np.random.default_rng(self.seed)
            held = rng.choice(tokens, size=max(1, int(round(HOLDOUT_FRACTION * len(tokens)))), replace=False)
            test = np.isin(X[:, 0], held)
            for name, model in self._candidates(int((~test).sum())).items():
                model.fit(X[~test], y[~test])
                err = np.abs(np.exp(model.predict(X[test]) - y[test]) - 1.0) * 100.0
                self.errors[name] = float(err.mean())
            if self.errors["forest"] < self.errors["linear"]:
                self.choice = "forest"
        self.model = self._candidates(len(X))[self.choice]
        self.model.fit(X, y)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.model.predict(X)


class ElementwisePredictor(FamilyPredictor):
    family = "elementwise"
    kernels_per_op = 1

    defaults = {"min_samples_leaf": 1, "max_samples": None, "target": "log"}

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        if self.target != "log":
            raise ValueError(f"elementwise target={self.target!r}; valid: log (its linear candidate fits "
                             "latency = a + b x bytes + c x tokens)")

    def make_model(self, n_rows: int) -> PickByHoldout:
        return PickByHoldout(self.params, seed=self.params["seed"])

    def submodel_keys(self, canon: F.Canon) -> np.ndarray:
        return np.asarray([f"{o}:{d}" for o, d in zip(canon["op_name"], canon["dtype"])], dtype=object)

    def describe(self) -> dict:
        out = super().describe()
        out["model_choice"] = {f"{m}:{k}": {"model": model.choice, "heldout_mape": model.errors}
                               for (m, k), model in self.models.items()}
        return out
