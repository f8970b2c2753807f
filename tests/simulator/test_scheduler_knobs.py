"""vLLM 0.33's scheduler knobs from the command line: --watermark, --max-num-active-seqs,
--long-prefill-token-threshold-adaptive, --no-scheduler-reserve-full-isl (their step-by-step
parity with vLLM: tests/oracle/test_parity.py)."""

import pytest

from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.workload import WorkloadSpec


def _run(**kw):
    engine = EngineArgs(model="meta-llama/Llama-3.1-8B", max_model_len=4096, **kw)
    return run_simulation(SimulationSpec(engine=engine, workload=WorkloadSpec(
        num_prompts=64, random_input_len=512, random_output_len=64), keep_batch_trace=True))


def test_max_num_active_seqs_caps_running_but_not_the_graphs():
    capped = _run(max_num_active_seqs=8)
    assert max(capped.trace.step_cols["num_reqs"]) == 8
    assert max(_run().trace.step_cols["num_reqs"]) == 64
    resolved = EngineArgs(model="meta-llama/Llama-3.1-8B", max_num_active_seqs=8)
    from simulator.simulation import resolve_engine
    r = resolve_engine(resolved)
    assert r.scheduler_config().max_num_active_seqs == 8 and r.cudagraph_config().max_capture_size == 512


def test_watermark_and_adaptive_threshold_reach_the_scheduler():
    from simulator.simulation import resolve_engine
    cfg = resolve_engine(EngineArgs(watermark=0.05, long_prefill_token_threshold=64,
                                    long_prefill_token_threshold_adaptive=True)).scheduler_config()
    assert (cfg.watermark, cfg.long_prefill_token_threshold_adaptive) == (0.05, True)
    def reserve(**kw):
        return resolve_engine(EngineArgs(**kw)).scheduler_config().scheduler_reserve_full_isl
    # the whole prompt's blocks from vLLM 0.19 (the flag's default), its first chunk's before
    assert (reserve(), reserve(scheduler_reserve_full_isl=False), reserve(vllm_version="0.18.0")) == (True, False, False)
    tight = dict(num_gpu_blocks_override=300)
    assert _run(watermark=0.3, **tight).summary["mean_ttft_ms"] != _run(**tight).summary["mean_ttft_ms"]
    plain, adaptive = (_run(long_prefill_token_threshold=32, long_prefill_token_threshold_adaptive=a)
                       for a in (False, True))
    assert adaptive.summary["mean_ttft_ms"] < plain.summary["mean_ttft_ms"]


@pytest.mark.parametrize("kw,message", [
    (dict(watermark=0.1, vllm_version="0.23.0"), "--watermark came with vLLM 0.24; --vllm-version 0.23.0 has none"),
    (dict(max_num_active_seqs=4, vllm_version="0.30.0"), "--max-num-active-seqs came with vLLM 0.31"),
    (dict(long_prefill_token_threshold_adaptive=True, vllm_version="0.24.0"),
     "--long-prefill-token-threshold-adaptive came with vLLM 0.31"),
    (dict(watermark=1.0), r"--watermark must be in \[0, 1\), got 1.0"),
    (dict(scheduler_reserve_full_isl=False, vllm_version="0.18.0"),
     r"--\[no-\]scheduler-reserve-full-isl came with vLLM 0.19"),
])
def test_refused(kw, message):
    with pytest.raises(ValueError, match=message):
        EngineArgs(**kw)


def test_queued_limits_refuse_with_503_at_the_server():
    """--max-num-queued-reqs 40: 200 requests at t=0, the server holds 40 and refuses 160 (HTTP 503,
    failed requests, as vllm bench serve counts them). --max-num-queued-tokens: a request is refused
    while the prompts still in prefill reach the limit (whole prompts, as vLLM's API server counts)."""
    def run(**kw):
        engine = EngineArgs(model="meta-llama/Llama-3.1-8B", max_model_len=4096, **kw)
        return run_simulation(SimulationSpec(engine=engine, workload=WorkloadSpec(
            num_prompts=200, random_input_len=512, random_output_len=16)))
    capped = run(max_num_queued_reqs=40)
    assert (len(capped.records), len(capped.failed)) == (40, 160)
    assert next(iter(capped.failed.values())) == "HTTP 503: the server holds 40 unfinished requests " \
        "(--max-num-queued-reqs 40)"
    tokens = run(max_num_queued_tokens=5000)
    assert len(tokens.records) == 10 and len(tokens.failed) == 190       # 10 prompts of 512 reach 5,000
    assert len(run().failed) == 0


def test_queued_limits_need_a_colocated_deployment_and_vllm_029():
    with pytest.raises(ValueError, match="--max-num-queued-reqs came with vLLM 0.29"):
        EngineArgs(max_num_queued_reqs=8, vllm_version="0.28.0")
    with pytest.raises(ValueError, match="simulated for co-located deployments"):
        SimulationSpec(engine=EngineArgs(max_num_queued_tokens=8), architecture="pdd")


def test_prefill_schedule_interval_holds_prefill_between_release_steps():
    """vLLM 0.24+'s local prefill cadence (its step-by-step parity: tests/oracle/test_parity.py):
    at a light Poisson load prefills wait for a release step, so TTFT grows with the interval."""
    def ttft(n):
        engine = EngineArgs(model="meta-llama/Llama-3.1-8B", max_model_len=4096, prefill_schedule_interval=n)
        return run_simulation(SimulationSpec(engine=engine, workload=WorkloadSpec(
            num_prompts=60, random_input_len=512, random_output_len=64, request_rate=10.0))).summary["mean_ttft_ms"]
    assert ttft(1) < ttft(4) < ttft(8)
    with pytest.raises(ValueError, match="--prefill-schedule-interval came with vLLM 0.24"):
        EngineArgs(prefill_schedule_interval=2, vllm_version="0.23.0")
    moe_dp = EngineArgs(model="Qwen/Qwen3-30B-A3B", data_parallel_size=2, prefill_schedule_interval=2)
    with pytest.raises(ValueError, match="--prefill-schedule-interval with MoE DP ranks"):
        run_simulation(SimulationSpec(engine=moe_dp, workload=WorkloadSpec(num_prompts=2)))
    with pytest.raises(ValueError, match="--prefill-schedule-interval is simulated for co-located deployments"):
        SimulationSpec(engine=EngineArgs(prefill_schedule_interval=2), architecture="pdd")
