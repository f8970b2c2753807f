"""The random-mm dataset: ours (``simulator.workloads.random_mm``) against vLLM 0.33's own
``RandomMultiModalDataset.sample`` with a tokenizer whose decode / re-encode round trip is exact and
that has no special tokens (ours' approximations): the same text and output lengths, prompt ids,
and image sizes, request by request; the same defaults, CLI parsing and refused settings."""

from __future__ import annotations

import base64
import io

import pytest

from simulator.workloads.random_mm import (
    DEFAULT_BUCKET_CONFIG,
    DEFAULT_LIMIT_MM_PER_PROMPT,
    parse_bucket_config,
    parse_limit_mm_per_prompt,
    sample_random_mm,
)

pytestmark = pytest.mark.oracle

VOCAB = 5000


class _ExactTokenizer:
    """No special tokens; decode / encode return the tokens unchanged, so vLLM draws nothing extra."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self.added_tokens_decoder: dict = {}
        self.all_special_ids: list[int] = []

    def num_special_tokens_to_add(self) -> int:
        return 0

    def decode(self, tokens):
        return tuple(tokens)

    def encode(self, prompt, add_special_tokens: bool = False):
        return list(prompt)


def _image_size(self, config):
    """vLLM's ``generate_mm_item`` for an image less the JPEG encoding: same pixel draws, returns (height, width)."""
    assert self.map_config_to_modality(config) == "image"
    image = self.generate_synthetic_image(config[1], config[0])
    return (image.height, image.width)


def _vllm_random_mm(seed: int, **kw):
    from vllm.benchmarks.datasets.datasets import RandomMultiModalDataset

    return RandomMultiModalDataset(random_seed=seed).sample(tokenizer=_ExactTokenizer(VOCAB), **kw)


_CASES = {
    "default buckets": dict(seed=0, num_requests=60, input_len=100, output_len=20, range_ratio=0.25, prefix_len=0,
                            mm={}),
    "3 buckets, zero-prob video, 0-4 images": dict(
        seed=3, num_requests=80, input_len=50, output_len=10, range_ratio=0.5, prefix_len=0,
        mm=dict(bucket_config={(64, 96, 1): 0.2, (33, 17, 1): 0.8, (720, 1280, 8): 0.0}, base_items_per_request=2,
                num_mm_items_range_ratio=1.0, limit_mm_per_prompt={"image": 5, "video": 1})),
    "image limit 2 clamps 1-5 images to 1-2": dict(
        seed=11, num_requests=50, input_len=64, output_len=8, range_ratio=0.0, prefix_len=0,
        mm=dict(base_items_per_request=3, num_mm_items_range_ratio=0.5, limit_mm_per_prompt={"image": 2, "video": 0})),
    "shared prefix": dict(
        seed=5, num_requests=40, input_len=30, output_len=12, range_ratio=0.5, prefix_len=16,
        mm=dict(bucket_config={(5, 7, 1): 1.0, (224, 224, 1): 3.0}, base_items_per_request=1,
                num_mm_items_range_ratio=1.0)),
}


@pytest.mark.parametrize("case", list(_CASES), ids=list(_CASES))
def test_draws_equal_vllms(case, monkeypatch):
    from vllm.benchmarks.datasets.datasets import RandomMultiModalDataset

    monkeypatch.setattr(RandomMultiModalDataset, "generate_mm_item", _image_size)
    c = _CASES[case]
    common = dict(num_requests=c["num_requests"], input_len=c["input_len"], output_len=c["output_len"],
                  range_ratio=c["range_ratio"], prefix_len=c["prefix_len"])
    theirs = _vllm_random_mm(c["seed"], **common, **c["mm"])
    ours = sample_random_mm(seed=c["seed"], vocab_size=VOCAB, **common, **c["mm"])
    assert len(ours) == len(theirs) == c["num_requests"]
    assert [(c["prefix_len"] + d.input_len, d.output_len) for d in ours] == [
        (t.prompt_len, t.expected_output_len) for t in theirs]
    assert [d.images for d in ours] == [tuple(t.multi_modal_data) for t in theirs]
    if c["prefix_len"] > 0:
        assert [d.prompt_token_ids for d in ours] == [t.prompt for t in theirs]
        assert len({d.prompt_token_ids[:c["prefix_len"]] for d in ours}) == 1
    else:
        assert {d.prompt_token_ids for d in ours} == {None}
    counts = {len(d.images) for d in ours}
    assert len(counts) > 1 or case == "default buckets"   # the count draw matters in the other cases


def test_unpatched_vllm_jpegs_have_our_sizes():
    """vLLM's real path (pixels -> PIL -> JPEG data URL), decoded: the sizes are ours, width and height not swapped."""
    from PIL import Image

    kw = dict(num_requests=6, input_len=20, output_len=4, range_ratio=0.0, prefix_len=0, base_items_per_request=2,
              bucket_config={(48, 80, 1): 0.5, (31, 9, 1): 0.5})
    theirs = _vllm_random_mm(7, **kw)
    sizes = []
    for request in theirs:
        one = []
        for item in request.multi_modal_data:
            data = base64.b64decode(item["image_url"]["url"].split(",", 1)[1])
            width, height = Image.open(io.BytesIO(data)).size
            one.append((height, width))
        sizes.append(tuple(one))
    assert sizes == [d.images for d in sample_random_mm(seed=7, vocab_size=VOCAB, **kw)]
    assert {s for one in sizes for s in one} == {(48, 80), (31, 9)}


def _bench_parser():
    from vllm.benchmarks.datasets.datasets import add_dataset_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_dataset_parser(parser)
    return parser


def test_defaults_are_vllm_bench_defaults():
    from vllm.benchmarks.datasets.datasets import RandomMultiModalDataset

    args = _bench_parser().parse_args([])
    assert args.random_mm_bucket_config == DEFAULT_BUCKET_CONFIG
    assert list(args.random_mm_bucket_config) == list(DEFAULT_BUCKET_CONFIG)
    assert args.random_mm_limit_mm_per_prompt == DEFAULT_LIMIT_MM_PER_PROMPT
    assert RandomMultiModalDataset.DEFAULT_MM_ITEM_BUCKET_CONFIG == DEFAULT_BUCKET_CONFIG
    assert RandomMultiModalDataset.DEFAULT_LIMIT_MM_PER_PROMPT == DEFAULT_LIMIT_MM_PER_PROMPT
    assert (args.random_mm_base_items_per_request, args.random_mm_num_mm_items_range_ratio) == (1, 0.0)


_BUCKET_TEXTS_OK = ["{(256, 256, 1): 0.5, (720, 1280, 1): 0.4, (720, 1280, 16): 0.10}",
                    "{'(64, 64, 1)': '0.25', (8, 8, 1): 1}", "{}", "{(1, 2, 3): 0}"]
_BUCKET_TEXTS_BAD = ["[(1, 2, 1)]", "{(1, 2): 0.5}", "{(1.0, 2, 1): 0.5}", "{'x': 1}", "{(1, 2, 1): 'half'}",
                     "{(1, 2, 1): 0.5", "nope"]


def test_bucket_config_parsing_matches_vllms():
    parser = _bench_parser()
    vllm_parse = next(a.type for a in parser._actions if a.dest == "random_mm_bucket_config")
    for text in _BUCKET_TEXTS_OK:
        assert parse_bucket_config(text) == vllm_parse(text), text
    for text in _BUCKET_TEXTS_BAD:
        with pytest.raises((ValueError, SyntaxError)):
            vllm_parse(text)
        with pytest.raises(ValueError):
            parse_bucket_config(text)


def test_limit_parsing_matches_vllms():
    args = _bench_parser().parse_args(["--random-mm-limit-mm-per-prompt", '{"image": 3, "video": 0}'])
    assert parse_limit_mm_per_prompt('{"image": 3, "video": 0}') == args.random_mm_limit_mm_per_prompt


_REFUSED = {
    "negative probability": dict(bucket_config={(8, 8, 1): -0.1, (9, 9, 1): 1.0}),
    "all zero": dict(bucket_config={(8, 8, 1): 0.0}),
    "empty": dict(bucket_config={}),
    "items ratio above 1": dict(num_mm_items_range_ratio=1.5),
    "items ratio below 0": dict(num_mm_items_range_ratio=-0.1),
    "min above max": dict(base_items_per_request=3, limit_mm_per_prompt={"image": 2, "video": 1}),
    "zero-prob video without a video limit": dict(limit_mm_per_prompt={"image": 2}),
    "no image limit": dict(bucket_config={(8, 8, 1): 1.0}, limit_mm_per_prompt={"video": 1}),
    "num_frames 0": dict(bucket_config={(8, 8, 0): 1.0}),
    "range ratio 1": dict(range_ratio=1.0),
}


@pytest.mark.parametrize("case", list(_REFUSED), ids=list(_REFUSED))
def test_settings_vllm_refuses_we_refuse(case):
    kw = dict(num_requests=3, input_len=10, output_len=5, range_ratio=0.0, prefix_len=0)
    kw.update(_REFUSED[case])
    with pytest.raises(ValueError):
        _vllm_random_mm(0, **kw)
    with pytest.raises(ValueError) as ours:
        sample_random_mm(seed=0, vocab_size=VOCAB, **kw)
    assert "\n" not in str(ours.value)
