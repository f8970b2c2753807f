"""Compiled tree ensembles: a fitted sklearn forest as flat arrays, evaluated without sklearn.

sklearn's ``predict`` costs ~1 ms per call whatever the row count (input validation,
joblib dispatch per tree); a simulator asking for one row per step pays that every
time. ``compile_forest`` copies the trees of a fitted ``RandomForestRegressor``,
``ExtraTreesRegressor`` or ``HistGradientBoostingRegressor`` (single output) once into
flat arrays, and ``CompiledForest`` evaluates

* one row (``predict_row``): a pure-Python walk down each tree, tens of microseconds;
* rows whose every column grows down the rows (``predict_monotone``: one GEMM or
  elementwise shape over consecutive token counts): one walk per run of rows that share a
  leaf, bisecting the rows at each split; 128 token counts of a 32-tree GEMM forest visit
  ~600-900 nodes, ~0.3 ms (numpy lockstep: ~3-5 ms; 128 row walks: ~5 ms);
* many rows (``predict``): all (row, tree) pairs walk in lockstep with numpy, one
  vector step per tree level (its arrays are built on the first call).

All give sklearn's numbers (tested to 1e-12; ``predict_monotone`` equals ``predict``
exactly): forests cast the row to float32 first (sklearn's trees compare
``float32(x) <= threshold`` with float64 thresholds) and average the leaf values summed in
tree order, as ``ForestRegressor.predict`` does; boosting starts
from the baseline and adds each iteration's leaf value (float64 row). Other models (or
categorical splits) are not compiled: ``compile_forest`` returns None and callers use the
model's own ``predict``.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Sequence

import numpy as np


class CompiledForest:
    """Flat arrays of a tree ensemble: output = (base + sum of the trees' leaf values) / divisor.

    trees: per tree (left, right, feature, threshold, value) arrays over its nodes, a leaf
    having left = -1; a row goes left when x[feature] <= threshold. float32: round the row
    to float32 first (sklearn's decision trees do; its gradient boosting does not).
    Rows must be finite: sklearn routes missing values by rules not reproduced here.
    """

    def __init__(self, trees: Sequence[tuple], n_features: int, base: float = 0.0, divisor: float = 1.0,
                 float32: bool = False) -> None:
        self.n_features, self.n_trees = n_features, len(trees)
        self.base, self.divisor, self.float32 = float(base), float(divisor), float32
        trees = [_preorder(*t) for t in trees]
        offsets, n = [], 0
        for t in trees:
            offsets.append(n)
            n += len(t[0])
        self.roots = offsets
        leaf = np.concatenate([t[0] < 0 for t in trees])
        right = np.concatenate([t[1] + o for t, o in zip(trees, offsets)])
        feature = np.where(leaf, -1, np.concatenate([t[2] for t in trees]))
        threshold = np.concatenate([t[3] for t in trees]).astype(np.float64)
        self._value = np.concatenate([t[4] for t in trees]).astype(np.float64)
        # pure-Python walks over preorder nodes: left child = node + 1, a leaf has feature -1
        # (a leaf's right entry is never read)
        self._arrays = (leaf, right, feature, threshold)
        self._python_arrays()
        self._walk = None                             # numpy lockstep arrays, built on first predict()

    def _python_arrays(self) -> None:
        """Views of the node arrays for the pure-Python walks: the split feature as int8 and the
        right child as int32 when they fit (copies, 5 of the 16 bytes a node's two int64 take: a
        walk through a forest the rest of a simulation has pushed out of the CPU caches touches
        fewer lines), thresholds and values as they are (views)."""
        leaf, right, feature, threshold = self._arrays
        self._f = _view(feature, np.int8 if self.n_features < 128 else np.int64)
        self._r = _view(right, np.int32 if len(right) < 2 ** 31 else np.int64)
        self._t, self._v = _view(threshold, np.float64), _view(self._value, np.float64)

    def __getstate__(self):
        """Pickle the numpy node arrays only (the walks' views and lockstep arrays are rebuilt
        when first used, so a loaded bundle's unused sub-models never build them)."""
        state = dict(self.__dict__)
        for name in ("_f", "_t", "_r", "_v", "_walk"):
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._walk = None

    def __getattr__(self, name: str):
        """The walks' array views of an unpickled forest, made on first use (only called when
        the attribute is missing)."""
        if name in ("_f", "_t", "_r", "_v") and "_arrays" in self.__dict__:
            self._python_arrays()
            return self.__dict__[name]
        raise AttributeError(name)

    def _lockstep(self) -> tuple[np.ndarray, ...]:
        """(left, right, feature, threshold, depth) of the numpy lockstep walk: a leaf points
        to itself and always "goes left"; depth = edges on the longest root-to-leaf path."""
        if self._walk is None:
            leaf, right, feature, threshold = self._arrays
            idx = np.arange(len(leaf), dtype=np.int64)
            left = np.where(leaf, -1, idx + 1)
            self._walk = (np.where(leaf, idx, idx + 1), np.where(leaf, idx, right), np.where(leaf, 0, feature),
                          np.where(leaf, np.inf, threshold), _max_depth(left, np.where(leaf, -1, right), self.roots))
        return self._walk

    def predict_row(self, x: Sequence[float]) -> float:
        """Ensemble output for one feature row (len n_features)."""
        if self.float32:
            x = array("f", x).tolist()
        feat, thr, right, val = self._f, self._t, self._r, self._v
        total = self.base
        for node in self.roots:
            f = feat[node]
            while f >= 0:
                node = node + 1 if x[f] <= thr[node] else right[node]
                f = feat[node]
            total += val[node]
        return total / self.divisor

    def predict_monotone(self, X: np.ndarray) -> np.ndarray:
        """Ensemble output per row of X (rows x n_features) whose every column is non-decreasing
        down the rows (after the float32 cast), e.g. one GEMM shape over consecutive token counts.

        Each tree is walked once per run of rows that share a leaf: at a split the rows going
        left are a prefix of the node's rows (found by bisection), so the cost grows with the
        leaf changes along the rows, not with the rows (128 token counts of a 32-tree GEMM
        forest: ~700 node visits, ~0.3 ms, against ~5 ms in ``predict``). Same numbers as
        ``predict``: leaf values summed in tree order. ValueError when a column decreases.
        """
        X = np.asarray(X, dtype=np.float32 if self.float32 else np.float64).astype(np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features or len(X) == 0:
            raise ValueError(f"X has shape {X.shape}; expected (rows >= 1, {self.n_features})")
        if (np.diff(X, axis=0) < 0).any():
            raise ValueError("predict_monotone needs columns non-decreasing down the rows; use predict")
        n, cols = len(X), X.T.tolist()
        feat, thr, right, val = self._f, self._t, self._r, self._v
        total, out = np.full(n, self.base), np.empty(n)
        for root in self.roots:
            stack = [(root, 0, n)]
            while stack:
                node, a, b = stack.pop()
                f = feat[node]
                while f >= 0:                      # rows a..b-1 reach this node
                    col, t = cols[f], thr[node]
                    if col[b - 1] <= t:
                        node += 1
                    elif col[a] > t:
                        node = right[node]
                    else:                          # rows a..s-1 go left, s..b-1 right
                        s = bisect_right(col, t, a, b)
                        stack.append((right[node], s, b))
                        node, b = node + 1, s
                    f = feat[node]
                out[a:b] = val[node]
            total += out                           # tree order, as sklearn accumulates
        return total / self.divisor

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Ensemble output per row of X (rows x n_features)."""
        X = np.asarray(X, dtype=np.float32 if self.float32 else np.float64).astype(np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"X has shape {X.shape}; expected (rows, {self.n_features})")
        left, right, feature, threshold, depth = self._lockstep()
        rows = np.repeat(np.arange(len(X)), self.n_trees)
        node = np.tile(np.asarray(self.roots, dtype=np.int64), len(X))
        for _ in range(depth):
            go_left = X[rows, feature[node]] <= threshold[node]
            node = np.where(go_left, left[node], right[node])
        leaves = self._value[node].reshape(len(X), self.n_trees)
        total = np.full(len(X), self.base)
        for j in range(self.n_trees):                 # tree order, as sklearn accumulates
            total += leaves[:, j]
        return total / self.divisor


def _view(values: np.ndarray, dtype: type) -> memoryview:
    """A memoryview of a numpy vector as ``dtype``: indexing it from Python returns plain ints /
    floats as cheaply as an array.array copy does (a node visit ~50-80 ns, against ~150 ns with
    numpy scalars), and it shares the array's memory: the array.array copies it replaced took
    ~13 ms per process for the H100 bundle's GEMM and attention forests."""
    return memoryview(np.ascontiguousarray(values, dtype=dtype))


def _preorder(left, right, feature, threshold, value) -> tuple[np.ndarray, ...]:
    """One tree's arrays (int64 / float64) renumbered in depth-first preorder (left child = parent
    + 1, sklearn's own layout for depth-first built trees: then no renumbering)."""
    left, right = np.asarray(left, dtype=np.int64), np.asarray(right, dtype=np.int64)
    arrays = (left, right, np.asarray(feature, dtype=np.int64), np.asarray(threshold, dtype=np.float64),
              np.asarray(value, dtype=np.float64))
    inner = np.flatnonzero(left >= 0)
    if (left[inner] == inner + 1).all():
        return arrays
    order, stack = [], [0]
    while stack:
        node = stack.pop()
        order.append(node)
        if left[node] >= 0:
            stack += [int(right[node]), int(left[node])]
    order = np.asarray(order, dtype=np.int64)
    new_id = np.empty(len(left), dtype=np.int64)
    new_id[order] = np.arange(len(order))
    l, r = left[order], right[order]
    l = np.where(l >= 0, new_id[np.maximum(l, 0)], -1)
    r = np.where(l >= 0, new_id[np.maximum(r, 0)], -1)
    return (l, r) + tuple(a[order] for a in arrays[2:])


def _max_depth(left: np.ndarray, right: np.ndarray, roots: Sequence[int]) -> int:
    """Edges on the longest root-to-leaf path over all trees."""
    depth, level = 0, np.asarray(roots, dtype=np.int64)
    while True:
        level = level[left[level] >= 0]
        if len(level) == 0:
            return depth
        level = np.concatenate([left[level], right[level]])
        depth += 1


def compile_forest(model) -> CompiledForest | None:
    """CompiledForest of a fitted RandomForest / ExtraTrees / HistGradientBoosting regressor
    (single output; boosting: squared-error loss, no categorical splits), also inside a wrapper
    that predicts with its fitted ``model`` attribute (the elementwise family's PickByHoldout);
    a CompiledForest itself; None for other models."""
    if isinstance(model, CompiledForest):            # already compiled (a loaded bundle)
        return model
    inner = getattr(model, "model", None)
    if inner is not None:
        return compile_forest(inner)
    if not type(model).__module__.startswith("sklearn."):   # e.g. a linear fit: nothing to compile,
        return None                                          # and no sklearn import for it
    from sklearn.ensemble import ExtraTreesRegressor, HistGradientBoostingRegressor, RandomForestRegressor

    if isinstance(model, (RandomForestRegressor, ExtraTreesRegressor)) and model.n_outputs_ == 1:
        trees = [(t.children_left, t.children_right, t.feature, t.threshold, t.value[:, 0, 0])
                 for t in (e.tree_ for e in model.estimators_)]
        return CompiledForest(trees, int(model.n_features_in_), divisor=len(trees), float32=True)
    if isinstance(model, HistGradientBoostingRegressor) and model.loss == "squared_error":
        nodes = [p[0].nodes for p in model._predictors]
        if any(n["is_categorical"].any() for n in nodes):
            return None
        trees = [(np.where(n["is_leaf"].astype(bool), -1, n["left"].astype(np.int64)), n["right"].astype(np.int64),
                  n["feature_idx"], n["num_threshold"], n["value"]) for n in nodes]
        return CompiledForest(trees, int(model.n_features_in_), base=float(model._baseline_prediction[0, 0]))
    return None
