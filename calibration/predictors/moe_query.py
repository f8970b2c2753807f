"""One MoE op spec -> its canonical row, feature row and reference time, in plain Python.

The batch engine prices one routed-expert op per new token count (or one per distinct rank
load with a skewed router), so MoE queries rarely repeat; ``calibration.features`` costs
~0.2 ms to featurize one of them with numpy (one-element columns), these scalar versions
~10 us. They follow ``features`` formula by formula, tests assert that they agree with it to
1e-12, and the predictor checks it again on the first row it prices (``FamilyPredictor``: on
a mismatch it warns and uses the numpy features). Same interface as ``attention_query``:

* ``query_rows(op, has_mixed)`` == ``(features.canon_row_from_op(op)[1],)`` (to 1e-12: the load
  variance is computed without numpy)
* ``feature_row(r)``            == ``features.featurize(<table of r>, "moe")[0]``
* ``reference_row(r)``          == ``features.reference_s(<table of r>, "moe")[0]``  (seconds);
  ``reference_row(r, coef)``    == ``moe_roofline.roofline_terms(<table of r>)[0] @ coef``
* KEY_COLUMNS: the row columns the sub-model key depends on.
* ``cell_parts(op, m, roofline)`` == [(SHAPE_COLUMNS values, memo cell, ``reference_row`` with
  the dtype's coefficients)] of that
  row; ``cell_row(shape, cell)`` is the canonical row at the cell's centre (== the row at a
  ~exact grid, tested)

Memo cells (QUERY_CELLS): the row's token count, routed pairs, largest expert load and load
standard deviation are rounded to 1/16 in log2 (~4.4 %); the cell's model output and
out-of-range flag are those of its representative row (``cell_row``; integer statistics at
the nearest integer), computed once, and each query multiplies the model's ratio by its own
exact reference time (``FamilyPredictor._price_cells``, as for attention). Chosen on the MoE
queries of two simulations of Qwen3-30B-A3B (auto H100 bundle, 300 random requests at 20 req/s,
``bench/fidelity_query_cost.py --grid-study``; added error against ~unquantized statistics,
2026-11-30): cells per log2 64 / 32 / 16 / 8: hits 47.4 / 60.1 / 73.2 / 83.3 %, added error p95
0.22 / 0.48 / 0.73 / 1.40 %, max 2.4 / 2.3 / 3.9 / 6.3 % (p50 0.00 % throughout); the former
1/64 grid on the 21 features hit ~23 % in one simulation. A token table as for GEMMs does
not apply: the op's routed pairs and per-expert loads come from the engine's router, so for a
fixed shape the op is not a function of the token count alone.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from typing import Sequence

from calibration import features as F
from calibration.predictors import grid
from frontier.ops import MoeOp

KEY_COLUMNS = ("moe_dtype",)
SHAPE_COLUMNS = ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "moe_dtype")
_EP = SHAPE_COLUMNS.index("moe_ep_size")
_DTYPE = SHAPE_COLUMNS.index(F.SUBMODEL_KEY["moe"])     # the sub-model key: the fitted roofline's key
QUERY_CELLS = 16.0      # memo cells are keyed by grid index: whoever changes it must reset the memos
_DB = F._DTYPE_BYTES


def _lg(x: float) -> float:
    return math.log2(1.0 + x)


def _load_stats(op: MoeOp) -> tuple[float, float]:
    """features._load_stats without numpy: the variance in exact integer arithmetic,
    (n sum x^2 - (sum x)^2) / n^2, then one rounding (np.var's two-pass float result agrees to
    ~1e-16 relative; ~2 us instead of ~12 us for 128 experts)."""
    loads = op.tokens_per_expert
    if loads is None:
        return float(math.ceil(op.routed_pairs / op.num_local_experts)), 0.0
    n, total = len(loads), sum(loads)
    return float(max(loads)), (n * sum(map(operator.mul, loads, loads)) - total * total) / (n * n)


def canon_row(op: MoeOp) -> dict[str, object]:
    return F.moe_canon_row(op, _load_stats)


def query_rows(op: MoeOp, has_mixed: bool = False) -> tuple[dict, ...]:
    """The one canonical row a MoE op is priced from (has_mixed: interface only)."""
    return (canon_row(op),)


def cell_parts(op: MoeOp, has_mixed: bool = False,
               roofline: dict[str, Sequence[float]] | None = None) -> list[tuple[tuple, tuple, float]]:
    """[(SHAPE_COLUMNS values, cell, reference seconds)] of the op's canonical row: the cell holds
    the grid indices (``grid.index``) of its token count, routed pairs, largest expert load and load
    standard deviation; the reference time is the row's exact one: the fitted roofline
    (``moe_roofline``; ``roofline``: coefficients per MoE dtype, NaN for a dtype without them)
    or, without a fit (None), ``reference_row`` (has_mixed: interface only).
    The shape comes from ``canon_row`` once per op shape (every field but the three that vary
    with the routed tokens, ``_VARYING``: ``_shape_of``); ~8 us for 128 local experts, half of it the load
    variance (CPU, replayed)."""
    shape = _shape_of(_static_fields(op))
    mx, var = _load_stats(op)
    pairs, idx, cells = F.mean_rank_pairs(op.tokens, op.topk, shape[_EP]), grid.index, QUERY_CELLS
    cell = (idx(op.tokens, cells), idx(pairs, cells), idx(mx, cells), idx(math.sqrt(max(var, 0.0)), cells))
    if roofline is not None:
        coef = roofline.get(str(shape[_DTYPE]))
        reference = math.nan if coef is None else _roofline_s(shape, float(pairs), mx, coef)
    else:
        reference = _reference_s(shape, float(pairs))
    return [(shape, cell, reference)]


# The MoeOp fields a MoE query's shape does not depend on: ``cell_parts`` derives its
# SHAPE_COLUMNS values from the other fields, once per distinct value (``_shape_of``).
_VARYING = ("tokens", "routed_pairs", "tokens_per_expert")
_STATIC = tuple(f.name for f in dataclasses.fields(MoeOp) if f.name not in _VARYING)
_static_fields = operator.attrgetter(*_STATIC)


@functools.lru_cache(maxsize=4096)
def _shape_of(static: tuple) -> tuple:
    """SHAPE_COLUMNS values of the MoE ops whose fields other than _VARYING are ``static``
    (``canon_row`` of one such op: one token routed to one expert)."""
    row = canon_row(MoeOp(**dict(zip(_STATIC, static)), tokens=1, routed_pairs=1))
    return tuple(row[c] for c in SHAPE_COLUMNS)


def cell_row(shape: tuple, cell: tuple) -> dict[str, object]:
    """The canonical row at a cell's representative point (every grid index at its centre; the
    integer statistics, tokens, routed pairs and largest load, at the nearest integer)."""
    tokens, pairs, max_load = (grid.nearest_integer(c, QUERY_CELLS) for c in cell[:3])
    std = grid.centre(cell[3], QUERY_CELLS)
    return {**dict(zip(SHAPE_COLUMNS, shape)), "num_tokens": tokens, "routed_pairs": pairs,
            "max_tokens_per_expert": max_load, "var_tokens_per_expert": std * std}


def feature_row(r: dict) -> list[float]:
    """Feature vector (features.FEATURE_NAMES["moe"] order) of one canonical row."""
    tok, hid, k = float(r["num_tokens"]), float(r["hidden_size"]), float(r["topk"])
    tp, ep = float(r["moe_tp_size"]), float(r["moe_ep_size"])
    inter_rank = float(r["inter_size"]) / tp
    experts = float(r["num_experts"])
    local = max(1.0, experts / ep)
    pairs, mx = float(r["routed_pairs"]), float(r["max_tokens_per_expert"])
    std = math.sqrt(max(float(r["var_tokens_per_expert"]), 0.0))
    mean_load = max(pairs / local, 1e-9)
    active = min(local, max(pairs, 1.0))
    wbytes = _DB.get(str(r["moe_dtype"]), 2.0)
    cols = [_lg(tok), _lg(hid), _lg(inter_rank), _lg(k), _lg(experts), _lg(local), _lg(pairs),
            _lg(mx), _lg(std), mx / mean_load, _lg(active), _lg(6 * hid * inter_rank * pairs),
            _lg(3 * hid * inter_rank * active * wbytes), _lg(6 * hid * inter_rank * mx),
            _lg(tp), _lg(ep), _lg(pairs / local)]
    cols += [_lg(active * math.ceil(pairs / active / b)) for b in (16, 64, 128)]
    cols.append(_lg(math.ceil(mx / 64)))
    return cols


def reference_row(r: dict, coef: Sequence[float] | None = None) -> float:
    """features.reference_s of one canonical MoE row (seconds), or with ``coef``
    (``moe_roofline.TERMS`` order) the fitted roofline: ``moe_roofline.roofline_terms`` of its
    table times ``coef``."""
    shape = tuple(r[c] for c in SHAPE_COLUMNS)
    if coef is None:
        return _reference_s(shape, float(r["routed_pairs"]))
    return _roofline_s(shape, float(r["routed_pairs"]), float(r["max_tokens_per_expert"]), coef)


def _rank_shape(shape: tuple, pairs: float) -> tuple[float, float, float, float]:
    """(hidden, intermediate per rank, active local experts, bytes per weight) of a row's
    SHAPE_COLUMNS values and routed pairs: what both references are built from."""
    hid, inter_size, _topk, experts, tp, ep, dtype = shape
    local = max(1.0, float(experts) / float(ep))
    return float(hid), float(inter_size) / float(tp), min(local, max(pairs, 1.0)), _DB.get(str(dtype), 2.0)


def _roofline_s(shape: tuple, pairs: float, max_load: float, coef: Sequence[float]) -> float:
    """``reference_row`` with ``coef`` from a row's SHAPE_COLUMNS values, routed pairs and
    largest expert load."""
    hid, inter, active, wbytes = _rank_shape(shape, pairs)
    c0, c1, c2, c3, c4 = coef
    return (c0 + 6 * hid * inter * pairs * c1 + 3 * hid * inter * active * wbytes * c2
            + pairs * (2 * hid + 3 * inter) * 2 * c3 + 6 * hid * inter * max_load * c4)


def _reference_s(shape: tuple, pairs: float) -> float:
    """``reference_row`` from a row's SHAPE_COLUMNS values and routed pairs (seconds)."""
    hid, inter, active, wbytes = _rank_shape(shape, pairs)
    return (6 * hid * inter * pairs / F._REF_FLOPS
            + (3 * hid * inter * active * wbytes + pairs * (2 * hid + 3 * inter) * 2) / F._REF_BW + F._REF_FIXED_S)
