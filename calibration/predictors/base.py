"""One fitted predictor per operator family: sub-models per kernel key, a fast query path.

Contract (every family):
- ``fit(df)`` takes profile rows of one family (frontier.profile_schema columns) and fits
  one regressor per sub-model key (the column that switches kernels: GEMM/MoE dtype,
  attention KV dtype and module scope, collective kind). Target ("target" attribute):
  "log" = log(latency_s), or "ratio" = log(latency_s / features.reference_s), a smooth
  roofline-style reference, so the forest learns only the efficiency surface (GEMM and MoE
  divide by a roofline fitted per sub-model instead: ``roofline_terms``). Chosen per
  family by held-out error on the H100 AIC tables (features v2, 20 % held out, seed 0, p95 APE):
  GEMM log 13.9 % vs ratio 13.6 % by token points (12.3 vs 11.9 % by rows); attention ratio
  13.6 % by token points, 8.5 % by rows; MoE ratio 14.7 % / 12.9 %. (Features v1, RandomForest:
  attention ratio 15.2 % vs log 18.5 %; MoE ratio 20.2 % vs log 26.3 %; comm ratio 22.5 % vs
  log 24.1 %.)
- ``predict_s(ops, timing_mode)`` prices simulator op specs, ``predict_canon`` canonical
  tables (profile rows): seconds, batched, plus a boolean mask of queries outside the
  training range (any feature outside the sub-model's [min, max], or an unknown key).
  Unknown keys price as NaN.
- Evaluation: forests (and gradient boosting) are compiled once per sub-model, lazily after
  fit or unpickling, into flat arrays (``tree_eval``, ~10-20 ms for 0.2-0.4 M nodes) that give
  sklearn's numbers without its ~1 ms per-call overhead: ~15-50 us for one row, a walk per
  run of rows that share a leaf for a block of one shape over growing token counts
  (``predict_monotone``), numpy lockstep for other batches.
- Memoization: ``predict_canon`` (tables: held-out evaluation) rounds feature vectors to a
  grid of 1/64 in log2 space (~1 %) and caches the model output per (sub-model, grid point).
  ``predict_s`` (simulator ops):
  * GEMM and elementwise (TOKEN_TABLES): an op is a fixed shape times a token count, and
    the batch engine asks for each new count once, so ops rarely repeat. The first query of
    a block of TABLE_BLOCK consecutive counts tabulates the whole block for that (sub-model,
    shape): ``calibration.features`` on the 128 rows and one ``predict_monotone`` (~0.3-0.6 ms
    CPU for a 32-tree GEMM forest; the 20-tree ratio-target one, features and the fitted
    roofline included: ~0.33 ms), exact at every count (no grid); later queries of the
    block are a list lookup (~1 us replayed: ``price_op`` resolves an op's canonical shape
    and sub-model once per shape, keyed by its fields other than the token count,
    TOKEN_FIELDS). The cost is bounded by the blocks the simulation's token counts touch, so it falls per query as a run gets longer
    (GEMM queries replayed from Llama-3.1-8B runs of 300 / 2000 requests: blocks of 32, 64,
    128 cost 69.7 / 53.7 / 48.8 and 30.7 / 23.8 / 18.0 us CPU per query; 256 would cross the
    128-row period of m_frac128, so the rows would no longer grow monotonically). Short runs
    pay more than the former per-row walks: 100 requests tabulate 85 blocks for 383 GEMM
    queries, and all queries cost 46.8 us CPU each without compiling, against 36.8 us before.
  * attention and MoE (SCALAR_QUERIES: one new op per step or token count) are priced in
    plain Python (``attention_query``, ``moe_query``; their scalar features are checked
    against ``features`` on the first row) by ``_price_cells``: ``cell_parts`` rounds each
    canonical row's counts and length (attention) or load (MoE) statistics to 1/16 in log2,
    and the memo keeps per (sub-model, shape) a dict of cells, each with the model output and
    out-of-range flag of the cell's representative row (``cell_row``; the output kept
    exponentiated, so a hit multiplies): a hit computes no features (hit rate, added error:
    those modules). MoE gets no token table: its routed load
    comes from the engine's router, so an op is not a function of the token count alone.
  * other families (comm) go through ``predict_canon``, with ops also cached by value
    (frozen dataclasses).
  The reference time of the "ratio" target is each query's exact one. Lifetime: compiled
  forests and memos live as long as the predictor (one per bundle file and process:
  ``calibration.bundle.shared_bundle``), so the simulations of a sweep share them: an entry
  depends only on its key, never on the queries before it, so sharing changes no price
  (tested), and each memo is cleared when it reaches its cap (MAX_MEMO_CELLS cells,
  MAX_MEMO_BLOCKS token-table blocks, MAX_OP_CACHE ops: tens of MB at most). Each
  ``simulator.predictor_cost.PredictorCostModel`` zeroes the counters (``reset_counters``);
  ``reset_cache`` also forgets the memos. ``memo_lookups`` /
  ``memo_misses`` count rows (token tables: a miss is a query that built its block;
  ``table_rows`` counts tabulated rows).

16-bit floats: a key whose fp16 / bf16 sub-model is missing is answered by the other one
(``float16_twin``: "mha:bf16" -> "mha:fp16"). Both run on the same tensor cores at the same
dense rate on every GPU of the catalogue and move the same bytes, so a bundle fitted on
Vidur's fp16 rows prices the simulator's bf16 ops (which it asked for in vain before
2026-12-01: every query of such a bundle went to the roofline) and an fp16 row is priced from
AIConfigurator's bf16 tables; a key that has its own sub-model always uses it.

Timing modes: a sub-model is fitted per (mode, key) that the rows hold. A mode without rows
is derived from the other: launch = kernel + kernels_per_op x launch_overhead_s (and the
reverse, floored at 10 % of the launch time). launch_overhead_s is measured as the median
(launch - kernel) gap over shapes timed both ways when the rows have any, else
DEFAULT_LAUNCH_OVERHEAD_S; ``launch_overhead_source`` says which.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import operator
import warnings
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from calibration import features as F
from calibration.predictors import attention_query, moe_query
from calibration.predictors.gemm_roofline import fit_per_key, keyed_s
from calibration.predictors.tree_eval import CompiledForest, compile_forest

DEFAULT_LAUNCH_OVERHEAD_S = 5e-6   # per kernel launch from Python (assumption, not measured here)
GRID = 64.0                         # table memo grid (predict_canon): 1/64 in log2 feature space
ROW_WALK_MAX_ROWS = 12              # misses up to this many rows: per-row walk (cheaper than lockstep)
MAX_OP_CACHE = 20_000               # op memo entries; cleared when full (attention ops rarely repeat)
MAX_MEMO_CELLS = 32_768             # grid-memo cells per memo (~0.5 kB each); cleared when full
MAX_MEMO_BLOCKS = 2_048             # token-table blocks (~5.5 kB each); cleared when full
_RANGE_TOL = 1e-6
# Families the simulator asks for op by op, with a scalar (plain Python) query path.
SCALAR_QUERIES = {"attention": attention_query, "moe": moe_query}
# Families whose op is a fixed shape times a token count (this canonical column): ``predict_s``
# reads exact per-token-count tables, built TABLE_BLOCK consecutive counts at a time.
TOKEN_TABLES = {"linear": "m", "elementwise": "num_tokens"}
# The op field holding that token count: the op's other fields fix its canonical shape.
TOKEN_FIELDS = {"linear": "m", "elementwise": "tokens"}
TABLE_BLOCK = 128                   # block j holds token counts j*128+1 .. (j+1)*128 (GEMM m_frac128 period)


FOREST_DEFAULTS = dict(n_estimators=16, min_samples_leaf=3, max_features=1.0, max_samples=0.5, seed=0,
                       kind="et", target="log")


class FamilyPredictor:
    """Per-family regressor set. Subclasses set `family`, `kernels_per_op` and `defaults`."""

    family: str = ""
    kernels_per_op: int = 1
    target: str = "log"   # "log": log(latency_s); "ratio": log(latency_s / features.reference_s)
    ratio_reference: str = "features.reference_s"   # what "ratio" divides by (a family may fit its own)
    # A family that sets these divides its "ratio" target by a roofline fitted per sub-model key
    # instead (``gemm_roofline.fit_per_key``; ``self.roofline``: key -> coefficients; queries read
    # ``_query_roofline``, which adds the 16-bit float twins, ``with_float16_twins``):
    # canon -> rows x terms matrix (a staticmethod), and the terms' names.
    roofline_terms: Callable | None = None
    roofline_term_names: tuple[str, ...] = ()
    defaults: dict = {}   # a family's own forest parameters and target (overrides FOREST_DEFAULTS)

    def __init__(self, **overrides) -> None:
        params = {**FOREST_DEFAULTS, **self.defaults, **overrides}
        unknown = sorted(set(params) - set(FOREST_DEFAULTS))
        if unknown:
            raise ValueError(f"unknown {self.family} predictor parameter(s) {unknown}; "
                             f"valid: {', '.join(FOREST_DEFAULTS)}")
        target = params.pop("target")
        if target not in ("log", "ratio"):
            raise ValueError(f"target={target!r}; valid: log, ratio")
        self.target = target
        self.params = params

    def make_model(self, n_rows: int):
        return forest(**self.params)(n_rows)

    def submodel_keys(self, canon: F.Canon) -> np.ndarray:
        return np.asarray([str(v) for v in canon[F.SUBMODEL_KEY[self.family]]], dtype=object)

    def select_rows(self, df: pd.DataFrame) -> pd.DataFrame:
        """Rows this family trains on (hook: e.g. drop rows a kernel never serves)."""
        return df

    # ------------------------------------------------------------------ fitting

    def fit(self, df: pd.DataFrame) -> "FamilyPredictor":
        df = self.select_rows(df).reset_index(drop=True)
        if len(df) == 0:
            raise ValueError(f"no {self.family} rows to fit")
        canon = F.canon_from_rows(df, self.family)
        X = F.featurize(canon, self.family)
        keys = self.submodel_keys(canon)
        latency = df["latency_s_median"].to_numpy(float)
        self.roofline: dict[str, tuple[float, ...]] = {}    # plain floats: the scalar queries multiply them
        if self.target == "ratio" and self.roofline_terms is not None:
            fits = fit_per_key(self.roofline_terms(canon), latency, keys)
            self.roofline = {key: tuple(map(float, coef)) for key, coef in fits.items()}
        self._query_roofline = with_float16_twins(self.roofline)
        y = np.log(latency) - self._offset(canon, keys)
        modes = df["timing_mode"].astype(str).to_numpy()
        self.models, self.ranges, self.n_rows = {}, {}, {}
        for mode in sorted(set(modes)):
            for key in sorted(set(keys[modes == mode])):
                sel = (modes == mode) & (keys == key)
                model = self.make_model(int(sel.sum()))
                model.fit(X[sel], y[sel])
                self.models[(mode, key)] = model
                self.ranges[(mode, key)] = (X[sel].min(axis=0), X[sel].max(axis=0))
                self.n_rows[(mode, key)] = int(sel.sum())
        self.feature_names = F.FEATURE_NAMES[self.family]
        self._fit_launch_overhead(df, X, keys)
        self._compiled = {}
        self.reset_cache()
        return self

    def _fit_launch_overhead(self, df: pd.DataFrame, X: np.ndarray, keys: np.ndarray) -> None:
        frame = pd.DataFrame(X).assign(_key=keys, _mode=df["timing_mode"].to_numpy(),
                                       _y=df["latency_s_median"].to_numpy(float))
        cols = list(range(X.shape[1]))
        both = frame.pivot_table(index=["_key", *cols], columns="_mode", values="_y", aggfunc="median")
        if {"kernel", "launch"} <= set(both.columns) and both[["kernel", "launch"]].notna().all(axis=1).any():
            gap = (both["launch"] - both["kernel"]).dropna()
            self.launch_overhead_s = max(float(np.median(gap)) / self.kernels_per_op, 0.0)
            self.launch_overhead_source = f"measured ({len(gap)} shapes timed both ways)"
        else:
            self.launch_overhead_s = DEFAULT_LAUNCH_OVERHEAD_S
            self.launch_overhead_source = "assumed (no shape timed both ways)"

    # ------------------------------------------------------------------ querying

    def _offset(self, canon: F.Canon, keys: np.ndarray | None = None) -> np.ndarray:
        """log of the "ratio" target's reference seconds per row (0 for the "log" target);
        ``keys``: the rows' ``submodel_keys`` when the caller has them."""
        if self.target != "ratio":
            return np.zeros(len(next(iter(canon.values()))))
        if self.roofline_terms is None:
            return np.log(F.reference_s(canon, self.family))
        if keys is None:
            keys = self.submodel_keys(canon)
        return np.log(keyed_s(self.roofline_terms(canon), keys, self._query_roofline))

    def reset_cache(self) -> None:
        """Forget memoized predictions (and the memo counters)."""
        self._grid_cache: dict[tuple, float] = {}
        # memo cells (price_op of SCALAR_QUERIES): (sub-model, shape) -> {cell: (scale, out of range)}
        self._row_cache: dict[tuple, dict[tuple, tuple[float, bool]]] = {}
        self._num_cells = 0
        self._op_cache: dict[tuple, tuple[float, bool]] = {}
        self._key_cache: dict[tuple, str] = {}
        # price_op's per-shape entries: (mode, KEY_COLUMNS values) -> (sub-model, shift, cells) for cells;
        # (mode, op type, op fields but the token count) -> (sub-model, shift, shape, row) for tables
        self._shape_cache: dict[tuple, tuple] = {}
        self._tables: dict[tuple, tuple[int, list[float], list[bool]]] = {}
        self._scalar_ok: bool | None = None   # scalar query features agree with features (checked once)
        self.reset_counters()

    def reset_counters(self) -> None:
        """Zero the memo counters, keeping the memos (a new simulation with a shared bundle).

        A memo entry depends only on its key (the model at a cell's centre, an exact token
        table, a value-keyed op), never on what was asked before, so entries kept from an
        earlier simulation change no price, only how often a model is walked. Each memo is
        bounded (MAX_MEMO_CELLS, MAX_MEMO_BLOCKS, MAX_OP_CACHE: cleared when full)."""
        self.memo_lookups = 0     # feature rows looked up in the memos
        self.memo_misses = 0      # of which the model evaluated (token tables: built the row's block)
        self.table_rows = 0       # token-table rows evaluated (TABLE_BLOCK per block built)

    def __getstate__(self):
        """Pickled without memos, and with every forest as its CompiledForest (the same
        predictions; sklearn is then not needed, nor imported, to load and query a bundle)."""
        state = dict(self.__dict__)
        for name in ("_grid_cache", "_row_cache", "_op_cache", "_key_cache", "_shape_cache", "_tables", "_compiled",
                     "_scalar_ok", "memo_lookups", "memo_misses", "table_rows", "_query_roofline", "_num_cells"):
            state.pop(name, None)
        state["models"] = {k: _compiled_model(m) for k, m in self.models.items()}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._compiled = {}
        self._query_roofline = with_float16_twins(getattr(self, "roofline", {}))
        self.reset_cache()

    def _model_for(self, mode: str, key: str) -> tuple[tuple | None, float]:
        """(model key, additive seconds) that answers `mode` for sub-model `key`: its own
        sub-model in `mode`, else in the other mode (shifted by the launch overhead), else the
        same of its 16-bit float twin (``float16_twin``)."""
        other = "kernel" if mode == "launch" else "launch"
        shift = self.kernels_per_op * self.launch_overhead_s
        for k in (key, float16_twin(key)):
            if (mode, k) in self.models:
                return (mode, k), 0.0
            if (other, k) in self.models:
                return (other, k), (shift if mode == "launch" else -shift)
        return None, 0.0

    def _compiled_for(self, mkey: tuple) -> tuple[CompiledForest | None, list[float], list[float]]:
        """(compiled forest or None, range lows, range highs incl. tolerance) of a sub-model, built once."""
        hit = self._compiled.get(mkey)
        if hit is None:
            lo, hi = self.ranges[mkey]
            hit = self._compiled[mkey] = (compile_forest(self.models[mkey]), (lo - _RANGE_TOL).tolist(),
                                          (hi + _RANGE_TOL).tolist())
        return hit

    def _evaluate(self, mkey: tuple, X: np.ndarray) -> np.ndarray:
        """Model output per row: the compiled forest (a few rows walk one by one, more in
        numpy lockstep; same numbers) when the model is one, else the model's own predict."""
        compiled = self._compiled_for(mkey)[0]
        if compiled is None or np.isnan(X).any():
            return self.models[mkey].predict(X)
        if len(X) <= ROW_WALK_MAX_ROWS:
            return np.array([compiled.predict_row(x) for x in X.tolist()])
        return compiled.predict(X)

    def predict_canon(self, canon: F.Canon, timing_mode: str = "kernel") -> tuple[np.ndarray, np.ndarray]:
        """(seconds, out_of_range mask) for a canonical table."""
        _check_mode(timing_mode)
        X = F.featurize(canon, self.family)
        keys = self.submodel_keys(canon)
        offset = self._offset(canon, keys)
        out = np.full(len(X), np.nan)
        oor = np.ones(len(X), dtype=bool)
        for key in set(keys):
            rows = np.flatnonzero(keys == key)
            mkey, shift = self._model_for(timing_mode, key)
            if mkey is None:
                continue
            lo, hi = self.ranges[mkey]
            oor[rows] = ((X[rows] < lo - _RANGE_TOL) | (X[rows] > hi + _RANGE_TOL)).any(axis=1)
            out[rows] = np.exp(self._cached_predict(mkey, X[rows]) + offset[rows]) + shift
        if timing_mode == "kernel":
            out = np.where(np.isnan(out), out, np.maximum(out, 0.0))
        return out, oor

    def _cached_predict(self, mkey: tuple, X: np.ndarray) -> np.ndarray:
        """Model output (log space) per row, memoized on the feature grid."""
        grid = np.round(X * GRID) / GRID
        res = np.empty(len(X))
        missing = []
        for i, row in enumerate(grid):
            hit = self._grid_cache.get((mkey, row.tobytes()))
            if hit is None:
                missing.append(i)
            else:
                res[i] = hit
        self.memo_lookups += len(X)
        if missing:
            self.memo_misses += len(missing)
            pred = self._evaluate(mkey, grid[missing])
            if len(self._grid_cache) + len(missing) > MAX_MEMO_CELLS:
                self._grid_cache.clear()
            for i, p in zip(missing, pred):
                self._grid_cache[(mkey, grid[i].tobytes())] = float(p)
                res[i] = p
        return res

    def canon_of_ops(self, ops: Sequence) -> F.Canon:
        return F.canon_from_ops(ops, self.family)

    def predict_s(self, ops: Sequence, timing_mode: str = "kernel",
                  return_mask: bool = False):
        """Seconds per op (batched); with `return_mask`, also the out-of-range mask."""
        if self.family in TOKEN_TABLES or self.family in SCALAR_QUERIES:
            priced = self.price_ops(ops, timing_mode)
            res = np.array([p for p, _ in priced], dtype=float)
            return (res, np.array([m for _, m in priced], dtype=bool)) if return_mask else res
        _check_mode(timing_mode)
        res, oor = self._predict_ops_canon(ops, timing_mode)
        return (res, oor) if return_mask else res

    def price_ops(self, ops: Sequence, timing_mode: str) -> list[tuple[float, bool]]:
        """(seconds, out of range) per op: ``predict_s`` as plain Python pairs, without its
        arrays (the simulator's per-step path, ~3 us less per call)."""
        if self.family in TOKEN_TABLES or self.family in SCALAR_QUERIES:
            return [self.price_op(op, timing_mode) for op in ops]
        _check_mode(timing_mode)
        res, oor = self._predict_ops_canon(ops, timing_mode)
        return list(zip(res.tolist(), oor.tolist()))

    def price_op(self, op, timing_mode: str) -> tuple[float, bool]:
        """(seconds, out of range) of one op of a TOKEN_TABLES or SCALAR_QUERIES family (the
        simulator's query, op by op): exact per-token-count tables (GEMM, elementwise) or memo
        cells on the rows' statistics (attention, MoE)."""
        _check_mode(timing_mode)
        token_column = TOKEN_TABLES.get(self.family)
        if token_column is not None:
            return self._price_tabled(op, token_column, timing_mode)
        query = SCALAR_QUERIES.get(self.family)
        if query is None:
            raise ValueError(f"price_op prices {sorted({*TOKEN_TABLES, *SCALAR_QUERIES})} ops, not "
                             f"{self.family!r}; use price_ops or predict_s")
        return self._price_cells(query, op, timing_mode)

    def _predict_ops_canon(self, ops: Sequence, timing_mode: str) -> tuple[np.ndarray, np.ndarray]:
        """(seconds, out-of-range mask) of ops through ``predict_canon``, memoized per op value."""
        res = np.empty(len(ops))
        oor = np.zeros(len(ops), dtype=bool)
        todo = []
        for i, op in enumerate(ops):
            hit = self._op_cache.get((timing_mode, op))
            if hit is None:
                todo.append(i)
            else:
                res[i], oor[i] = hit
        if todo:
            if len(self._op_cache) >= MAX_OP_CACHE:
                self._op_cache.clear()
            p, m = self.predict_canon(self.canon_of_ops([ops[i] for i in todo]), timing_mode)
            for j, i in enumerate(todo):
                self._op_cache[(timing_mode, ops[i])] = (float(p[j]), bool(m[j]))
                res[i], oor[i] = p[j], m[j]
        return res, oor

    def _price_cells(self, query, op, timing_mode: str) -> tuple[float, bool]:
        """(seconds, out of range) of one op from the memo cells of its rows (``query.cell_parts``:
        grid indices of the rows' counts and length or load statistics). A cell is evaluated
        once, on its representative canonical row (``query.cell_row``): the memo keeps the
        exponentiated model output and the out-of-range flag of that row, so a hit computes no
        features and an entry depends only on its key; the reference time of the ratio target is
        each query's exact one (seconds = exp(output) x reference + launch shift). The cells of
        a (sub-model, shape) are one dict, found through the (mode, shape) entry."""
        total, flag = 0.0, False
        ratio = self.target == "ratio"
        for shape, cell, reference_s in self._cell_parts(query, op):
            entry = self._shape_cache.get((timing_mode, shape))
            if entry is None:
                entry = self._cells_entry(query, timing_mode, shape, cell)
            mkey, shift, cells = entry
            if mkey is None:
                return math.nan, True
            self.memo_lookups += 1
            hit = cells.get(cell)
            if hit is None:
                hit = self._evaluate_cell(query, mkey, shape, cell, cells)
            scale, oor = hit
            flag = flag or oor
            seconds = scale * reference_s + shift if ratio else scale + shift
            total += max(seconds, 0.0) if timing_mode == "kernel" else seconds
        return total, flag

    def _cells_entry(self, query, timing_mode: str, shape: tuple, cell: tuple) -> tuple:
        """(sub-model, shift, its cells of this shape) answering `timing_mode` for a shape
        (KEY_COLUMNS values): the sub-model key of the shape's rows, found once; modes answered by
        the same sub-model share the cells."""
        mkey, shift = self._model_for(timing_mode, self._row_key(query, query.cell_row(shape, cell)))
        cells = None if mkey is None else self._row_cache.setdefault((mkey, shape), {})
        entry = self._shape_cache[(timing_mode, shape)] = (mkey, shift, cells)
        return entry

    def _cell_parts(self, query, op) -> list[tuple[tuple, tuple, float]]:
        """``query.cell_parts`` of one op, with the fitted roofline's coefficients when the
        ratio target divides by one (each part's reference is then that roofline: MoE)."""
        if self.target == "ratio" and self.roofline_terms is not None:
            return query.cell_parts(op, getattr(self, "has_mixed", False), roofline=self._query_roofline)
        return query.cell_parts(op, getattr(self, "has_mixed", False))

    def _evaluate_cell(self, query, mkey: tuple, shape: tuple, cell: tuple, cells: dict) -> tuple[float, bool]:
        """Memo entry of a cell (a miss), stored in `cells`: exp(model output) on the cell's
        representative row and whether that row lies outside the sub-model's training range.
        All cells are forgotten when they number MAX_MEMO_CELLS."""
        self.memo_misses += 1
        if self._num_cells >= MAX_MEMO_CELLS:
            for kept in self._row_cache.values():
                kept.clear()
            self._num_cells = 0
        row = query.cell_row(shape, cell)
        x = query.feature_row(row) if self._scalar_ok else self._row_features(query, row)[0]
        compiled, lo, hi = self._compiled_for(mkey)
        y = (compiled.predict_row(x) if compiled is not None
             else float(self.models[mkey].predict(np.asarray([x]))[0]))
        hit = cells[cell] = (math.exp(y), any(map(operator.lt, x, lo)) or any(map(operator.gt, x, hi)))
        self._num_cells += 1
        return hit

    def _price_tabled(self, op, token_column: str, timing_mode: str) -> tuple[float, bool]:
        """(seconds, out of range) of one op from its shape's token table (unquantized features).
        The op's fields other than its token count (TOKEN_FIELDS) key its canonical row, sub-model
        and shape, computed once per shape."""
        token_field = TOKEN_FIELDS[self.family]
        tokens = getattr(op, token_field)
        shape_key = (timing_mode, type(op), _shape_fields(type(op), token_field)(op))
        entry = self._shape_cache.get(shape_key)
        if entry is None:
            row = F.canon_row_from_op(op)[1]
            if row[token_column] != tokens:
                raise ValueError(f"{type(op).__name__}.{token_field}={tokens!r} is not the canonical "
                                 f"{token_column}={row[token_column]!r}; TOKEN_FIELDS is stale")
            shape = tuple(v for c, v in row.items() if c != token_column)
            key = self._key_cache.get(shape)
            if key is None:
                key = self._key_cache[shape] = str(self.submodel_keys(F.canon_from_records([row], self.family))[0])
            entry = self._shape_cache[shape_key] = (*self._model_for(timing_mode, key), shape, row)
        mkey, shift, shape, row = entry
        if mkey is None:
            return math.nan, True
        block = (mkey, shape, (tokens - 1) // TABLE_BLOCK)
        self.memo_lookups += 1
        table = self._tables.get(block)
        if table is None:
            self.memo_misses += 1
            if len(self._tables) >= MAX_MEMO_BLOCKS:
                self._tables.clear()
            table = self._tables[block] = self._token_table(mkey, row, token_column, block[2] * TABLE_BLOCK + 1)
        first, ys, flags = table
        seconds = math.exp(ys[tokens - first]) + shift
        return (max(seconds, 0.0) if timing_mode == "kernel" else seconds), flags[tokens - first]

    def _token_table(self, mkey: tuple, row: dict, token_column: str, first: int) -> tuple[int, list, list]:
        """(first token count, log seconds, out-of-range flags) of TABLE_BLOCK rows: ``row`` at
        token counts first, first + 1, ...; the model's exact output on each row's features
        (compiled: ``predict_monotone`` when the features grow with the token count, as GEMM and
        elementwise features do inside a block), plus the exact reference (ratio target)."""
        tokens = np.arange(first, first + TABLE_BLOCK)
        canon = {c: tokens if c == token_column else np.repeat(np.asarray([row[c]]), TABLE_BLOCK)
                 for c in F.CANON_COLUMNS[self.family]}
        X = F.featurize(canon, self.family)
        compiled, lo, hi = self._compiled_for(mkey)
        if compiled is not None and np.isfinite(X).all() and not (np.diff(X, axis=0) < 0).any():
            y = compiled.predict_monotone(X)
        else:
            y = self._evaluate(mkey, X)
        flags = ((X < np.asarray(lo)) | (X > np.asarray(hi))).any(axis=1)
        self.table_rows += TABLE_BLOCK
        return first, (y + self._offset(canon)).tolist(), flags.tolist()

    def _row_key(self, query, row: dict) -> str:
        """The sub-model key of a canonical row (submodel_keys, once per query.KEY_COLUMNS values)."""
        shape = tuple(row[c] for c in query.KEY_COLUMNS)
        key = self._key_cache.get(shape)
        if key is None:
            key = self._key_cache[shape] = str(self.submodel_keys(F.canon_from_records([row], self.family))[0])
        return key

    def _row_features(self, query, row: dict) -> tuple[list[float], float]:
        """(features, reference seconds) of a canonical row: the scalar versions when they
        agree with calibration.features on the first row priced, else (with a warning, once)
        the numpy ones: a stale scalar copy costs speed, never correctness."""
        if self._scalar_ok is None:
            x, ref = self._numpy_features(row)
            try:
                xs, refs = query.feature_row(row), query.reference_row(row)
                self._scalar_ok = (len(xs) == len(x) and bool(np.allclose(xs, x, rtol=1e-12, atol=1e-12))
                                   and math.isclose(refs, ref, rel_tol=1e-12))
            except Exception:        # a stale copy may also fail outright (e.g. a renamed constant)
                self._scalar_ok = False
            if not self._scalar_ok:
                warnings.warn(f"{query.__name__} features differ from calibration.features; "
                              f"{self.family} queries take the slow numpy path", stacklevel=2)
        if self._scalar_ok:
            return query.feature_row(row), query.reference_row(row)
        return self._numpy_features(row)

    def _numpy_features(self, row: dict) -> tuple[list[float], float]:
        table = F.canon_from_records([row], self.family)
        return F.featurize(table, self.family)[0].tolist(), float(F.reference_s(table, self.family)[0])

    def describe(self) -> dict:
        """JSON-able summary: sub-models, rows, launch overhead."""
        out = {"family": self.family, "features": list(self.feature_names),
               "submodels": {f"{m}:{k}": n for (m, k), n in self.n_rows.items()},
               "launch_overhead_s": self.launch_overhead_s,
               "launch_overhead_source": self.launch_overhead_source}
        if self.roofline_terms is not None:
            out["roofline"] = {key: dict(zip(self.roofline_term_names, map(float, coef)))
                               for key, coef in self.roofline.items()}
        return out


def _compiled_model(model):
    """A fitted model with its forest compiled: the CompiledForest itself, or a copy of a
    wrapper (``.model``, PickByHoldout) holding it; models that do not compile stay as they are."""
    inner = getattr(model, "model", None)
    if inner is not None:
        compiled = compile_forest(inner)
        if compiled is None:
            return model
        wrapper = copy.copy(model)
        wrapper.model = compiled
        return wrapper
    compiled = compile_forest(model)
    return model if compiled is None else compiled


FLOAT16_TWINS = {"fp16": "bf16", "bf16": "fp16"}


def float16_twin(key: str) -> str | None:
    """A sub-model key with its 16-bit float dtype swapped (":"-separated parts, fp16 <-> bf16),
    or None when it names neither (e.g. "fp8", "mha:fp8")."""
    parts = str(key).split(":")
    swapped = [FLOAT16_TWINS.get(p, p) for p in parts]
    return ":".join(swapped) if swapped != parts else None


def with_float16_twins(roofline: dict[str, tuple[float, ...]]) -> dict[str, tuple[float, ...]]:
    """A fitted roofline per sub-model key, plus each key's ``float16_twin`` that has none of its
    own under that key's coefficients: the roofline of the sub-model ``_model_for`` answers the
    twin with."""
    out = dict(roofline)
    for key, coef in roofline.items():
        twin = float16_twin(key)
        if twin is not None and twin not in roofline:
            out[twin] = coef
    return out


@functools.lru_cache(maxsize=None)
def _shape_fields(op_type: type, token_field: str) -> Callable:
    """Getter of an op type's field values other than its token count."""
    return operator.attrgetter(*[f.name for f in dataclasses.fields(op_type) if f.name != token_field])


def _check_mode(timing_mode: str) -> None:
    if timing_mode not in ("kernel", "launch"):
        raise ValueError(f"timing_mode={timing_mode!r}; valid: kernel, launch")


def forest(n_estimators: int, min_samples_leaf: int, max_features: float, seed: int = 0,
           max_samples: float | None = None, kind: str = "rf") -> Callable[[int], object]:
    """Factory of a small seeded single-thread regressor.

    kind "rf": RandomForestRegressor; "et": ExtraTreesRegressor (bootstrap when max_samples
    is set); "hgb": HistGradientBoostingRegressor with n_estimators boosting rounds
    (max_leaf_nodes=63, no early stopping, deterministic; compact but slow to fit).
    """
    from sklearn.ensemble import ExtraTreesRegressor, HistGradientBoostingRegressor, RandomForestRegressor

    def make(n_rows: int):
        if kind == "hgb":
            return HistGradientBoostingRegressor(max_iter=n_estimators, learning_rate=0.1, max_leaf_nodes=63,
                                                 min_samples_leaf=max(min_samples_leaf, 2), early_stopping=False,
                                                 random_state=seed)
        cls = {"rf": RandomForestRegressor, "et": ExtraTreesRegressor}[kind]
        extra = {"bootstrap": max_samples is not None} if kind == "et" else {}
        return cls(n_estimators=n_estimators, min_samples_leaf=min_samples_leaf, max_features=max_features,
                   max_samples=max_samples, random_state=seed, n_jobs=1, **extra)
    return make
