"""The ``random`` dataset of ``vllm bench serve`` (vLLM 0.33 ``RandomDataset.sample``).

RNG use, in vLLM's order, from a private ``np.random.default_rng(seed)``:

    input_lens  = rng.integers(in_lo,  in_hi + 1,  size=n)   # in_lo = floor(L_in * (1-r)), in_hi = ceil(L_in * (1+r))
    output_lens = rng.integers(out_lo, out_hi + 1, size=n)   # same for L_out, both bounds at least 1
    offsets     = rng.integers(0, vocab_size, size=n)
    prefix      = allowed[rng.integers(0, len(allowed), size=prefix_len)]   # only when prefix_len > 0

    prompt_i    = prefix + [(offsets[i] + i + k) % vocab_size for k in range(input_lens[i])]
    prompt_len  = prefix_len + input_lens[i]

Approximations (documented, deliberate):
  * ``num_special_tokens_to_add`` is taken as 0 (true for Qwen/DeepSeek-style tokenizers;
    Llama tokenizers add a BOS, which makes vLLM sample from ``L_in - 1``).
  * ``allowed`` is the whole vocabulary ``arange(vocab_size)``; vLLM removes the tokenizer's
    special ids, which we do not know without the model's tokenizer.
  * vLLM decodes and re-encodes each prompt (which can shift a length by a few tokens
    and draw replacement tokens from the same generator); we assume the round trip is exact.
When ``prefix_len == 0`` the lengths equal vLLM's exactly and prompts share no prefix, so
``prompt_token_ids`` is None (content unique to the request; saves memory).  With a shared
prefix the ids are given so that prefix caching sees the common blocks.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.request import RequestSpec


def length_bounds(mean_len: int, range_ratio: float, at_least_one: bool) -> tuple[int, int]:
    """Inclusive ``[low, high]`` of the uniform integer length range (vLLM ``get_sampling_params``)."""
    low = math.floor(mean_len * (1 - range_ratio))
    high = math.ceil(mean_len * (1 + range_ratio))
    if at_least_one:
        low, high = max(low, 1), max(high, 1)
    return low, high


def sample_random_requests(
    num_requests: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    prefix_len: int,
    seed: int,
    arrivals_s: list[float],
    vocab_size: int | None,
) -> list[RequestSpec]:
    """``num_requests`` synthetic requests with vLLM's lengths; ``arrivals_s[i]`` is request i's arrival."""
    if prefix_len > 0 and vocab_size is None:
        raise ValueError(
            f"random_prefix_len={prefix_len} needs vocab_size (the shared prefix is drawn from the vocabulary)"
        )
    rng = np.random.default_rng(seed)
    in_lo, in_hi = length_bounds(input_len, range_ratio, at_least_one=False)
    out_lo, out_hi = length_bounds(output_len, range_ratio, at_least_one=True)
    input_lens = rng.integers(in_lo, in_hi + 1, size=num_requests)
    output_lens = rng.integers(out_lo, out_hi + 1, size=num_requests)
    if vocab_size is None:
        return [
            RequestSpec(str(i), arrivals_s[i], int(input_lens[i]), int(output_lens[i]))
            for i in range(num_requests)
        ]
    offsets = rng.integers(0, vocab_size, size=num_requests)
    prefix: tuple[int, ...] = ()
    if prefix_len > 0:
        prefix = tuple(int(t) for t in rng.integers(0, vocab_size, size=prefix_len))
    requests = []
    for i in range(num_requests):
        n_in = int(input_lens[i])
        ids = None
        if prefix_len > 0:
            inner = (int(offsets[i]) + i + np.arange(n_in)) % vocab_size
            ids = prefix + tuple(inner.tolist())
        requests.append(
            RequestSpec(str(i), arrivals_s[i], prefix_len + n_in, int(output_lens[i]), prompt_token_ids=ids)
        )
    return requests
