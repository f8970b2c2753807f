"""Compiled tree ensembles give sklearn's numbers, row by row and in batches."""

import numpy as np
import pytest
from sklearn.ensemble import ExtraTreesRegressor, HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import LinearRegression

from calibration.predictors.tree_eval import compile_forest


def _data():
    rng = np.random.default_rng(0)
    X = rng.random((400, 5)) * 10.0
    y = np.log1p(X[:, 0] * X[:, 1]) + np.sin(X[:, 2]) + 0.01 * X[:, 4]
    # query rows: inside and outside the training box, and on a threshold-like float64 grid
    T = np.vstack([rng.random((30, 5)) * 12.0 - 1.0, np.round(rng.random((10, 5)) * 640) / 64])
    return X, y, T


@pytest.mark.parametrize("model", [
    RandomForestRegressor(n_estimators=8, max_samples=0.5, min_samples_leaf=2, random_state=0),
    ExtraTreesRegressor(n_estimators=8, min_samples_leaf=3, random_state=0),
    ExtraTreesRegressor(n_estimators=6, bootstrap=True, max_samples=0.5, max_features=0.6, random_state=1),
    HistGradientBoostingRegressor(max_iter=40, max_leaf_nodes=31, early_stopping=False, random_state=0),
], ids=["rf", "et", "et-bootstrap", "hgb"])
def test_compiled_equals_sklearn(model):
    X, y, T = _data()
    model.fit(X, y)
    compiled = compile_forest(model)
    ref = model.predict(T)
    assert compiled.n_features == 5
    assert np.abs(compiled.predict(T) - ref).max() <= 1e-12
    assert max(abs(compiled.predict_row(t) - r) for t, r in zip(T.tolist(), ref)) <= 1e-12
    # the training rows too (leaf values exactly)
    assert np.abs(compiled.predict(X[:50]) - model.predict(X[:50])).max() <= 1e-12


def test_best_first_trees_are_renumbered_depth_first():
    X, y, T = _data()
    model = RandomForestRegressor(n_estimators=4, max_leaf_nodes=20, random_state=0).fit(X, y)
    tree = model.estimators_[0].tree_
    inner = np.flatnonzero(tree.children_left >= 0)
    assert not (tree.children_left[inner] == inner + 1).all()    # sklearn's best-first layout
    compiled = compile_forest(model)
    inner = np.flatnonzero(np.asarray(compiled._f) >= 0)
    assert (np.asarray(compiled._r)[inner] > inner + 1).all()      # preorder: left child = node + 1
    ref = model.predict(T)
    assert np.abs(compiled.predict(T) - ref).max() <= 1e-12
    assert max(abs(compiled.predict_row(t) - r) for t, r in zip(T.tolist(), ref)) <= 1e-12


def test_other_models_are_not_compiled():
    X, y, _ = _data()
    assert compile_forest(LinearRegression().fit(X, y)) is None
    two = RandomForestRegressor(n_estimators=2, random_state=0).fit(X, np.column_stack([y, y]))
    assert compile_forest(two) is None


def test_bad_shape_is_refused():
    X, y, _ = _data()
    compiled = compile_forest(ExtraTreesRegressor(n_estimators=2, random_state=0).fit(X, y))
    with pytest.raises(ValueError, match=r"expected \(rows, 5\)"):
        compiled.predict(np.zeros((3, 4)))


@pytest.mark.parametrize("model", [
    ExtraTreesRegressor(n_estimators=8, min_samples_leaf=3, random_state=0),
    RandomForestRegressor(n_estimators=6, max_samples=0.5, random_state=2),
    HistGradientBoostingRegressor(max_iter=30, max_leaf_nodes=15, early_stopping=False, random_state=0),
], ids=["et", "rf", "hgb"])
def test_monotone_rows_walk_by_runs_with_the_same_numbers(model):
    X, y, _ = _data()
    compiled = compile_forest(model.fit(X, y))
    # one "shape" over a growing token count: every column non-decreasing down the rows,
    # some constant, one with repeats (steps), spanning the training box and beyond it
    t = np.arange(1, 301, dtype=float)
    M = np.column_stack([t / 25.0, np.full(300, 3.3), np.log2(t) * 1.4, np.floor(t / 40.0), np.sqrt(t)])
    got = compiled.predict_monotone(M)
    assert np.array_equal(got, compiled.predict(M))            # exactly, not approximately
    assert np.abs(got - model.predict(M)).max() <= 1e-12
    assert len(set(got.tolist())) > 10                         # the rows do reach many leaves
    assert np.array_equal(compiled.predict_monotone(M[7:8]), compiled.predict(M[7:8]))


def test_monotone_walk_refuses_a_decreasing_column():
    X, y, _ = _data()
    compiled = compile_forest(ExtraTreesRegressor(n_estimators=2, random_state=0).fit(X, y))
    M = np.tile(np.arange(4.0)[:, None], (1, 5))
    M[3, 2] = 0.5
    with pytest.raises(ValueError, match="non-decreasing"):
        compiled.predict_monotone(M)
    with pytest.raises(ValueError, match=r"expected \(rows >= 1, 5\)"):
        compiled.predict_monotone(np.zeros((0, 5)))


def test_a_wrapper_is_compiled_through_its_fitted_model():
    X, y, T = _data()

    class Wrapper:                      # as the elementwise family's PickByHoldout
        def __init__(self, model):
            self.model = model

    forest = ExtraTreesRegressor(n_estimators=3, random_state=0).fit(X, y)
    compiled = compile_forest(Wrapper(forest))
    assert np.abs(compiled.predict(T) - forest.predict(T)).max() <= 1e-12
    assert compile_forest(Wrapper(LinearRegression().fit(X, y))) is None


def test_walks_read_compact_node_arrays_and_wide_ones_when_needed():
    """The pure-Python walks read the split feature as int8 (int64 from 128 features on) and the
    right child as int32: the same numbers as sklearn either way."""
    X, y, T = _data()
    small = compile_forest(ExtraTreesRegressor(n_estimators=4, random_state=0).fit(X, y))
    assert (small._f.format, small._r.format, small._t.format) == ("b", "i", "d")
    rng = np.random.default_rng(1)
    Xw = rng.random((300, 130))
    yw = Xw[:, 129] * 3.0 + Xw[:, 0]
    model = RandomForestRegressor(n_estimators=4, random_state=0).fit(Xw, yw)
    wide = compile_forest(model)
    assert wide._f.format in ("l", "q") and wide._f.itemsize == 8
    assert 129 in np.asarray(wide._f).tolist()          # a split on the last feature
    Tw = rng.random((20, 130))
    assert max(abs(wide.predict_row(t) - r) for t, r in zip(Tw.tolist(), model.predict(Tw))) <= 1e-12
