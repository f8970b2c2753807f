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
* ``reference_row(r)``          == ``features.reference_s(<table of r>, "moe")[0]``  (seconds)
* KEY_COLUMNS: the row columns the sub-model key depends on.

Memo grid (QUERY_GRID): 1/64 in log2 on every feature, the grid ``predict_canon`` memoizes
on, so the scalar path prices exactly as the table path did (tested). A token table as for
GEMMs does not apply: the op's routed pairs and per-expert loads come from the engine's
router, so for a fixed shape the op is not a function of the token count alone.
"""

from __future__ import annotations

import math
import operator

from calibration import features as F
from frontier.ops import MoeOp

KEY_COLUMNS = ("moe_dtype",)
QUERY_CELLS = 64.0
QUERY_GRID = (QUERY_CELLS,) * len(F.FEATURE_NAMES["moe"])   # memo cells are keyed by grid index: reset memos on change
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


def reference_row(r: dict) -> float:
    """features.reference_s of one canonical MoE row (seconds)."""
    hid, pairs = float(r["hidden_size"]), float(r["routed_pairs"])
    inter = float(r["inter_size"]) / float(r["moe_tp_size"])
    local = max(1.0, float(r["num_experts"]) / float(r["moe_ep_size"]))
    active = min(local, max(pairs, 1.0))
    wbytes = _DB.get(str(r["moe_dtype"]), 2.0)
    return (6 * hid * inter * pairs / F._REF_FLOPS
            + (3 * hid * inter * active * wbytes + pairs * (2 * hid + 3 * inter) * 2) / F._REF_BW + F._REF_FIXED_S)
