"""Engine-built decode ops are priced from the AIC rows that time the same work.

* Block-scaled fp8 GEMMs (MiniMax-M2.5's attention projections) are priced from the per-tensor
  fp8 sub-model of the same shape: AIC's vLLM 0.24 fp8_block table carries a ~57-90 us floor
  that the deployments do not pay (simulator.predictor_cost).
* AIC's MLA *module* rows (the whole attention layer) price nothing: the MLA attention op goes to
  the roofline and its projections are priced as the ops they are; the rows sit far above
  their pieces (simulator.predictor_cost).
"""

from pathlib import Path

import numpy as np
import pytest

from calibration import features as F
from calibration.bundle import Bundle
from calibration.importers.aiconfigurator import import_aiconfigurator
from calibration.predictors import AttentionPredictor, LinearPredictor
from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.ops import AttentionOp, GemmOp
from frontier.parallel import ParallelSpec
from frontier.profile_schema import read_profiles
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig
from simulator.predictor_cost import PredictorCostModel, as_per_tensor_fp8

AIC = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "aiconfigurator"
pytestmark = pytest.mark.skipif(not (AIC / "systems" / "data").is_dir(), reason=f"AIC data absent at {AIC}")
H200 = get_gpu("H200")
MINIMAX_SHAPES = ((1024, 3072), (3072, 768))     # qkv_proj, o_proj at tp8: (n, k)
MLA_PIECES = ("q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "mla_norms", "mla_o_proj")   # Kimi's MLA layer


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    out = tmp_path_factory.mktemp("aic_h200")
    import_aiconfigurator(AIC, out, gpus=["h200_sxm"], families=["linear", "attention"])
    return out


@pytest.fixture(scope="module")
def gemm_rows(h200):
    df = read_profiles(h200, "linear", "H200")
    shape = np.zeros(len(df), dtype=bool)
    for n, k in MINIMAX_SHAPES:
        shape |= (df.n == n).to_numpy() & (df.k == k).to_numpy()
    return df[shape & df.dtype.isin(["fp8", "fp8_block"]).to_numpy() & (df.m <= 256).to_numpy()].reset_index(drop=True)


@pytest.fixture(scope="module")
def mla_rows(h200):
    df = read_profiles(h200, "attention", "H200")
    sel = df.is_mla & (df.num_heads == 8) & (df.kv_dtype == "bf16") & (df.op_name == "generation")
    return df[sel].reset_index(drop=True)


def _engine(model: str, cost_model) -> BatchEngine:
    # TP8 with expert parallel: MiniMax-M2.5's 1536-wide experts over 8 ranks would split its 128x128 blocks
    return BatchEngine(load_model_spec(model), ParallelSpec.from_vllm(tp=8, enable_expert_parallel=True), H200,
                       cost_model, CudaGraphConfig(True, (), 256))


def test_as_per_tensor_fp8():
    block = GemmOp("qkv_proj", 16, 1024, 3072, 1.0078125, 1.0, "fp8")
    assert as_per_tensor_fp8(block) == GemmOp("qkv_proj", 16, 1024, 3072, 1.0, 1.0, "fp8")
    assert F.gemm_dtype(block) == "fp8_block" and F.gemm_dtype(as_per_tensor_fp8(block)) == "fp8"
    for other in (GemmOp("a", 16, 64, 64, 1.0, 1.0, "fp8"), GemmOp("b", 16, 64, 64), GemmOp("c", 16, 64, 64, 0.53)):
        assert as_per_tensor_fp8(other) is other


def test_fp8_block_gemm_priced_from_the_fp8_row(gemm_rows):
    measured = gemm_rows.set_index(["dtype", "n", "k", "m"]).latency_s_median
    # the table's floor: the same GEMM at m = 16 is ~10x slower in the fp8_block rows
    assert measured[("fp8_block", 1024, 3072, 16)] > 7 * measured[("fp8", 1024, 3072, 16)]
    linear = LinearPredictor(n_estimators=4).fit(gemm_rows)
    cost = PredictorCostModel(Bundle({"linear": linear}, {"gpu": "H200"}), RooflineCostModel(H200))
    assert cost.fp8_block_as_fp8
    ops = {op.name: op for op, _ in _engine("MiniMaxAI/MiniMax-M2.5", cost).layer_ops(16) if isinstance(op, GemmOp)}
    for name, (n, k) in zip(("qkv_proj", "o_proj"), MINIMAX_SHAPES):
        op = ops[name]
        assert F.canon_row_from_op(op)[1] == {"m": 16, "n": n, "k": k, "dtype": "fp8_block"}
        fp8_row = F.canon_from_records([{"m": 16, "n": n, "k": k, "dtype": "fp8"}], "linear")
        expected = float(linear.predict_canon(fp8_row)[0][0])
        assert cost.op_times_s([op], "kernel")[0] == pytest.approx(expected, rel=1e-12)
        assert expected == pytest.approx(float(measured[("fp8", n, k, 16)]), rel=0.15)
    # a bundle without per-tensor fp8 rows keeps the fp8_block sub-model
    block_only = LinearPredictor(n_estimators=4).fit(gemm_rows[gemm_rows.dtype == "fp8_block"])
    cost_b = PredictorCostModel(Bundle({"linear": block_only}, {"gpu": "H200"}), RooflineCostModel(H200))
    assert not cost_b.fp8_block_as_fp8
    block_row = F.canon_from_records([{"m": 16, "n": 1024, "k": 3072, "dtype": "fp8_block"}], "linear")
    assert cost_b.op_times_s([ops["qkv_proj"]], "kernel")[0] == \
        pytest.approx(float(block_only.predict_canon(block_row)[0][0]), rel=1e-12)


def test_fp32_router_gemm_goes_to_the_roofline(gemm_rows):
    """No AIC table times an fp32 GEMM: MiniMax-M2's router SGEMM (a 1,024-token prefill on an
    H200) is priced by the roofline at the fp32 CUDA-core rate, and counted as such."""
    linear = LinearPredictor(n_estimators=4).fit(gemm_rows)
    roofline = RooflineCostModel(H200)
    cost = PredictorCostModel(Bundle({"linear": linear}, {"gpu": "H200"}), roofline)
    cast, sgemm = [op for op, _ in _engine("MiniMaxAI/MiniMax-M2.5", cost).layer_ops(1024)
                   if getattr(op, "name", "").startswith("router")]
    assert (cast.name, sgemm.name, sgemm.m, sgemm.n, sgemm.k, F.gemm_dtype(sgemm)) == \
        ("router_cast", "router", 1024, 256, 3072, "fp32")
    assert cost.op_times_s([sgemm], "kernel") == roofline.op_times_s([sgemm], "kernel")
    assert (cost.num_predicted, cost.num_fallback) == (0, 1)
    assert roofline.op_times_s([sgemm], "kernel")[0] == pytest.approx(2.5e-6 + 2 * 1024 * 256 * 3072 / (0.75 * 67e12))


def test_mla_module_rows_price_nothing(mla_rows):
    attn = AttentionPredictor(n_estimators=4).fit(mla_rows)
    assert attn.module_keys == ("mla:bf16",)
    roofline = RooflineCostModel(H200)
    cost = PredictorCostModel(Bundle({"attention": attn}, {"gpu": "H200"}), roofline)
    assert cost.mla_module
    engine = _engine("moonshotai/Kimi-K2.5", cost)
    # 16 decodes over 2047 + 1 KV tokens, the shape of an AIC generation module row (batch 16, step 2048)
    ((op, n_layers),) = engine.attention_ops(BatchShape((1,) * 16, (2047,) * 16))
    assert isinstance(op, AttentionOp) and op.is_mla and n_layers == 61
    assert cost.op_times_s([op], "kernel") == roofline.op_times_s([op], "kernel")
    ops = [o for o, _ in engine.layer_ops(16)]
    times = dict(zip([getattr(o, "name", "") for o in ops], cost.op_times_s(ops, "kernel")))
    assert all(times[n] > 0.0 for n in MLA_PIECES)
    # why: the measured module row is far above its pieces as priced here (projections, norms and
    # the MLA kernel, all roofline in this bundle-less check)
    row = mla_rows[(mla_rows.batch_size == 16) & (mla_rows.decode_ctx_max == 2048)]
    pieces = sum(times[n] for n in MLA_PIECES) + roofline.op_times_s([op], "kernel")[0]
    assert float(row.latency_s_median.min()) > 1.8 * pieces        # 108 us against 51 us


def test_mla_kernel_rows_keep_the_projections(mla_rows):
    attn = AttentionPredictor(n_estimators=4).fit(mla_rows.assign(scope="kernel"))
    assert attn.module_keys == ()
    cost = PredictorCostModel(Bundle({"attention": attn}, {"gpu": "H200"}), RooflineCostModel(H200))
    ops = [op for op, _ in _engine("moonshotai/Kimi-K2.5", cost).layer_ops(16)]
    times = cost.op_times_s(ops, "kernel")
    assert not cost.mla_module
    assert all(t > 0.0 for op, t in zip(ops, times) if getattr(op, "name", "") in MLA_PIECES)
    # kernel-scope MLA rows price the MLA op themselves
    ((op, _),) = _engine("moonshotai/Kimi-K2.5", cost).attention_ops(BatchShape((1,) * 16, (2047,) * 16))
    row_canon = F.canon_from_ops([op], "attention")
    assert cost.op_times_s([op], "kernel")[0] == pytest.approx(float(attn.predict_canon(row_canon)[0][0]), rel=1e-12)
