"""The whole pipeline on a CPU: profile -> calibrate -> simulate, with costs from that bundle."""

import numpy as np
import pytest
from typer.testing import CliRunner

from calibration.bundle import load_bundle
from frontier.cli import app
from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.ops import ElementwiseOp
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
    grid.write_text("linear_tokens: [1, 2, 4, 8, 16, 32, 64]\nattention_decode_ctx: [16, 64]\nchunk_size: 16\n"
                    "elementwise_tokens: [1, 2, 4, 8, 16, 32, 64]\nmemory_max_num_batched_tokens: [16, 32]\n")
    res = runner.invoke(app, ["profile", "--model", dense_config, "-tp", "1",
                              "--families", "linear,attention,elementwise,memory",
                              "--out", str(profiles), "--grid", str(grid), "--warmup-ms", "0", "--budget-ms", "1",
                              "--dtype", "bf16"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["calibrate", "--profiles", str(profiles), "--gpu", "cpu", "--out", str(bundle),
                              "--family", "linear", "--family", "attention", "--family", "elementwise"])
    assert res.exit_code == 0, res.output
    loaded = load_bundle(bundle)
    assert loaded.manifest["gpu"] == "cpu" and set(loaded.predictors) == {"linear", "attention", "elementwise"}
    [fit] = loaded.manifest["memory"]["fits"]   # calibrate stores the memory rows' fit beside the predictors
    assert (fit["model"], fit["tp"], fit["max_num_batched_tokens"]) == (load_model_spec(dense_config).name, 1, [16, 32])
    # 5 kernels x 7 token counts x 2 timing modes; one sub-model per (mode, kernel, dtype)
    assert loaded.manifest["families"]["elementwise"]["training_rows"] == 70
    assert sorted(loaded.manifest["families"]["elementwise"]["model_choice"])[:2] == [
        "kernel:fused_add_rms_norm:bf16", "kernel:kv_cache_write:bf16"]

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

    # the engine's norms / RoPE / activation are priced by the bundle's elementwise predictor, in
    # range (the profiled widths); embedding and sampler have no profiled kernel: roofline, counted
    tokens = max(reqs["num_scheduled_tokens"])
    ops = [op for op, _ in engine.layer_ops(tokens) if isinstance(op, ElementwiseOp)]
    names = [op.name for op in ops]
    assert names == ["embedding", "final_norm", "input_norm", "post_norm", "rotary", "mlp_act"]
    fresh = PredictorCostModel(loaded, RooflineCostModel(get_gpu("H100")))
    times = fresh.op_times_s(ops, "launch")
    assert (fresh.num_predicted, fresh.num_fallback, fresh.num_out_of_range) == (5, 1, 0)
    own, oor = loaded.predictors["elementwise"].predict_s(ops[1:], "launch", return_mask=True)
    assert times[1:] == pytest.approx(own.tolist(), rel=1e-12) and not oor.any()
    assert times[0] == pytest.approx(RooflineCostModel(get_gpu("H100")).op_times_s(ops[:1], "launch")[0])
    assert np.isnan(loaded.predictors["elementwise"].predict_s(ops[:1], "launch")[0])
