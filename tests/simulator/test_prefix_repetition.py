"""vllm bench serve's prefix_repetition dataset (``simulator.workloads.prefix_repetition``); its prompts
equal vLLM's own sampler's in tests/oracle/test_prefix_repetition_oracle.py."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from simulator.workload import WorkloadSpec, generate_requests


def _spec(**kw) -> WorkloadSpec:
    return WorkloadSpec(**{"dataset_name": "prefix_repetition", "num_prompts": 23, "prefix_repetition_prefix_len": 40,
                           "prefix_repetition_suffix_len": 10, "prefix_repetition_num_prefixes": 4,
                           "prefix_repetition_output_len": 9, **kw})


def test_num_prefixes_groups_share_their_prefix():
    reqs = generate_requests(_spec(), vocab_size=1000)
    assert len(reqs) == 20            # 23 // 4 = 5 a prefix, no oversampling (vLLM)
    assert {(r.prompt_len, r.output_len) for r in reqs} == {(50, 9)}
    groups: dict[tuple, int] = {}
    for r in reqs:
        groups[r.prompt_token_ids[:40]] = groups.get(r.prompt_token_ids[:40], 0) + 1
    assert sorted(groups.values()) == [5, 5, 5, 5]
    assert len({r.prompt_token_ids for r in reqs}) == 20
    ordered = generate_requests(_spec(disable_shuffle=True), vocab_size=1000)
    assert [r.prompt_token_ids[:40] for r in ordered[:5]] == [ordered[0].prompt_token_ids[:40]] * 5
    assert sorted(r.prompt_token_ids for r in ordered) == sorted(r.prompt_token_ids for r in reqs)
    assert [r.arrival_s for r in reqs] == sorted(r.arrival_s for r in reqs)


@pytest.mark.parametrize("kw, message", [
    (dict(num_prompts=3), r"num_prompts \(3\) must be >= prefix_repetition_num_prefixes \(4\)"),
    (dict(prefix_repetition_prefix_len=0, prefix_repetition_suffix_len=0), "an empty prompt"),
    (dict(prefix_repetition_num_prefixes=0), "prefix_repetition_num_prefixes=0 is invalid"),
    (dict(dataset_name="random", disable_shuffle=True), "disable_shuffle is simulated for dataset_name="),
    (dict(dataset_path="x.json"), "is not used by dataset_name='prefix_repetition'"),
])
def test_bad_prefix_repetition_settings_are_one_line(kw, message):
    with pytest.raises(ValueError, match=message):
        _spec(**kw)


def test_prefix_caching_hits_every_repeated_prefix():
    # 1,000 prompts of a 2,000-token prefix (one of 5) + 200 own tokens: every prompt but each
    # prefix's first hits its 125 prefix blocks
    res = CliRunner().invoke(app, ["simulate", "--dataset-name", "prefix_repetition", "--num-prompts", "1000",
                                   "--request-rate", "20", "--prefix-repetition-prefix-len", "2000",
                                   "--prefix-repetition-suffix-len", "200", "--prefix-repetition-num-prefixes", "5"])
    assert res.exit_code == 0, res.output
    assert "prefix cache: hit rate 90.5 % (1,990,000 of 2,200,000 prompt tokens looked up" in res.output
    assert (1000 * 2000 - 5 * 2000) / (1000 * 2200) == pytest.approx(0.9045, abs=1e-4)
