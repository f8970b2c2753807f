"""A MoE op the batch engine builds for a profiled shape queries exactly that AIC moe_perf row:
global expert count, moe_tp / moe_ep of the layer, the unsharded inter size and the experts'
weight format (mxfp4 -> w4a16_mxfp4), so it is priced as the predictor prices the row."""

import pandas as pd
import pytest

from calibration import features as F
from calibration.bundle import Bundle
from calibration.predictors import make_predictor
from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.ops import MoeOp
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig
from simulator.predictor_cost import PredictorCostModel

H200 = get_gpu("H200")
# (model, hidden, moe inter, experts, top-k, AIC moe_dtype) as in AIC's moe_perf tables
MODELS = {"openai/gpt-oss-120b": (2880, 2880, 128, 4, "w4a16_mxfp4"),
          "Qwen/Qwen3-235B-A22B-FP8": (4096, 1536, 128, 8, "fp8_block")}
SHARDINGS = ((1, 1), (2, 1), (4, 1), (1, 8))        # (moe_tp, moe_ep): AIC's row layout (moe_tp 8 would split
# Qwen3-235B-A22B-FP8's experts into 192-wide shards of its 128x128 blocks, which vLLM refuses)
TOKENS = (1, 4, 16, 32, 64, 256, 1024)


def _aic_rows() -> pd.DataFrame:
    """Synthetic balanced rows in AIC's layout; the latency depends on every sharding column."""
    rows = []
    for hid, inter, e, k, dtype in MODELS.values():
        for tp, ep in SHARDINGS:
            for t in TOKENS:
                flops = 6 * hid * inter / tp * t * k / ep
                lat = 2e-5 * (1 + 0.3 * (ep > 1)) + flops / 3e14 + 3 * hid * inter / tp * min(e / ep, t * k) / 4e12
                rows.append({"num_tokens": t, "hidden_size": hid, "inter_size": inter, "topk": k, "num_experts": e,
                             "moe_tp_size": tp, "moe_ep_size": ep, "moe_dtype": dtype, "distribution": "balanced",
                             "timing_mode": "kernel", "latency_s_median": lat})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def moe_predictor():
    return make_predictor("moe", n_estimators=4).fit(_aic_rows())


def _engine_op(model: str, tp: int, ep: int, tokens: int, cost_model) -> MoeOp:
    parallel = ParallelSpec(tp=tp * ep, ep=ep)       # moe_tp = tp*dp/ep = tp
    engine = BatchEngine(load_model_spec(model), parallel, H200, cost_model, CudaGraphConfig(True, (), 256))
    (op,) = [o for o in engine._moe_ops(tokens) if isinstance(o, MoeOp)]
    return op


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("tp,ep", SHARDINGS)
def test_engine_op_is_priced_as_its_profiled_row(moe_predictor, model, tp, ep):
    hid, inter, e, k, dtype = MODELS[model]
    cost_model = PredictorCostModel(Bundle({"moe": moe_predictor}, {"gpu": "H200"}), RooflineCostModel(H200))
    for t in (4, 32, 256):
        op = _engine_op(model, tp, ep, t, cost_model)
        row = {"num_tokens": t, "hidden_size": hid, "inter_size": inter, "topk": k, "num_experts": e,
               "moe_tp_size": tp, "moe_ep_size": ep, "moe_dtype": dtype, "distribution": "balanced"}
        canon = F.canon_from_rows(pd.DataFrame([row]), "moe")
        fam, op_row = F.canon_row_from_op(op)
        assert fam == "moe" and op_row["moe_dtype"] == dtype
        assert {c: float(op_row[c]) for c in F.CANON_COLUMNS["moe"] if c != "moe_dtype"} == \
            {c: float(canon[c][0]) for c in F.CANON_COLUMNS["moe"] if c != "moe_dtype"}
        expected, oor = moe_predictor.predict_canon(canon)
        assert not oor[0]
        assert cost_model.op_times_s([op], "kernel")[0] == pytest.approx(float(expected[0]), rel=1e-9)


def test_mxfp4_experts_are_not_priced_as_bf16(moe_predictor):
    """The former mapping (bf16, moe_tp = moe_ep = 1, local experts) hit another sub-model."""
    op = _engine_op("openai/gpt-oss-120b", 1, 1, 32, None)
    assert (op.quant_method, op.compute_dtype, op.moe_tp, op.moe_ep) == ("mxfp4", "bf16", 1, 1)
    assert F.canon_row_from_op(op)[1]["moe_dtype"] == "w4a16_mxfp4"
    tp8 = F.canon_row_from_op(_engine_op("openai/gpt-oss-120b", 8, 1, 32, None))[1]
    assert (tp8["inter_size"], tp8["moe_tp_size"], tp8["num_experts"]) == (2880, 8, 128)
    ep8 = F.canon_row_from_op(_engine_op("openai/gpt-oss-120b", 1, 8, 32, None))[1]
    assert (ep8["num_experts"], ep8["moe_ep_size"], ep8["routed_pairs"]) == (128, 8, 16)


def test_moe_op_sharding_fields_are_checked():
    with pytest.raises(ValueError, match="moe_ep=4 does not give num_local_experts=16"):
        MoeOp(8, 128, 16, 8, 2048, 768, 8, moe_ep=4)
    with pytest.raises(ValueError, match="quant_method='fp6'"):
        MoeOp(8, 128, 16, 8, 2048, 768, 8, quant_method="fp6")
    with pytest.raises(ValueError, match="moe_tp must be > 0"):
        MoeOp(8, 128, 16, 8, 2048, 768, 8, moe_tp=0)
    # without moe_ep the expert-parallel size is inferred from the local expert count
    assert F.canon_row_from_op(MoeOp(8, 128, 16, 8, 2048, 768, 8))[1]["moe_ep_size"] == 8
