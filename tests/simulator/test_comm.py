"""Communication backends: hand-computed analytical numbers, hierarchy, measured tables, link sharing."""

import math

import numpy as np
import pandas as pd
import pytest

from frontier.gpu import GpuSpec, get_gpu
from frontier.ops import CommOp
from simulator.comm import AnalyticalCommBackend, CommGroup, Endpoint, LinkPool, make_comm_backend
from simulator.comm.calibrated import SHARED_AIC_DIR, custom_ar_max_bytes, vllm_picks_custom_ar
from simulator.cost_model import RooflineCostModel

GPU = GpuSpec(name="toy", memory_bytes=80 << 30, hbm_bw_bytes_per_s=2e12, bf16_flops=1e15, fp8_flops=2e15,
              fp4_flops=0, fp32_flops=67e12, nvlink_bw_bytes_per_s=4e11, network_bw_bytes_per_s=5e10, gpus_per_node=8,
              price_per_hour_usd=0.0, sm_version=90, source="test")
NV, NET = 4e11 * 0.80, 5e10 * 0.85          # effective link rates (LINK_EFF)
MIB = 1 << 20
A = AnalyticalCommBackend(GPU)


def test_in_node_ring_numbers_by_hand():
    s = MIB
    assert A.collective_time_s("all_reduce", s, CommGroup.packed(8, 8)) == pytest.approx(6e-6 + 2 * 7 / 8 * s / NV)
    assert A.collective_time_s("all_gather", s, CommGroup.packed(4, 8)) == pytest.approx(6e-6 + 3 / 4 * s / NV)
    assert A.collective_time_s("reduce_scatter", s, CommGroup.packed(2, 8)) == pytest.approx(6e-6 + 1 / 2 * s / NV)
    assert A.collective_time_s("all_to_all", s, CommGroup.packed(8, 8)) == pytest.approx(6e-6 + 7 / 8 * s / NV)
    assert A.collective_time_s("all_reduce", s, CommGroup.packed(1, 8)) == 0.0


def test_flat_network_takes_the_cheaper_of_ring_and_tree():
    group = CommGroup(4, 8, 1)                     # four ranks, one per node
    big, small = MIB, 1024
    ring = lambda s: 25e-6 + (2 * 3 - 1) * 5e-6 + 2 * 3 / 4 * s / NET   # 6 steps
    tree = lambda s: 25e-6 + (2 * 2 - 1) * 5e-6 + 2 * s / NET           # 2*log2(4) = 4 steps
    assert ring(big) < tree(big) and tree(small) < ring(small)
    assert A.collective_time_s("all_reduce", big, group) == pytest.approx(ring(big))
    assert A.collective_time_s("all_reduce", small, group) == pytest.approx(tree(small))


def test_hierarchical_all_reduce_by_hand():
    s = 16 * MIB
    group = CommGroup.packed(16, 8)                # 2 nodes x 8
    assert (group.num_nodes, group.ranks_per_node) == (2, 8)
    rs = ag = 6e-6 + 7 / 8 * s / NV
    inter = 25e-6 + 5e-6 + 2 * 1 / 2 * (s / 8) / NET   # ring of 2 nodes on 1/8 of the tensor
    assert A.collective_time_s("all_reduce", s, group) == pytest.approx(rs + inter + ag)
    gather = (25e-6 + 1 / 2 * (s / 8) / NET) + (6e-6 + 7 / 8 * s / NV)
    assert A.collective_time_s("all_gather", s, group) == pytest.approx(gather)


def test_across_nodes_is_slower_than_in_node_and_faster_than_flat_network():
    s = 16 * MIB
    in_node = A.collective_time_s("all_reduce", s, CommGroup.packed(8, 8))
    two_nodes = A.collective_time_s("all_reduce", s, CommGroup.packed(16, 8))
    flat = A.collective_time_s("all_reduce", s, CommGroup(16, 8, 1))
    assert in_node < two_nodes < flat
    a2a = [A.collective_time_s("all_to_all", s, CommGroup.packed(n, 8)) for n in (8, 16)]
    assert a2a[0] < a2a[1]


def test_transfers_by_endpoint():
    s = 64 * MIB
    assert A.transfer_time_s(s, Endpoint(0, 1), Endpoint(0, 1)) == 0.0
    assert A.transfer_time_s(s, Endpoint(0, 0), Endpoint(0, 3)) == pytest.approx(6e-6 + s / NV)
    assert A.transfer_time_s(s, Endpoint(0, 0), Endpoint(1, 0)) == pytest.approx(25e-6 + s / NET)
    pcie = GpuSpec(**{**GPU.__dict__, "name": "pcie", "nvlink_bw_bytes_per_s": 32e9})
    assert AnalyticalCommBackend(pcie).link_between(Endpoint(0, 0), Endpoint(0, 1)) == "pcie"


def test_group_validation_and_op_placement():
    with pytest.raises(ValueError, match="ranks_per_node"):
        CommGroup(12, 8, 8)
    with pytest.raises(ValueError, match="multiple"):
        CommGroup.packed(12, 8)
    with pytest.raises(ValueError, match="ranks_per_node"):
        CommOp("all_reduce", 1.0, 12, "nvlink", 8)
    assert CommGroup.from_op(CommOp("all_reduce", 1.0, 8), GPU) == CommGroup(8, 8, 8)
    assert CommGroup.from_op(CommOp("all_reduce", 1.0, 4, "network"), GPU) == CommGroup(4, 8, 1)
    assert CommGroup.from_op(CommOp("all_reduce", 1.0, 16, "nvlink", 8), GPU) == CommGroup(16, 8, 8)


def test_cost_model_delegates_to_the_backend():
    op = CommOp("all_reduce", 16 * MIB, 16, "nvlink", 8)
    assert RooflineCostModel(GPU).comm_time_s(op) == A.collective_time_s("all_reduce", 16 * MIB, CommGroup.packed(16, 8))

    class Fixed:
        name = "fixed"

        def collective_time_s(self, kind, message_bytes, group):
            return 1.0 + group.size

    assert RooflineCostModel(GPU, Fixed()).op_times_s([CommOp("all_gather", 8.0, 4)], "kernel") == [5.0]
    with pytest.raises(ValueError, match="comm-model"):
        make_comm_backend("ns3", GPU)


def test_vllm_custom_all_reduce_size_limits():
    assert custom_ar_max_bytes(90, 8) == 256 * 1024 and custom_ar_max_bytes(90, 4) == 8 * MIB
    assert custom_ar_max_bytes(100, 8) == MIB and custom_ar_max_bytes(80, 8) == 8 * MIB
    g8 = CommGroup.packed(8, 8)
    assert vllm_picks_custom_ar(256 * 1024 - 16, g8, 90) and not vllm_picks_custom_ar(256 * 1024, g8, 90)
    assert not vllm_picks_custom_ar(1024, CommGroup.packed(4, 8, "pcie"), 89)
    assert vllm_picks_custom_ar(1024, CommGroup.packed(2, 8, "pcie"), 89)
    assert not vllm_picks_custom_ar(1024, CommGroup.packed(16, 8), 90)


# ---- measured tables (AIConfigurator perf DB in ../shared) --------------------------------------
AIC = SHARED_AIC_DIR / "systems" / "data" / "h100_sxm" / "comm"
needs_aic = pytest.mark.skipif(not AIC.is_dir(), reason="shared AIConfigurator data absent")


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    return make_comm_backend("calibrated", get_gpu("H100"), data_root=SHARED_AIC_DIR,
                             cache_dir=tmp_path_factory.mktemp("profiles"))


def _raw(rel: str, dtype_col: str, dtype: str, **match) -> pd.DataFrame:
    d = pd.read_parquet(AIC / rel)
    d = d[d[dtype_col] == dtype]
    for k, v in match.items():
        d = d[d[k] == v]
    return d


@needs_aic
def test_calibrated_hits_measured_points_exactly(calibrated):
    versions = sorted((AIC / "vllm").glob("*/custom_allreduce_perf.parquet"))
    tables = [_raw(p.relative_to(AIC), "allreduce_dtype", "bfloat16", num_gpus=8, backend="vllm_graph",
                   message_size=4096) for p in versions]
    g8 = CommGroup.packed(8, 8)
    got = calibrated.collective_time_s("all_reduce", 4096 * 2, g8)          # 8 KiB < 256 KiB: custom AR
    assert any(got == pytest.approx(t["latency"].median() / 1e3, rel=1e-12) for t in tables if len(t))
    nccl = _raw("nccl/2.27.3/nccl_perf.parquet", "nccl_dtype", "half", num_gpus=8, op_name="all_reduce",
                message_size=8 * MIB)          # 16 MiB fp16; the table repeats each point: median of repeats
    assert calibrated.collective_time_s("all_reduce", 16 * MIB, g8) == pytest.approx(nccl["latency"].median() / 1e3,
                                                                                      rel=1e-12)
    assert not calibrated.fallbacks


@needs_aic
def test_calibrated_interpolates_log_log_and_falls_back_outside(calibrated):
    lo, hi = calibrated.measured_time_s("nccl", "all_gather", 4 * MIB, 8), \
        calibrated.measured_time_s("nccl", "all_gather", 8 * MIB, 8)
    mid = calibrated.collective_time_s("all_gather", math.sqrt(32) * MIB, CommGroup.packed(8, 8))
    assert mid == pytest.approx(math.sqrt(lo * hi), rel=1e-9)
    huge = 1 << 40
    analytical = AnalyticalCommBackend(get_gpu("H100"))
    g = CommGroup.packed(8, 8)
    assert calibrated.collective_time_s("all_gather", huge, g) == analytical.collective_time_s("all_gather", huge, g)
    assert calibrated.fallbacks["all_gather/n=8/nccl-out-of-range"] == 1
    two_nodes = calibrated.collective_time_s("all_reduce", 16 * MIB, CommGroup.packed(16, 8))
    assert two_nodes > calibrated.collective_time_s("all_reduce", 16 * MIB, g)
    assert calibrated.fallbacks["all_reduce/n=16/multi-node"] == 1


# ---- link sharing -----------------------------------------------------------------------------
def test_link_pool_alone_then_shared_halves_throughput():
    bw, lat, b = 1e9, 1e-3, 1e9
    alone = LinkPool(bw, lat)
    alone.add(0.0, "a", b)
    assert alone.next_landing_s() == pytest.approx(1.0 + lat)
    pool = LinkPool(bw, lat)
    pool.add(0.0, "a", b)
    pool.add(0.0, "b", b)
    assert pool.rate_bytes_per_s() == bw / 2
    assert pool.next_landing_s() == pytest.approx(2.0 + lat)
    assert pool.pop_landed(1.5) == [] and pool.pop_landed(2.0 + lat) == ["a", "b"]
    assert pool.next_landing_s() is None


def test_link_pool_staggered_processor_sharing():
    pool = LinkPool(1e9)
    pool.add(0.0, "a", 1e9)                      # alone for 0.5 s: 0.5e9 left
    pool.add(0.5, "b", 1e9)                      # shared: a drains 0.5e9 at 0.5e9/s -> 1.5 s
    v = pool.version
    assert pool.next_landing_s() == pytest.approx(1.5)
    assert pool.pop_landed(1.5) == ["a"] and pool.version > v
    assert pool.next_landing_s() == pytest.approx(2.0)   # b: 0.5e9 left, alone again
    pool.remove(1.75, "b")
    assert pool.num_active == 0 and pool.next_landing_s() is None
    with pytest.raises(ValueError, match="backwards"):
        pool.advance(1.0)
    with pytest.raises(ValueError, match="already"):
        pool.add(2.0, "c", 1.0) or pool.add(2.0, "c", 1.0)


def test_link_pool_from_backend():
    pool = LinkPool(A.link_bandwidth_bytes_per_s("network"), A.link_latency_s("network"))
    pool.add(0.0, 1, 64 * MIB)
    assert pool.next_landing_s() == pytest.approx(A.transfer_time_s(64 * MIB, Endpoint(0), Endpoint(1)))
    assert np.isclose(pool.bandwidth_bytes_per_s, NET)


# ---- wiring: SimulationSpec / CLI -----------------------------------------------------------------
@needs_aic
def test_simulation_with_calibrated_comm(tmp_path, monkeypatch):
    from simulator import comm
    from simulator.engine_args import EngineArgs
    from simulator.simulation import SimulationSpec, run_simulation
    from simulator.workload import WorkloadSpec
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path))
    wl = WorkloadSpec(num_prompts=10, random_input_len=200, random_output_len=8, seed=1)
    eng = EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100", tensor_parallel_size=8, max_model_len=2048)
    runs = {m: run_simulation(SimulationSpec(engine=eng, workload=wl, comm_model=m)) for m in comm.COMM_MODELS}
    assert all(r.summary["completed"] == 10 for r in runs.values())
    assert runs["calibrated"].simulated_duration_s != runs["analytical"].simulated_duration_s
    assert any((tmp_path / "profiles" / "aiconfigurator-3").glob("family=comm/gpu=H100-SXM/part-*.parquet"))


def test_cli_rejects_an_unknown_comm_model():
    from typer.testing import CliRunner

    from frontier.cli import app
    res = CliRunner().invoke(app, ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100",
                                   "--num-prompts", "2", "--comm-model", "ns3"])
    assert res.exit_code == 2 and "comm-model" in res.output
    res = CliRunner().invoke(app, ["simulate", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100",
                                   "--num-prompts", "2", "--moe-routing", "zipf"])
    assert res.exit_code == 2 and "moe-routing" in res.output
