"""Linear (token-count) family: GEMMs, one extra-trees forest per dtype over log m, n, k, FLOPs,
bytes and tile counts (the dtype picks the kernel: bf16 cuBLAS, fp8 Cutlass, fp8_block
DeepGEMM/Cutlass/FlashInfer, ...)."""

from __future__ import annotations

from calibration.predictors.base import FamilyPredictor, forest


class LinearPredictor(FamilyPredictor):
    family = "linear"
    kernels_per_op = 1

    def __init__(self, n_estimators: int = 16, min_samples_leaf: int = 3, max_features: float = 1.0,
                 max_samples: float | None = 0.5, seed: int = 0, kind: str = "et", target: str = "log"):
        if target not in ("log", "ratio"):
            raise ValueError(f"target={target!r}; valid: log, ratio")
        self.target = target
        self.params = dict(n_estimators=n_estimators, min_samples_leaf=min_samples_leaf,
                           max_features=max_features, max_samples=max_samples, seed=seed, kind=kind)

    def make_model(self, n_rows: int):
        return forest(**self.params)(n_rows)
