"""ShareGPT sampling as vLLM's ShareGPTDataset does it, offline Qwen token counts, disk cache."""

import json
import random

import pytest

from simulator.workload import WorkloadSpec, generate_requests
from simulator.workloads import sharegpt


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("frontier-cache")


def _conv(prompt, completion):
    return {"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": completion}]}


def test_parse_entries_drops_truncated_tail():
    text = '[ {"a": 1}, {"b": [2, 3]} ,\n {"c": "unterminated'
    assert sharegpt.parse_entries(text) == [{"a": 1}, {"b": [2, 3]}]
    assert sharegpt.parse_entries("[]") == []


def test_small_file_filter_shuffle_oversample_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(tmp_path / "cache"))
    words = " ".join(["hello"] * 10)  # 10 tokens: " hello" merges
    data = [
        _conv(words, words),  # kept
        _conv("hi", words),  # prompt < 4 tokens: dropped
        {"conversations": [{"value": words}]},  # one turn: not an entry
        _conv(words + " world", words + words),  # kept
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    spec = WorkloadSpec(dataset_name="sharegpt", num_prompts=4, dataset_path=str(path), request_rate=4.0)
    reqs = generate_requests(spec)
    order = [0, 1, 2]
    random.Random(0).shuffle(order)  # vLLM: random.seed(0); random.shuffle(data)
    kept = [(10, 10), None, (11, 20)]
    expected = [kept[i] for i in order if kept[i] is not None]
    rng = random.Random(0)  # vLLM maybe_oversample_requests
    expected += [rng.choice(expected) for _ in range(2)]
    assert [(r.prompt_len, r.output_len) for r in reqs] == expected
    assert [r.request_id for r in reqs] == ["0", "1", "2", "3"]
    assert all(len(r.prompt_token_ids) == r.prompt_len for r in reqs)
    assert reqs[-1].arrival_s == pytest.approx(1.0, abs=1e-12)  # n / rate, up to rounding (as in vLLM)
    # Override of the output length skips the min-output check; second call is served by the cache.
    monkeypatch.setattr(sharegpt.TokenCache, "_load_data", lambda self: pytest.fail("cache miss"))
    again = generate_requests(WorkloadSpec(dataset_name="sharegpt", num_prompts=2, dataset_path=str(path), sharegpt_output_len=1))
    assert [r.output_len for r in again] == [1, 1]


def test_packaged_file_seed0_ten_requests(cache_dir, monkeypatch):
    monkeypatch.setenv("FRONTIER_CACHE_DIR", str(cache_dir))
    reqs = generate_requests(WorkloadSpec(dataset_name="sharegpt", num_prompts=10))
    assert [r.prompt_len for r in reqs] == [15, 211, 82, 15, 308, 106, 777, 790, 47, 25]
    assert [r.output_len for r in reqs] == [318, 195, 343, 341, 126, 458, 6, 58, 39, 330]
    assert reqs[0].prompt_token_ids[:5] == (402, 6498, 793, 25, 55003)
    assert all(r.arrival_s == 0.0 for r in reqs)
    monkeypatch.setattr(sharegpt.TokenCache, "_load_data", lambda self: pytest.fail("cache miss"))
    assert generate_requests(WorkloadSpec(dataset_name="sharegpt", num_prompts=10)) == reqs


def test_filter_bounds_match_vllm_is_valid_sequence():
    ok = sharegpt.is_valid_sequence
    assert ok(4, 4, False) and not ok(3, 4, False) and not ok(4, 3, False) and ok(4, 3, True)
    assert ok(1024, 1024, False) and not ok(1025, 4, False) and not ok(1000, 1049, False)
