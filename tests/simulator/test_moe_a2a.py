"""MoE dispatch / combine kernels priced from measured DeepEP tables (simulator.comm.moe_a2a)."""

import math
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.ops import CommOp, MoeA2a
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine
from simulator.comm import AnalyticalCommBackend, CommGroup, make_comm_backend
from simulator.comm.calibrated import SHARED_AIC_DIR
from simulator.comm.moe_a2a import tables_from_rows
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig

US = 1e-6


def _rows(points, framework="vllm", version="0.24.0"):
    """comm rows (backend, phase, ep, hidden, topk, experts, tokens, latency us)."""
    return pd.DataFrame([{"op_name": f"moe_{ph}", "backend": b, "num_gpus": n, "hidden_size": h, "topk": k,
                          "num_experts": e, "num_tokens": t, "latency_s_median": us * US, "timing_mode": "kernel",
                          "framework": framework, "framework_version": version}
                         for b, ph, n, h, k, e, t, us in points])


G8, G4 = CommGroup.packed(8, 8), CommGroup.packed(4, 8)


TOY = tables_from_rows(_rows([
    ("deepep_ht", "combine", 8, 4096, 8, 256, 16, 100.0), ("deepep_ht", "combine", 8, 4096, 8, 256, 64, 400.0),
    ("deepep_ht", "combine", 8, 4096, 8, 384, 64, 500.0),          # an expert-count variant: median with 400
    ("deepep_ht", "combine", 8, 2048, 8, 256, 16, 50.0), ("deepep_ht", "combine", 8, 2048, 8, 256, 64, 200.0),
    ("deepep_ll", "dispatch", 8, 4096, 8, 256, 1, 60.0), ("deepep_ll", "dispatch", 8, 4096, 8, 256, 256, 180.0),
]))


def _q(tokens, hidden=4096, topk=8, phase="combine", kernel="deepep_high_throughput"):
    return MoeA2a(phase, kernel, tokens, hidden, topk, 256)


def test_measured_points_interpolation_and_flat_floor():
    counts = Counter()
    assert TOY.time_s(_q(16), G8, counts) == pytest.approx(100 * US, rel=1e-12)
    assert TOY.time_s(_q(64), G8, counts) == pytest.approx(450 * US, rel=1e-12)      # median of 400 and 500
    assert TOY.time_s(_q(32), G8, counts) == pytest.approx(math.sqrt(100 * 450) * US, rel=1e-12)   # log-log
    assert TOY.time_s(_q(4), G8, counts) == pytest.approx(100 * US, rel=1e-12)       # below: the floor
    assert TOY.time_s(_q(16, phase="dispatch", kernel="deepep_low_latency"), G8, counts) == pytest.approx(
        math.exp(np.interp(math.log(16), [0.0, math.log(256)], [math.log(60), math.log(180)])) * US, rel=1e-12)
    assert not counts


def test_above_the_table_scales_with_tokens_and_is_counted():
    counts = Counter()
    assert TOY.time_s(_q(256), G8, counts) == pytest.approx(450 * 4 * US, rel=1e-12)
    assert counts == {"moe_combine/n=8/above-table": 1}


def test_another_shape_is_fitted_across_the_measured_ones():
    """log seconds linear in log hidden through the two shapes: (2048, 8) 50 us and (4096, 8) 100 us
    at 16 tokens -> hidden 6144 gets 50 x 3 = 150 us (slope 1 here); top-k plays no part."""
    counts = Counter()
    assert TOY.time_s(_q(16, hidden=6144), G8, counts) == pytest.approx(150 * US, rel=1e-9)
    assert TOY.time_s(_q(16, hidden=4096, topk=4), G8, counts) == pytest.approx(100 * US, rel=1e-9)
    assert counts == {"moe_combine/n=8/shape-fit": 2}


def test_no_table_for_the_kernel_phase_or_ep_size():
    counts = Counter()
    assert TOY.time_s(_q(16, kernel="mori_high_throughput"), G8, counts) is None
    assert TOY.time_s(_q(16, kernel="deepep_low_latency"), G8, counts) is None       # LL combine not measured
    assert TOY.time_s(_q(16), G4, counts) is None
    assert not counts


def test_across_nodes_the_one_node_price_scales_by_the_measured_node_ratio():
    """SGLang's rows (another framework: absolute times not vLLM's) give the ratio of n nodes to one
    at the query's token count; the release with the most EP sizes is the one read."""
    sglang = _rows([("deepep_ht", "combine", 8, 7168, 8, 256, 16, 10.0), ("deepep_ht", "combine", 8, 7168, 8, 256, 64, 20.0),
                    ("deepep_ht", "combine", 16, 7168, 8, 256, 16, 30.0), ("deepep_ht", "combine", 16, 7168, 8, 256, 64, 80.0)],
                   framework="sglang", version="0.5.0")
    newer = _rows([("deepep_ht", "combine", 8, 7168, 8, 256, 16, 1.0)], framework="sglang", version="0.5.12")
    vllm = _rows([("deepep_ht", "combine", 8, 4096, 8, 256, 16, 100.0), ("deepep_ht", "combine", 8, 4096, 8, 256, 64, 400.0)])
    tables = tables_from_rows(pd.concat([vllm, sglang, newer]))
    counts = Counter()
    g16 = CommGroup.packed(16, 8)
    assert tables.time_s(_q(16), g16, counts) == pytest.approx(100 * 3 * US, rel=1e-12)
    assert tables.time_s(_q(64), g16, counts) == pytest.approx(400 * 4 * US, rel=1e-12)
    assert tables.time_s(_q(32), g16, counts) == pytest.approx(200 * math.sqrt(3 * 4) * US, rel=1e-12)
    assert counts == {"moe_combine/n=16/node-scaled": 3}
    assert tables.time_s(_q(16), CommGroup.packed(32, 8), counts) is None           # no 4-node rows
    assert tables.time_s(_q(16, phase="dispatch"), g16, counts) is None
    assert TOY.time_s(_q(16), g16, counts) is None                                  # no SGLang rows at all


def test_moe_a2a_only_on_an_all_to_all():
    with pytest.raises(ValueError, match="an MoE dispatch / combine is an all_to_all"):
        CommOp("all_gather", 1.0, 8, moe=_q(16))
    with pytest.raises(ValueError, match=r"MoeA2a.phase='send'; valid"):
        MoeA2a("send", "deepep_low_latency", 1, 1, 1, 1)


def test_batch_engine_tags_dispatch_and_combine_with_the_ranks_tokens():
    h200 = get_gpu("H200")
    model = load_model_spec("deepseek-ai/DeepSeek-V3")
    par = ParallelSpec.from_vllm(tp=1, dp=8, enable_expert_parallel=True)
    engine = BatchEngine(model, par, h200, RooflineCostModel(h200), CudaGraphConfig.from_vllm(256, 8192, False, 90),
                         all2all_backend="deepep_low_latency")
    a2a = [op for op, n in engine.layer_ops(64) if isinstance(op, CommOp) and op.kind == "all_to_all"]
    assert [op.moe for op in a2a] == [MoeA2a(p, "deepep_low_latency", 64, 7168, 8, 256) for p in ("dispatch", "combine")]
    # the analytical backend prices them as before: the all_to_all of the busiest rank's routed bytes
    analytical = AnalyticalCommBackend(h200)
    assert RooflineCostModel(h200).op_times_s(a2a, "kernel") == [
        analytical.collective_time_s("all_to_all", 64 * 8 * 7168 * 2, CommGroup.packed(8, 8))] * 2


AIC = SHARED_AIC_DIR / "systems" / "data" / "h200_sxm" / "comm" / "vllm" / "0.24.0" / "moe_a2a_perf.parquet"


@pytest.mark.skipif(not AIC.is_file(), reason="shared AIConfigurator data absent")
def test_calibrated_backend_prices_deepep_from_the_h200_tables(tmp_path):
    h200 = get_gpu("H200")
    calibrated = make_comm_backend("calibrated", h200, data_root=SHARED_AIC_DIR, cache_dir=tmp_path)
    raw = pd.read_parquet(AIC)
    g8 = CommGroup.packed(8, 8)
    ht = raw[(raw.comm_backend == "deepep_ht") & (raw.phase == "combine") & (raw.hidden_size == 7168)
             & (raw.topk == 8) & (raw.num_tokens == 1024)]
    assert len(ht) == 2                          # 256 and 384 experts: their median
    moe = MoeA2a("combine", "deepep_high_throughput", 1024, 7168, 8, 256)
    assert calibrated.moe_a2a_time_s(moe, 1.0, g8) == pytest.approx(ht.latency.median() * US, rel=1e-12)
    ll = raw[(raw.comm_backend == "deepep_ll") & (raw.phase == "dispatch") & (raw.hidden_size == 4096)
             & (raw.topk == 6) & (raw.num_tokens == 128)]
    moe = MoeA2a("dispatch", "deepep_low_latency", 128, 4096, 6, 256)
    assert calibrated.moe_a2a_time_s(moe, 1.0, g8) == pytest.approx(ll.latency.median() * US, rel=1e-12)
    assert not calibrated.fallbacks
    # two nodes: the one-node price x SGLang's measured 2-node / 1-node ratio (LL dispatch, 128 tokens)
    sg = pd.read_parquet(SHARED_AIC_DIR / "systems" / "data" / "h200_sxm" / "comm" / "sglang" / "0.5.6.post2" /
                         "wideep_deepep_ll_perf.parquet")
    sg = sg[sg.num_token == 128].groupby("node_num").dispatch_avg_t_us.median()
    g16 = CommGroup.packed(16, 8)
    assert calibrated.moe_a2a_time_s(moe, 1.0, g16) == pytest.approx(ll.latency.median() * US * sg[2] / sg[1], rel=1e-12)
    assert calibrated.extrapolated == {"moe_dispatch/n=16/node-scaled": 1}
    # no table: EP 128 (16 nodes), or a kernel AIC did not time -> the analytical all_to_all, counted
    analytical = AnalyticalCommBackend(h200)
    g128 = CommGroup.packed(128, 8)
    assert calibrated.moe_a2a_time_s(moe, 1 << 20, g128) == analytical.collective_time_s("all_to_all", 1 << 20, g128)
    mori = MoeA2a("dispatch", "mori_low_latency", 128, 4096, 6, 256)
    assert calibrated.moe_a2a_time_s(mori, 1 << 20, g8) == analytical.collective_time_s("all_to_all", 1 << 20, g8)
    assert calibrated.fallbacks == {"moe_dispatch/n=128/deepep_low_latency-multi-node-no-table": 1,
                                    "moe_dispatch/n=8/mori_low_latency-in-one-node-no-table": 1}


@pytest.mark.skipif(not AIC.is_file(), reason="shared AIConfigurator data absent")
def test_a_run_reports_what_the_measured_comm_tables_did_not_cover(tmp_path, monkeypatch):
    """Qwen3-30B-A3B (hidden 2048: a shape the DeepEP tables fit, not hold) with DP 8 x EP on H200s:
    every dispatch / combine from the EP-8 tables, off their points; at DP 2 (EP 2: no table) all
    analytical. The summary counts distinct queries; the CLI prints them."""
    from typer.testing import CliRunner

    from frontier.cli import app
    from simulator.engine_args import EngineArgs
    from simulator.simulation import SimulationSpec, run_simulation
    from simulator.workload import WorkloadSpec
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path))

    def summary(dp):
        engine = EngineArgs(model="Qwen/Qwen3-30B-A3B", gpu="H200", data_parallel_size=dp, enable_expert_parallel=True,
                            max_model_len=2048, all2all_backend="deepep_low_latency")
        return run_simulation(SimulationSpec(engine=engine, comm_model="calibrated", workload=WorkloadSpec(
            num_prompts=16, random_input_len=300, random_output_len=4))).summary

    s8, s2 = summary(8), summary(2)
    moe8 = s8["comm_queries"] - s8["comm_queries_analytical"]
    assert moe8 == s8["comm_queries_extrapolated"] > 0 and s8["comm_queries_analytical"] == 0
    assert s2["comm_queries_analytical"] == s2["comm_queries"] > 0 and s2["comm_queries_extrapolated"] == 0
    res = CliRunner().invoke(app, ["simulate", "--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H200", "-dp", "8",
                                   "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency",
                                   "--comm-model", "calibrated", "--num-prompts", "16", "--random-input-len", "300",
                                   "--random-output-len", "4", "--max-model-len", "2048"])
    assert res.exit_code == 0, res.output
    assert (f"calibrated comm: {moe8} of {moe8} distinct collectives priced from measured tables ({moe8} off their "
            "measured points: a DeepEP shape, token count or multi-node EP size they do not hold); 0 by the analytical "
            "model (no table for that kernel or group)") in res.output
