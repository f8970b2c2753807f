"""WorkloadSpec validation, vLLM arrival process and the random dataset (exact values)."""

import math

import numpy as np
import pytest

from simulator.workload import WorkloadSpec, generate_requests
from simulator.workloads.arrivals import arrival_times_s


def vllm_arrivals(n, rate, burstiness, seed):
    """vllm/benchmarks/serve.py get_request (no ramp-up), after main_async's np.random.seed(seed)."""
    np.random.seed(seed)
    delay_ts = []
    for _ in range(n):
        if rate == float("inf"):
            delay_ts.append(0)
        elif burstiness == float("inf"):
            delay_ts.append(1.0 / rate)
        else:
            delay_ts.append(np.random.gamma(shape=burstiness, scale=1.0 / (rate * burstiness)))
    for i in range(1, len(delay_ts)):
        delay_ts[i] += delay_ts[i - 1]
    if delay_ts[-1] != 0:
        factor = (n / rate) / delay_ts[-1]
        delay_ts = [d * factor for d in delay_ts]
    return delay_ts


def test_arrivals_seed0_rate10_n5_match_vllm_formula():
    got = arrival_times_s(5, 10.0, 1.0, 0)
    assert got == vllm_arrivals(5, 10.0, 1.0, 0)
    assert got == [0.09225866000617942, 0.23784755381206038, 0.3448686098264802, 0.4361218447563611, 0.5]


@pytest.mark.parametrize("rate,burstiness,seed", [(10.0, 0.5, 0), (3.0, 2.0, 7), (2.0, math.inf, 0), (math.inf, 1.0, 0)])
def test_arrivals_match_vllm_formula(rate, burstiness, seed):
    assert arrival_times_s(50, rate, burstiness, seed) == vllm_arrivals(50, rate, burstiness, seed)


def test_arrivals_constant_gap_and_infinite_rate():
    assert arrival_times_s(4, 2.0, math.inf, 0) == [0.5, 1.0, 1.5, 2.0]
    assert arrival_times_s(3, math.inf, 1.0, 0) == [0.0, 0.0, 0.0]


def test_random_lengths_fixed_when_ratio_zero():
    reqs = generate_requests(WorkloadSpec(num_prompts=3, random_input_len=100, random_output_len=10))
    assert [(r.request_id, r.arrival_s, r.prompt_len, r.output_len, r.prompt_token_ids) for r in reqs] == [
        ("0", 0.0, 100, 10, None),
        ("1", 0.0, 100, 10, None),
        ("2", 0.0, 100, 10, None),
    ]


def test_random_lengths_uniform_like_vllm():
    spec = WorkloadSpec(num_prompts=5, request_rate=10.0, random_input_len=100, random_output_len=10, random_range_ratio=0.5)
    reqs = generate_requests(spec)
    # vLLM get_sampling_params: rng = default_rng(0); integers(50, 151, 5) then integers(5, 16, 5)
    assert [r.prompt_len for r in reqs] == [135, 114, 101, 77, 81]
    assert [r.output_len for r in reqs] == [5, 5, 5, 6, 13]
    assert [r.arrival_s for r in reqs] == vllm_arrivals(5, 10.0, 1.0, 0)
    assert generate_requests(spec, vocab_size=1000) == reqs  # offsets drawn after lengths


def test_random_shared_prefix_has_real_token_ids():
    spec = WorkloadSpec(num_prompts=3, random_input_len=5, random_output_len=10, random_prefix_len=4)
    reqs = generate_requests(spec, vocab_size=1000)
    rng = np.random.default_rng(0)
    rng.integers(5, 6, size=3), rng.integers(10, 11, size=3)
    offsets = rng.integers(0, 1000, size=3)
    prefix = tuple(int(t) for t in rng.integers(0, 1000, size=4))
    for i, r in enumerate(reqs):
        assert r.prompt_len == 9
        assert r.prompt_token_ids == prefix + tuple(int((offsets[i] + i + k) % 1000) for k in range(5))
    assert prefix == (269, 307, 40, 75)


def test_random_prefix_needs_vocab_size():
    with pytest.raises(ValueError, match="random_prefix_len=4 needs vocab_size"):
        generate_requests(WorkloadSpec(num_prompts=2, random_prefix_len=4))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"dataset_name": "sonnet"}, "dataset_name='sonnet' is invalid; valid: random, sharegpt, trace"),
        ({"num_prompts": 0}, "num_prompts=0 is invalid"),
        ({"request_rate": 0.0}, "request_rate=0.0 is invalid"),
        ({"burstiness": -1.0}, "burstiness=-1.0 is invalid"),
        ({"seed": -1}, "seed=-1 is invalid"),
        ({"random_range_ratio": 1.0}, r"random_range_ratio=1.0 is invalid; need a number in \[0, 1\)"),
        ({"random_output_len": 0}, "random_output_len=0 is invalid"),
        ({"random_input_len": 0}, "allows an empty prompt"),
        ({"random_prefix_len": -2}, "random_prefix_len=-2 is invalid"),
        ({"sharegpt_output_len": 0, "dataset_name": "sharegpt"}, "sharegpt_output_len=0 is invalid"),
        ({"dataset_name": "trace"}, "needs dataset_path"),
        ({"dataset_path": "x.json"}, "dataset_path='x.json' is not used by dataset_name='random'"),
    ],
)
def test_spec_validation_messages(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WorkloadSpec(**kwargs)


def test_spec_is_frozen_and_defaults_match_vllm():
    spec = WorkloadSpec()
    assert (spec.num_prompts, spec.request_rate, spec.burstiness, spec.seed) == (1000, math.inf, 1.0, 0)
    assert (spec.random_input_len, spec.random_output_len, spec.random_range_ratio, spec.random_prefix_len) == (1024, 128, 0.0, 0)
    with pytest.raises(AttributeError):
        spec.seed = 1
