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
    assert (compiled._left[inner] == inner + 1).all()              # preorder after compiling
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
