"""The prefix_repetition dataset: ours (``simulator.workloads.prefix_repetition``) against vLLM 0.33's
own ``PrefixRepetitionRandomDataset.sample`` with a tokenizer whose decode / re-encode round trip
is exact (the one approximation ours makes): the same prompts, token for token, in the same order."""

from __future__ import annotations

import pytest

from simulator.workload import WorkloadSpec, generate_requests

pytestmark = pytest.mark.oracle


class _ExactTokenizer:
    """decode / encode that return the tokens unchanged: vLLM's round trip is then exact."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def decode(self, tokens):
        return tuple(tokens)

    def encode(self, prompt, add_special_tokens: bool = False):
        return list(prompt)


@pytest.mark.parametrize("num, prefix, suffix, prefixes, shuffle, seed", [
    (100, 64, 32, 10, True, 0), (103, 48, 17, 7, True, 5), (40, 0, 20, 4, False, 1), (12, 30, 0, 3, True, 9)])
def test_prompts_equal_vllms(num, prefix, suffix, prefixes, shuffle, seed):
    from vllm.benchmarks.datasets.datasets import PrefixRepetitionRandomDataset

    vocab = 5000
    theirs = PrefixRepetitionRandomDataset(random_seed=seed, dataset_path=None, disable_shuffle=not shuffle).sample(
        tokenizer=_ExactTokenizer(vocab), num_requests=num, prefix_len=prefix, suffix_len=suffix,
        num_prefixes=prefixes, output_len=7)
    ours = generate_requests(WorkloadSpec(dataset_name="prefix_repetition", num_prompts=num, seed=seed,
                                          prefix_repetition_prefix_len=prefix, prefix_repetition_suffix_len=suffix,
                                          prefix_repetition_num_prefixes=prefixes, prefix_repetition_output_len=7,
                                          disable_shuffle=not shuffle), vocab_size=vocab)
    assert len(ours) == len(theirs) == num // prefixes * prefixes
    assert [r.prompt_token_ids for r in ours] == [t.prompt for t in theirs]
    assert [(r.prompt_len, r.output_len) for r in ours] == [(t.prompt_len, t.expected_output_len) for t in theirs]
