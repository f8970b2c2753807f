"""The ``random-mm`` dataset of ``vllm bench serve`` (vLLM 0.33 ``RandomMultiModalDataset.sample``), images only.

For the same seed and settings we draw what vLLM draws: each request's text length, output
length, number of images and image sizes.  RNG use, in vLLM's order, from one private
``np.random.default_rng(seed)``:

    input_lens  = rng.integers(in_lo,  in_hi + 1,  size=n)   # as the random dataset (random_dataset.py)
    output_lens = rng.integers(out_lo, out_hi + 1, size=n)
    offsets     = rng.integers(0, vocab_size, size=n)
    prefix      = rng.integers(0, vocab_size, size=prefix_len)   # only when prefix_len > 0
    for each request i, in order:
        k_i = rng.integers(items_lo, items_hi + 1)                # number of images
        k_i times:
            (height, width, 1) = rng.choice(bucket_keys, p=bucket_probs)
            rng.integers(0, 256, (height, width, 3), dtype=np.uint8)   # the pixels; we only advance past them

    items_lo = max(0, floor(base * (1 - r_items)))
    items_hi = min(image_limit, ceil(base * (1 + r_items)))          # base = base_items_per_request

Buckets map ``(height, width, num_frames)`` to a probability; zero-probability buckets are dropped
and the rest renormalised to sum to 1, as vLLM does.  ``num_frames == 1`` is an image,
``num_frames > 1`` a video; a video bucket left with a probability > 0 is refused (video items are
not simulated), so only the image limit of ``limit_mm_per_prompt`` matters and vLLM's
per-request renormalisation once a modality reaches its limit never runs (``k_i`` is at most the
image limit).  vLLM still requires every bucket's modality, even a zero-probability video's, to be
a key of ``limit_mm_per_prompt``; so do we.

Approximations (the random dataset's, kept deliberately):
  * ``num_special_tokens_to_add`` is taken as 0.
  * the allowed token set is the whole vocabulary ``arange(vocab_size)``; vLLM removes the
    tokenizer's special added tokens.
  * the decode / re-encode round trip of each prompt is assumed exact, so it draws nothing from
    the generator (vLLM's can draw replacement tokens, which would shift every later draw).
``vocab_size`` is required: vLLM always draws the offsets, and the image draws come after them.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass

import numpy as np

from simulator.workloads.random_dataset import length_bounds

DEFAULT_BUCKET_CONFIG: dict[tuple[int, int, int], float] = {
    (256, 256, 1): 0.5,
    (720, 1280, 1): 0.5,
    (720, 1280, 16): 0.0,
}
"""vLLM's ``DEFAULT_MM_ITEM_BUCKET_CONFIG``: (height, width, num_frames) -> probability."""

DEFAULT_LIMIT_MM_PER_PROMPT: dict[str, int] = {"image": 255, "video": 1}
"""vLLM's ``DEFAULT_LIMIT_MM_PER_PROMPT``: modality -> most items a request may carry."""


@dataclass(frozen=True)
class MmDraw:
    """One request of the random-mm dataset."""

    input_len: int
    """Text tokens drawn for this request (shared prefix excluded): vLLM's ``input_lens[i]``."""
    output_len: int
    """Output tokens: vLLM's ``output_lens[i]``."""
    prompt_token_ids: tuple[int, ...] | None
    """Prefix + text token ids when ``prefix_len > 0`` (built as random_dataset.py builds them), else None."""
    images: tuple[tuple[int, int], ...]
    """``(height, width)`` in pixels of each image, in the order vLLM attaches them."""


def sample_random_mm(
    num_requests: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    prefix_len: int,
    seed: int,
    vocab_size: int | None,
    base_items_per_request: int = 1,
    num_mm_items_range_ratio: float = 0.0,
    limit_mm_per_prompt: dict[str, int] | None = None,
    bucket_config: dict[tuple[int, int, int], float] | None = None,
) -> list[MmDraw]:
    """``num_requests`` draws of vLLM's random-mm dataset; None limits / buckets mean vLLM's defaults."""
    if vocab_size is None or vocab_size < 1:
        raise ValueError(
            f"vocab_size={vocab_size} is invalid: random-mm needs the model's vocabulary size (an int >= 1) "
            "to draw vLLM's token offsets before the images"
        )
    for name, value in (("num_requests", num_requests), ("input_len", input_len),
                        ("output_len", output_len), ("prefix_len", prefix_len)):
        if value < 0:
            raise ValueError(f"{name}={value} is invalid; it must be >= 0")
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"range_ratio={range_ratio} is invalid; it must be in [0, 1)")
    limits = DEFAULT_LIMIT_MM_PER_PROMPT if limit_mm_per_prompt is None else limit_mm_per_prompt
    buckets = DEFAULT_BUCKET_CONFIG if bucket_config is None else bucket_config
    items_lo, items_hi, probs = image_item_params(base_items_per_request, num_mm_items_range_ratio, limits, buckets)
    keys = np.array(list(probs))
    p = np.array(list(probs.values()))

    rng = np.random.default_rng(seed)
    in_lo, in_hi = length_bounds(input_len, range_ratio, at_least_one=False)
    out_lo, out_hi = length_bounds(output_len, range_ratio, at_least_one=True)
    input_lens = rng.integers(in_lo, in_hi + 1, size=num_requests)
    output_lens = rng.integers(out_lo, out_hi + 1, size=num_requests)
    offsets = rng.integers(0, vocab_size, size=num_requests)
    prefix: tuple[int, ...] = ()
    if prefix_len > 0:
        prefix = tuple(rng.integers(0, vocab_size, size=prefix_len).tolist())
    draws = []
    for i in range(num_requests):
        n_in = int(input_lens[i])
        ids = None
        if prefix_len > 0:
            ids = prefix + tuple(((int(offsets[i]) + i + np.arange(n_in)) % vocab_size).tolist())
        images = []
        for _ in range(int(rng.integers(items_lo, items_hi + 1))):
            height, width, _frames = (int(x) for x in rng.choice(keys, p=p))
            _skip_image_pixels(rng, height, width)
            images.append((height, width))
        draws.append(MmDraw(n_in, int(output_lens[i]), ids, tuple(images)))
    return draws


def parse_bucket_config(text: str) -> dict[tuple[int, int, int], float]:
    """``--random-mm-bucket-config`` as vLLM parses it: a Python dict literal, e.g.
    ``"{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}"``; a key may also be a string holding the tuple."""
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ValueError(
            f"bucket config {text!r} is not a Python dict literal like '{{(256, 256, 1): 0.5}}'"
        ) from None
    if not isinstance(parsed, dict):
        raise ValueError(f"bucket config {text!r} must be a dict like '{{(256, 256, 1): 0.5}}'")
    out: dict[tuple[int, int, int], float] = {}
    for raw_key, raw_prob in parsed.items():
        key = raw_key
        if isinstance(key, str):
            try:
                key = ast.literal_eval(key)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
        _check_key(key, shown=raw_key)
        try:
            prob = float(raw_prob)
        except (TypeError, ValueError):
            raise ValueError(f"bucket {raw_key!r}: probability {raw_prob!r} is not a number") from None
        out[(int(key[0]), int(key[1]), int(key[2]))] = prob
    return out


def parse_limit_mm_per_prompt(text: str) -> dict[str, int]:
    """``--random-mm-limit-mm-per-prompt`` as vLLM parses it (``json.loads``), e.g. ``'{"image": 3, "video": 0}'``;
    we also require a JSON object of int values, which is all vLLM's sampler can use."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"limit_mm_per_prompt {text!r} is not JSON ({exc.msg})") from None
    ints = isinstance(parsed, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in parsed.values())
    if not ints:
        raise ValueError(
            f"limit_mm_per_prompt {text!r} must be a JSON object of modality -> int, "
            "like '{\"image\": 3, \"video\": 0}'"
        )
    return parsed


def _check_key(key: object, shown: object) -> None:
    """A bucket key is a tuple ``(height, width, num_frames)`` of three ints (vLLM's parser check)."""
    if not (isinstance(key, tuple) and len(key) == 3 and all(isinstance(x, int) for x in key)):
        raise ValueError(f"invalid bucket key {shown!r}: expected a tuple (height, width, num_frames) of ints")


def _modality(key: tuple[int, int, int]) -> str:
    """vLLM ``map_config_to_modality``: num_frames 1 is an image, > 1 a video."""
    if key[2] == 1:
        return "image"
    if key[2] > 1:
        return "video"
    raise ValueError(f"invalid bucket {key}: num_frames={key[2]} must be >= 1 (1 = image, > 1 = video)")


def _normalize(buckets: dict[tuple[int, int, int], float]) -> dict[tuple[int, int, int], float]:
    """vLLM ``normalize_bucket_config``: drop zero probabilities, scale the rest to sum to 1 (order kept)."""
    negative = {k: v for k, v in buckets.items() if v < 0}
    if negative:
        raise ValueError(f"bucket probabilities must be >= 0; got {negative}")
    kept = {k: v for k, v in buckets.items() if v > 0}
    if not kept:
        raise ValueError(f"bucket config {buckets} has no bucket with a probability > 0")
    total = sum(kept.values())
    return {k: v / total for k, v in kept.items()}


def image_item_params(
    base_items_per_request: int,
    num_mm_items_range_ratio: float,
    limit_mm_per_prompt: dict[str, int],
    bucket_config: dict[tuple[int, int, int], float],
) -> tuple[int, int, dict[tuple[int, int, int], float]]:
    """vLLM ``get_mm_item_sampling_params`` with its checks, in its order, plus our image-only refusal:
    the inclusive ``[low, high]`` of the images a request, and the normalised image buckets."""
    if not 0.0 <= num_mm_items_range_ratio <= 1.0:
        raise ValueError(f"num_mm_items_range_ratio={num_mm_items_range_ratio} is invalid; it must be in [0, 1]")
    for key in bucket_config:
        _check_key(key, shown=key)
        modality = _modality(key)
        if modality not in limit_mm_per_prompt:
            raise ValueError(
                f"bucket {key} is a {modality} item but limit_mm_per_prompt {limit_mm_per_prompt} has no "
                f"{modality!r} key (vLLM requires one even for a zero-probability bucket)"
            )
    probs = _normalize(bucket_config)
    for key, prob in probs.items():
        if _modality(key) == "video":
            raise ValueError(
                f"bucket {key} has num_frames={key[2]} > 1 and probability {prob:g}: "
                "video items are not simulated; give video buckets probability 0"
            )
        if key[0] < 1 or key[1] < 1:
            raise ValueError(f"bucket {key}: height and width must be >= 1 pixel")
    image_limit = limit_mm_per_prompt["image"]
    if not isinstance(image_limit, int) or isinstance(image_limit, bool):
        raise ValueError(f"limit_mm_per_prompt['image']={image_limit!r} must be an int")
    high = min(image_limit, math.ceil(base_items_per_request * (1 + num_mm_items_range_ratio)))
    low = max(0, math.floor(base_items_per_request * (1 - num_mm_items_range_ratio)))
    if low > high:
        raise ValueError(
            f"min images per request {low} > max {high} (base_items_per_request={base_items_per_request}, "
            f"num_mm_items_range_ratio={num_mm_items_range_ratio}, image limit {image_limit})"
        )
    return low, high, probs


def _skip_image_pixels(rng: np.random.Generator, height: int, width: int) -> None:
    """Advance ``rng`` exactly as ``rng.integers(0, 256, (height, width, 3), dtype=np.uint8)`` does, in O(1).

    numpy fills a full-range uint8 array from 32-bit draws, 4 bytes a draw (the last draw's unused
    bytes are dropped), so the fill takes ``ceil(3 * height * width / 4)`` 32-bit draws.  PCG64
    serves a 32-bit draw from the low half of a 64-bit output and keeps the high half
    (``has_uint32`` / ``uinteger``) for the next 32-bit draw.  So: use the kept half if there is
    one, skip whole 64-bit outputs with ``advance`` (which also clears the kept half), and an odd
    last draw leaves its output's high half kept.  tests/simulator/test_random_mm.py checks the
    state equals the real draw's for odd and even sizes, with and without a kept half.
    """
    draws_32 = -(-3 * height * width // 4)
    if draws_32 == 0:
        return
    bits = rng.bit_generator
    if bits.state["has_uint32"]:
        draws_32 -= 1
    whole, odd = divmod(draws_32, 2)
    bits.advance(whole)
    if odd:
        high = int(bits.random_raw()) >> 32
        state = bits.state
        state["has_uint32"], state["uinteger"] = 1, high
        bits.state = state
