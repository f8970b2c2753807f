"""vllm bench serve's random-mm dataset (``simulator.workloads.random_mm``), without vLLM: golden draws
(checked once against vLLM 0.33's ``RandomMultiModalDataset``; tests/oracle/test_random_mm_oracle.py
checks them on every oracle run), the pixel-skipping shortcut, refused settings and the CLI parsers."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.workloads.random_mm import (
    DEFAULT_BUCKET_CONFIG,
    DEFAULT_LIMIT_MM_PER_PROMPT,
    MmDraw,
    _skip_image_pixels,
    parse_bucket_config,
    parse_limit_mm_per_prompt,
    sample_random_mm,
)


def test_default_buckets_golden_draws():
    draws = sample_random_mm(6, 100, 20, 0.25, 0, seed=0, vocab_size=5000)
    big, small = (720, 1280), (256, 256)
    assert draws == [
        MmDraw(118, 15, None, (big,)),
        MmDraw(107, 15, None, (big,)),
        MmDraw(101, 16, None, (small,)),
        MmDraw(88, 23, None, (small,)),
        MmDraw(90, 22, None, (small,)),
        MmDraw(77, 25, None, (big,)),
    ]


def test_prefix_and_item_range_golden_draws():
    # 0-4 images clamped to the image limit 3; the zero-probability video bucket is dropped;
    # odd byte counts (5*7*3, 3*3*3) leave a buffered half 32-bit draw between images
    draws = sample_random_mm(5, 8, 4, 0.5, 3, seed=6, vocab_size=50, base_items_per_request=2,
                             num_mm_items_range_ratio=1.0, limit_mm_per_prompt={"image": 3, "video": 0},
                             bucket_config={(5, 7, 1): 1.0, (3, 3, 1): 1.0, (9, 9, 4): 0.0})
    a, b = (5, 7), (3, 3)
    assert draws == [
        MmDraw(8, 3, (16, 33, 33, 9, 10, 11, 12, 13, 14, 15, 16), (a,)),
        MmDraw(8, 5, (16, 33, 33, 32, 33, 34, 35, 36, 37, 38, 39), (b, a, b)),
        MmDraw(8, 3, (16, 33, 33, 23, 24, 25, 26, 27, 28, 29, 30), (a, b)),
        MmDraw(7, 4, (16, 33, 33, 36, 37, 38, 39, 40, 41, 42), (b,)),
        MmDraw(12, 6, (16, 33, 33, 41, 42, 43, 44, 45, 46, 47, 48, 49, 0, 1, 2), (b, a, b)),
    ]


def test_text_draws_equal_the_random_datasets():
    from simulator.workloads.random_dataset import sample_random_requests

    text = sample_random_requests(7, 30, 9, 0.5, 4, seed=2, arrivals_s=[0.0] * 7, vocab_size=300)
    mm = sample_random_mm(7, 30, 9, 0.5, 4, seed=2, vocab_size=300)
    assert [(d.input_len + 4, d.output_len, d.prompt_token_ids) for d in mm] == [
        (r.prompt_len, r.output_len, r.prompt_token_ids) for r in text]


def test_image_limit_and_zero_items():
    draws = sample_random_mm(40, 10, 5, 0.0, 0, seed=1, vocab_size=100, base_items_per_request=3,
                             num_mm_items_range_ratio=0.5, limit_mm_per_prompt={"image": 2, "video": 0})
    assert {len(d.images) for d in draws} == {1, 2}        # [floor(1.5), min(2, ceil(4.5))]
    none = sample_random_mm(3, 10, 5, 0.0, 0, seed=1, vocab_size=100, base_items_per_request=0)
    assert [d.images for d in none] == [(), (), ()]


def _normalized(state: dict) -> dict:
    """PCG64 state less the stale spare half when none is buffered (it never affects a later draw)."""
    return {**state, "uinteger": state["uinteger"] if state["has_uint32"] else None}


@pytest.mark.parametrize("height, width", [(0, 5), (1, 1), (1, 2), (1, 3), (2, 2), (3, 5), (7, 11), (256, 256)])
@pytest.mark.parametrize("spare_half", [False, True])
def test_skipping_pixels_leaves_the_state_drawing_them_does(height, width, spare_half):
    real, skipped = np.random.default_rng(7), np.random.default_rng(7)
    if spare_half:   # a 1-byte fill takes one 32-bit draw, leaving the other half of a 64-bit output
        real.integers(0, 256, 1, dtype=np.uint8)
        skipped.integers(0, 256, 1, dtype=np.uint8)
    assert real.bit_generator.state["has_uint32"] == int(spare_half)
    real.integers(0, 256, (height, width, 3), dtype=np.uint8)
    _skip_image_pixels(skipped, height, width)
    assert _normalized(skipped.bit_generator.state) == _normalized(real.bit_generator.state)
    assert skipped.integers(0, 256, 9, dtype=np.uint8).tolist() == real.integers(0, 256, 9, dtype=np.uint8).tolist()
    assert skipped.integers(0, 1000, 4).tolist() == real.integers(0, 1000, 4).tolist()


def test_skipping_a_720p_image():
    real, skipped = np.random.default_rng(3), np.random.default_rng(3)
    real.integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    _skip_image_pixels(skipped, 720, 1280)
    assert _normalized(skipped.bit_generator.state) == _normalized(real.bit_generator.state)


def test_defaults_are_vllms():
    assert DEFAULT_BUCKET_CONFIG == {(256, 256, 1): 0.5, (720, 1280, 1): 0.5, (720, 1280, 16): 0.0}
    assert DEFAULT_LIMIT_MM_PER_PROMPT == {"image": 255, "video": 1}


@pytest.mark.parametrize("kw, message", [
    (dict(vocab_size=None), r"vocab_size=None is invalid"),
    (dict(num_requests=-1), r"num_requests=-1 is invalid; it must be >= 0"),
    (dict(range_ratio=1.0), r"range_ratio=1.0 is invalid; it must be in \[0, 1\)"),
    (dict(num_mm_items_range_ratio=1.5), r"num_mm_items_range_ratio=1.5 is invalid; it must be in \[0, 1\]"),
    (dict(bucket_config={(8, 8, 1): -0.5, (9, 9, 1): 1.0}),
     r"bucket probabilities must be >= 0; got \{\(8, 8, 1\): -0.5\}"),
    (dict(bucket_config={}), r"bucket config \{\} has no bucket with a probability > 0"),
    (dict(bucket_config={(8, 8, 1): 0.0}), r"has no bucket with a probability > 0"),
    (dict(bucket_config={(8, 8, 1): 0.5, (8, 8, 4): 0.5}),
     r"bucket \(8, 8, 4\) has num_frames=4 > 1 and probability 0.5: video items are not simulated"),
    (dict(bucket_config={(8, 8, 0): 1.0}), r"invalid bucket \(8, 8, 0\): num_frames=0 must be >= 1"),
    (dict(bucket_config={(0, 8, 1): 1.0}), r"bucket \(0, 8, 1\): height and width must be >= 1 pixel"),
    (dict(bucket_config={(8, 8): 1.0}), r"invalid bucket key \(8, 8\): expected a tuple \(height, width, num_frames\)"),
    (dict(limit_mm_per_prompt={"image": 2}),
     r"bucket \(720, 1280, 16\) is a video item but limit_mm_per_prompt \{'image': 2\} has no 'video' key"),
    (dict(base_items_per_request=3, limit_mm_per_prompt={"image": 2, "video": 1}),
     r"min images per request 3 > max 2 \(base_items_per_request=3, num_mm_items_range_ratio=0.0, image limit 2\)"),
    (dict(limit_mm_per_prompt={"image": 2.0, "video": 1}), r"limit_mm_per_prompt\['image'\]=2.0 must be an int"),
])
def test_bad_settings_are_one_line(kw, message):
    args = dict(num_requests=2, input_len=10, output_len=5, range_ratio=0.0, prefix_len=0, seed=0, vocab_size=100)
    args.update(kw)
    with pytest.raises(ValueError, match=message) as err:
        sample_random_mm(**args)
    assert "\n" not in str(err.value)


def test_parse_bucket_config():
    assert parse_bucket_config("{(256, 256, 1): 0.5, (720, 1280, 1): 0.4, (720, 1280, 16): 0.10}") == {
        (256, 256, 1): 0.5, (720, 1280, 1): 0.4, (720, 1280, 16): 0.1}
    parsed = parse_bucket_config("{'(64, 64, 1)': '0.25', (8, 8, 1): 1}")
    assert parsed == {(64, 64, 1): 0.25, (8, 8, 1): 1.0}
    assert [type(v) for v in parsed.values()] == [float, float]


@pytest.mark.parametrize("text, message", [
    ("[(1, 2, 1)]", r"bucket config '\[\(1, 2, 1\)\]' must be a dict"),
    ("{(1, 2, 1): 0.5", r"is not a Python dict literal"),
    ("nope", r"bucket config 'nope' is not a Python dict literal"),
    ("{(1, 2): 0.5}", r"invalid bucket key \(1, 2\): expected a tuple \(height, width, num_frames\) of ints"),
    ("{(1.0, 2, 1): 0.5}", r"invalid bucket key \(1.0, 2, 1\)"),
    ("{'x': 1}", r"invalid bucket key 'x'"),
    ("{(1, 2, 1): 'half'}", r"bucket \(1, 2, 1\): probability 'half' is not a number"),
])
def test_bad_bucket_config_text_is_one_line(text, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_bucket_config(text)
    assert "\n" not in str(err.value)


def test_parse_limit_mm_per_prompt():
    assert parse_limit_mm_per_prompt('{"image": 3, "video": 0}') == {"image": 3, "video": 0}


@pytest.mark.parametrize("text, message", [
    ('{"image": 3', r"limit_mm_per_prompt '\{\"image\": 3' is not JSON \(Expecting ',' delimiter\)"),
    ('[3]', r"must be a JSON object of modality -> int"),
    ('{"image": 2.5}', r"must be a JSON object of modality -> int"),
    ('{"image": true}', r"must be a JSON object of modality -> int"),
])
def test_bad_limit_text_is_one_line(text, message):
    with pytest.raises(ValueError, match=message) as err:
        parse_limit_mm_per_prompt(text)
    assert "\n" not in str(err.value)
