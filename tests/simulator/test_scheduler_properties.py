"""Property tests over random workloads and configs, with the per-step invariant checks on."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.request import RequestSpec
from simulator.scheduler_config import SchedulerConfig
from simulator.scheduler_trace import drive, make_scheduler, run_scheduler_only

BS = 16


@st.composite
def workloads(draw):
    max_model_len = draw(st.sampled_from([64, 128, 256]))
    max_num_seqs = draw(st.sampled_from([1, 2, 4, 8]))
    chunked = draw(st.booleans())
    budget = max(max_num_seqs, draw(st.sampled_from([8, 32, 100, 256])))
    if not chunked:
        budget = max(budget, max_model_len)
    config = SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        max_model_len=max_model_len,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 8, 24])),
        policy=draw(st.sampled_from(["fcfs", "priority"])),
        async_scheduling=draw(st.booleans()),
        enable_chunked_prefill=chunked,
        watermark=draw(st.sampled_from([0.0, 0.0, 0.1])),
        enable_prefix_caching=draw(st.booleans()),
        debug=True,
    )
    prefix = tuple(draw(st.lists(st.integers(1, 50), max_size=40)))
    specs = []
    for i in range(draw(st.integers(1, 12))):
        p = draw(st.integers(1, max_model_len - 1))
        shared = draw(st.booleans())
        toks = (prefix + tuple(range(1000 + i * 300, 1000 + i * 300 + p)))[:p] if shared else None
        specs.append(RequestSpec(f"r{i}", 0.0, p, draw(st.integers(1, 40)), draw(st.integers(0, 2)), toks))
    need = max(-(-min(s.prompt_len + s.output_len, max_model_len) // BS) for s in specs)
    watermark_blocks = 1 + int(config.watermark * 4 * need)
    num_blocks = need + watermark_blocks + draw(st.integers(1, 30))
    return specs, config, num_blocks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_every_request_finishes_with_its_outputs_and_blocks_return(case):
    specs, config, num_blocks = case
    sched = make_scheduler(config, num_blocks)
    reqs = [sched.add_request(s) for s in specs]
    tokens: dict[str, int] = {}
    finished: list[str] = []

    def on_schedule(out):
        assert out.total_num_scheduled_tokens <= config.max_num_batched_tokens
        assert len(set(out.request_ids)) == len(out.request_ids)

    def on_update(out, res):
        for rid in res.token_request_ids:
            tokens[rid] = tokens.get(rid, 0) + 1
        finished.extend(res.finished_request_ids)

    drive(sched, on_schedule, on_update)
    assert sorted(finished) == sorted(s.request_id for s in specs)
    for s, r in zip(specs, reqs):
        expected = min(s.output_len, config.max_model_len - s.prompt_len)
        assert r.num_output_tokens == expected == tokens[s.request_id]
        assert r.is_finished
    assert sched.kv.num_free_blocks == num_blocks - 1
    assert sched.kv.req_to_blocks == {}


@settings(max_examples=40, deadline=None)
@given(workloads())
def test_deterministic(case):
    specs, config, num_blocks = case
    assert run_scheduler_only(specs, config, num_blocks) == run_scheduler_only(specs, config, num_blocks)


def test_debug_mode_catches_a_lost_block():
    config = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=64, max_model_len=128, debug=True)
    sched = make_scheduler(config, 10)
    sched.add_request(RequestSpec("a", 0.0, 20, 4))
    sched.update_from_output(sched.schedule())
    sched.kv.pool.get_new_blocks(1)  # leak a block behind the manager's back
    with pytest.raises(AssertionError, match="sum\\(ref_cnt\\)"):
        sched.schedule()


def test_debug_mode_from_environment(monkeypatch):
    monkeypatch.setenv("FRONTIER_SCHED_DEBUG", "1")
    assert SchedulerConfig().debug_checks
    monkeypatch.setenv("FRONTIER_SCHED_DEBUG", "0")
    assert not SchedulerConfig().debug_checks
