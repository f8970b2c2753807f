"""The whole pipeline on a CPU: profile -> calibrate -> simulate, with costs from that bundle."""

import pytest
from typer.testing import CliRunner

from calibration.bundle import load_bundle
from frontier.cli import app
from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig
from simulator.events import EventLoop
from simulator.kv_cache.manager import KVCacheManager
from simulator.predictor_cost import PredictorCostModel
from simulator.replica import Replica
from simulator.request import RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import SchedulerConfig
from simulator.trace import BatchTrace

runner = CliRunner()


def test_profile_calibrate_simulate_on_cpu(dense_config, tmp_path):
    profiles, bundle = tmp_path / "profiles", tmp_path / "cpu.joblib"
    grid = tmp_path / "grid.yaml"
    grid.write_text("linear_tokens: [1, 2, 4, 8, 16, 32, 64]\nattention_decode_ctx: [16, 64]\nchunk_size: 16\n")
    res = runner.invoke(app, ["profile", "--model", dense_config, "-tp", "1", "--families", "linear,attention",
                              "--out", str(profiles), "--grid", str(grid), "--warmup-ms", "0", "--budget-ms", "1",
                              "--dtype", "bf16"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["calibrate", "--profiles", str(profiles), "--gpu", "cpu", "--out", str(bundle),
                              "--family", "linear", "--family", "attention"])
    assert res.exit_code == 0, res.output
    loaded = load_bundle(bundle)
    assert loaded.manifest["gpu"] == "cpu" and {"linear", "attention"} <= set(loaded.predictors)

    # simulate the tiny model with those costs (GPU rates only for ops the bundle lacks)
    model = load_model_spec(dense_config)
    cost = PredictorCostModel(loaded, RooflineCostModel(get_gpu("H100")))
    engine = BatchEngine(model, ParallelSpec(), get_gpu("H100"), cost,
                         CudaGraphConfig.from_vllm(8, 64, enforce_eager=True))
    cfg = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256, async_scheduling=False)
    loop = EventLoop()
    replica = Replica(0, loop, Scheduler(cfg, KVCacheManager(64, 16, 256)), engine, BatchTrace(True),
                      lambda *a: None, async_scheduling=False)
    for i in range(4):
        replica.add_request(RequestSpec(str(i), 0.0, 24, 4))
    loop.run()
    assert cost.num_predicted > 0 and replica.trace.num_steps() >= 4
    # every step lasts what the bundle-priced engine says, and that differs from the roofline
    roofline = BatchEngine(model, ParallelSpec(), get_gpu("H100"), RooflineCostModel(get_gpu("H100")),
                           CudaGraphConfig.from_vllm(8, 64, enforce_eager=True))
    steps, reqs = replica.trace.step_cols, replica.trace.req_cols
    for k in range(replica.trace.num_steps()):
        rows = [i for i, s in enumerate(reqs["step"]) if s == k]
        batch = BatchShape(tuple(reqs["num_scheduled_tokens"][i] for i in rows),
                           tuple(reqs["context_len"][i] for i in rows))
        assert steps["end_s"][k] - steps["start_s"][k] == pytest.approx(engine.step_cost(batch).duration_s)
        assert engine.step_cost(batch).duration_s != pytest.approx(roofline.step_cost(batch).duration_s,
                                                                   rel=0.01)
