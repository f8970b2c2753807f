"""Held-out evaluation per family, next to a token-count-only baseline (paper Figure 7).

Split (``holdout_by``), drawn with numpy's default_rng(split_seed):

- "rows" (default; the issue's "held-out rows"): a random `holdout_fraction` of the rows.
  A held-out row's neighbours (the same shape at other token counts, other shapes at the
  same token count) usually stay in training.
- "token-points": whole *token points* are held out. A token point is the token axis of a
  family's query (GEMM m; attention (kind, batch size, prefill length, decode context); MoE
  tokens; comm message bytes). A held-out token point is unseen for every shape, so the
  model must interpolate along the axis the simulator moves along (batches grow and shrink
  every step) instead of copying a neighbouring row of the same m/batch. Shapes themselves
  (n, k, heads, expert shapes) stay in training. This split is harder than "rows".

Baseline: for each shape group (the shape columns without the token axis and without the
routed-load statistics), latency = a + b * tokens fitted by least squares on relative error
(weights 1/latency) over the same training rows; a group with < 2 training rows uses the
mean latency of its training rows, or the family-wide fit.

Metrics: APE = |pred / measured - 1| in percent; p50, p95 and mean (MAPE).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibration import features as F

TOKEN_POINT = {"linear": ("m",),
               "attention": ("op_name", "batch_size", "prefill_len_max", "decode_ctx_max"),
               "moe": ("num_tokens",),
               "comm": ("message_bytes",),
               "elementwise": ("num_tokens",),
               "gdn": ("op_name", "batch_size", "seq_len"),
               "encoder_attention": ("batch_size", "seq_len")}
SHAPE_GROUP = {"linear": ("timing_mode", "dtype", "n", "k"),
               "attention": ("timing_mode", "is_mla", "kv_dtype", "num_heads", "num_kv_heads",
                             "head_dim", "window_size"),
               "moe": ("timing_mode", "moe_dtype", "hidden_size", "inter_size", "topk",
                       "num_experts", "moe_tp_size", "moe_ep_size"),
               "comm": ("timing_mode", "op_name", "num_gpus", "link", "framework"),
               "elementwise": ("timing_mode", "op_name", "dtype", "hidden_size"),
               "gdn": ("timing_mode", "op_name", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"),
               "encoder_attention": ("timing_mode", "num_heads", "head_dim")}


@dataclass(frozen=True)
class FamilyError:
    """Held-out error of one family (percent)."""

    family: str
    train_rows: int
    rows: int                  # held-out rows
    p50: float
    p95: float
    mape: float
    baseline_p50: float
    baseline_p95: float
    baseline_mape: float
    out_of_range: int          # held-out rows flagged outside the training range
    submodels: dict | None = None   # "<mode>:<key>" -> {rows, p50, p95, mape, scope}; scope "module":
                                    # fitted on whole-module rows (attention.module_keys)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


HOLDOUT_BY = ("rows", "token-points")


def holdout_mask(df: pd.DataFrame, family: str, holdout_fraction: float, split_seed: int,
                 holdout_by: str = "rows") -> np.ndarray:
    """Boolean mask of held-out rows: random rows, or whole token points (`holdout_by`),
    drawn with `split_seed`. Rows: round(fraction x rows) rows, at least 1."""
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError(f"holdout_fraction={holdout_fraction} must be in (0, 1)")
    if isinstance(split_seed, bool) or not isinstance(split_seed, (int, np.integer)) or split_seed < 0:
        raise ValueError(f"split_seed={split_seed!r} must be a non-negative integer")
    if holdout_by not in HOLDOUT_BY:
        raise ValueError(f"holdout_by={holdout_by!r}; valid: {', '.join(HOLDOUT_BY)}")
    rng = np.random.default_rng(split_seed)
    if holdout_by == "rows":
        mask = np.zeros(len(df), dtype=bool)
        mask[rng.choice(len(df), size=max(1, int(round(holdout_fraction * len(df)))), replace=False)] = True
        return mask
    cols = list(TOKEN_POINT[family])
    point = df[cols].astype(str).agg("|".join, axis=1) if len(cols) > 1 else df[cols[0]].astype(str)
    uniq = np.array(sorted(point.unique()))
    n_out = max(1, int(round(holdout_fraction * len(uniq))))
    held = set(rng.choice(uniq, size=n_out, replace=False))
    return point.isin(held).to_numpy()


def ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(pred, float) / np.asarray(meas, float) - 1.0) * 100.0


def _summary(a: np.ndarray) -> tuple[float, float, float]:
    a = a[np.isfinite(a)]
    if len(a) == 0:
        return float("nan"), float("nan"), float("nan")
    return float(np.percentile(a, 50)), float(np.percentile(a, 95)), float(a.mean())


def _wls(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    w = 1.0 / y
    A = np.column_stack([np.ones_like(t), t]) * w[:, None]
    return np.linalg.lstsq(A, y * w, rcond=None)[0]


def baseline_predict(train: pd.DataFrame, test: pd.DataFrame, family: str) -> np.ndarray:
    """Token-count-only baseline: per shape group, latency linear in tokens (fit on `train`)."""
    tok_tr = F.tokens_of(F.canon_from_rows(train, family), family)
    tok_te = F.tokens_of(F.canon_from_rows(test, family), family)
    y_tr = train["latency_s_median"].to_numpy(float)
    cols = list(SHAPE_GROUP[family])
    g_tr = train[cols].astype(str).agg("|".join, axis=1).to_numpy()
    g_te = test[cols].astype(str).agg("|".join, axis=1).to_numpy()
    overall = _wls(tok_tr, y_tr)
    out = np.empty(len(test))
    order = pd.Series(np.arange(len(train))).groupby(g_tr).indices
    for g in np.unique(g_te):
        rows = g_te == g
        idx = order.get(g)
        if idx is None:
            coef = overall
        elif len(np.unique(tok_tr[idx])) < 2:
            out[rows] = y_tr[idx].mean()
            continue
        else:
            coef = _wls(tok_tr[idx], y_tr[idx])
        out[rows] = coef[0] + coef[1] * tok_te[rows]
    return np.maximum(out, 1e-9)


def evaluate_family(df: pd.DataFrame, family: str, holdout_fraction: float = 0.2, split_seed: int = 0,
                    predictor_params: dict | None = None, holdout_by: str = "rows"):
    """Fit on the training split, score the held-out split. Returns (FamilyError, predictor)."""
    from calibration.predictors import make_predictor

    pred = make_predictor(family, **(predictor_params or {}))
    df = pred.select_rows(df).reset_index(drop=True)
    test = holdout_mask(df, family, holdout_fraction, split_seed, holdout_by)
    train_df, test_df = df[~test].reset_index(drop=True), df[test].reset_index(drop=True)
    pred.fit(train_df)
    meas = test_df["latency_s_median"].to_numpy(float)
    canon = F.canon_from_rows(test_df, family)
    p = np.empty(len(test_df))
    oor = np.zeros(len(test_df), dtype=bool)
    modes = test_df["timing_mode"].astype(str).to_numpy()
    for mode in np.unique(modes):
        sel = modes == mode
        sub = {k: np.asarray(v)[sel] for k, v in canon.items()}
        p[sel], oor[sel] = pred.predict_canon(sub, mode)
    err_pct = ape(p, meas)
    m50, m95, mm = _summary(err_pct)
    b50, b95, bm = _summary(ape(baseline_predict(train_df, test_df, family), meas))
    err = FamilyError(family, len(train_df), len(test_df), m50, m95, mm, b50, b95, bm, int(oor.sum()),
                      _by_submodel(err_pct, modes, pred.submodel_keys(canon), getattr(pred, "module_keys", ())))
    return err, pred


def _by_submodel(err_pct: np.ndarray, modes: np.ndarray, keys: np.ndarray, module_keys) -> dict:
    """Held-out APE summary per sub-model ("<timing mode>:<key>")."""
    names = np.char.add(np.char.add(modes.astype(str), ":"), keys.astype(str))
    out = {}
    for name in sorted(set(names.tolist())):
        sel = names == name
        p50, p95, mape = _summary(err_pct[sel])
        out[name] = {"rows": int(sel.sum()), "p50": p50, "p95": p95, "mape": mape,
                     "scope": "module" if name.split(":", 1)[1] in module_keys else "op"}
    return out


FAMILY_ORDER = ("linear", "attention", "moe", "comm", "elementwise", "gdn", "encoder_attention")


def select_version(df: pd.DataFrame, family: str, framework_version: str | None) -> pd.DataFrame:
    """Rows of one framework version (collectives also keep library rows such as nccl)."""
    if framework_version is None or len(df) == 0:
        return df
    own = df["framework_version"].astype(str) == str(framework_version)
    if family == "comm":
        own |= df["framework"].astype(str).str.lower() != "vllm"
    return df[own]


def calibrate(profiles_root, gpu: str, out, framework_version: str | None = None,
              holdout_fraction: float = 0.2, split_seed: int = 0, families=None,
              predictor_params: dict | None = None, holdout_by: str = "rows") -> dict:
    """Fit every family with rows for `gpu`, measure held-out error, refit on all rows and
    write one bundle to `out`. Returns the manifest written."""
    from calibration.bundle import rows_sha256, save_bundle
    from calibration.memory_model import memory_entry
    from calibration.predictors import make_predictor
    from frontier.profile_schema import read_profiles

    frames = {family: read_profiles(profiles_root, family, gpu) for family in families or FAMILY_ORDER}
    versions = {str(v) for df in frames.values() if len(df) for v in df["framework_version"].dropna().unique()}
    if framework_version is not None and str(framework_version) not in versions:
        raise ValueError(f"no {gpu} profile rows of framework version {framework_version!r} under "
                         f"{profiles_root}; have {', '.join(sorted(versions)) or 'none'}")
    predictors, fam_info, errors, frameworks = {}, {}, {}, set()
    for family, df in frames.items():
        df = select_version(df, family, framework_version)
        if len(df) == 0:
            continue
        params = (predictor_params or {}).get(family, {})
        err, _ = evaluate_family(df, family, holdout_fraction, split_seed, params, holdout_by)
        full = make_predictor(family, **params)
        used = full.select_rows(df).reset_index(drop=True)
        full.fit(used)
        predictors[family] = full
        errors[family] = err.as_dict()
        info = full.describe()
        info.update(training_rows=len(used), training_rows_sha256=rows_sha256(used), params=params)
        fam_info[family] = info
        if family != "comm":
            frameworks |= {(str(f), None if pd.isna(v) else str(v))   # Vidur's rows name no version
                           for f, v in zip(df["framework"], df["framework_version"])}
    if not predictors:
        raise ValueError(f"no profile rows for gpu {gpu!r}"
                         + (f" and framework version {framework_version}" if framework_version else "")
                         + f" under {profiles_root}")
    fw = sorted(frameworks, key=lambda fv: (fv[0], fv[1] or ""))
    names = sorted({f for f, _ in fw})
    manifest = {"gpu": gpu, "framework": names[0] if len(names) == 1 else names or None,
                "framework_version": framework_version or (fw[0][1] if len(fw) == 1 else [v for _, v in fw]),
                "frameworks": [[f, v] for f, v in fw],
                "families": fam_info, "heldout_error": errors,
                "split": {"holdout_fraction": holdout_fraction, "split_seed": split_seed,
                          "holdout_by": holdout_by,
                          "scheme": f"{holdout_by} (see calibration.evaluate)"},
                "target": {f: ("log(latency_s)" if p.target == "log" else f"log(latency_s / {p.ratio_reference})")
                           for f, p in predictors.items()}}
    return save_bundle(out, predictors, manifest, memory=memory_entry(profiles_root, gpu))
