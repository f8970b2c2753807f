"""The ``prefix_repetition`` dataset of ``vllm bench serve`` (vLLM 0.33 ``PrefixRepetitionRandomDataset``).

``num_prefixes`` random prefixes of ``prefix_len`` tokens, each followed by ``num_requests //
num_prefixes`` random suffixes of ``suffix_len`` tokens (so fewer than ``num_requests`` requests
when it does not divide them, as vLLM samples them: no oversampling), every request
``output_len`` output tokens; then shuffled unless ``--disable-shuffle``. vLLM's RNG use,
reproduced: ``np.random.seed(seed)`` and one ``np.random.randint(0, vocab, size=L)`` per prefix
and per suffix, in the order prefix 0, its suffixes, prefix 1, ...; ``random.seed(seed)`` and
``random.shuffle`` of the request list.

Approximations (deliberate): the ids are drawn below the model's ``vocab_size`` (vLLM's tokenizer
``vocab_size`` excludes added tokens), and vLLM's decode / re-encode round trip
(``gen_prompt_decode_to_target_len``) is taken as exact. The lengths, and which requests share a
prefix, are vLLM's; prefix caching sees the shared ``prefix_len`` tokens.
"""

from __future__ import annotations

import random

import numpy as np

from simulator.request import RequestSpec


def sample_prefix_repetition_requests(num_requests: int, prefix_len: int, suffix_len: int, num_prefixes: int,
                                      output_len: int, seed: int, arrivals_s: list[float], vocab_size: int,
                                      shuffle: bool = True) -> list[RequestSpec]:
    """The dataset's requests in arrival order; ``arrivals_s[i]`` is the i-th request's arrival
    (at least as many as requests)."""
    per_prefix = num_requests // num_prefixes
    if per_prefix == 0:
        raise ValueError(f"num_prompts ({num_requests}) must be >= prefix_repetition_num_prefixes ({num_prefixes}), "
                         "as vLLM requires")
    state = np.random.RandomState(seed)         # np.random.seed(seed): the legacy global generator
    prompts: list[tuple[int, ...]] = []
    for _ in range(num_prefixes):
        prefix = tuple(state.randint(0, vocab_size, size=prefix_len).tolist())
        for _ in range(per_prefix):
            prompts.append(prefix + tuple(state.randint(0, vocab_size, size=suffix_len).tolist()))
    if shuffle:
        random.Random(seed).shuffle(prompts)    # random.seed(seed); random.shuffle(requests)
    return [RequestSpec(str(i), arrivals_s[i], len(ids), output_len, prompt_token_ids=ids)
            for i, ids in enumerate(prompts)]
