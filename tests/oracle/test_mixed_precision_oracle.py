"""A modelopt MIXED_PRECISION checkpoint's format per weight group: ours (``QuantSpec.method_of``)
against vLLM's own ``ModelOptMixedPrecisionConfig._resolve_quant_algo`` on the same config, for a
layer of every group the model has (vLLM's packed module names, the prefixes its Qwen3.5 model
gives them)."""

from __future__ import annotations

import pytest

from frontier.model_spec import _catalogue_lookup, load_model_spec
from frontier.quant import LM_HEAD, MIXED_ALGOS

pytestmark = pytest.mark.oracle

_PACKED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"],
           "in_proj_qkvz": ["in_proj_qkv", "in_proj_z"], "in_proj_ba": ["in_proj_b", "in_proj_a"]}
_LAYER = "language_model.model.layers"
# our weight group -> vLLM prefixes of its layers (layer 3 is full attention, layer 0 Gated DeltaNet)
_PREFIXES = {
    "attention": (f"{_LAYER}.3.self_attn.qkv_proj", f"{_LAYER}.3.self_attn.o_proj"),
    "linear_attention": (f"{_LAYER}.0.linear_attn.in_proj_qkvz", f"{_LAYER}.0.linear_attn.out_proj"),
    "dense_mlp": (f"{_LAYER}.0.mlp.gate_up_proj", f"{_LAYER}.0.mlp.down_proj"),
    "shared_experts": (f"{_LAYER}.0.mlp.shared_expert.gate_up_proj", f"{_LAYER}.0.mlp.shared_expert.down_proj"),
    "routed_experts": (f"{_LAYER}.0.mlp.experts",),
    LM_HEAD: ("language_model.lm_head",),
}


@pytest.mark.parametrize("name, parts", [
    ("nvidia/Qwen3.6-27B-NVFP4", ("attention", "linear_attention", "dense_mlp", LM_HEAD)),
    ("nvidia/Qwen3.6-35B-A3B-NVFP4", ("attention", "linear_attention", "shared_experts", "routed_experts", LM_HEAD)),
])
def test_mixed_precision_formats_equal_vllm(name, parts):
    from vllm.model_executor.layers.quantization.modelopt import ModelOptMixedPrecisionConfig

    config, _ = _catalogue_lookup(name)
    vllm_config = ModelOptMixedPrecisionConfig.from_config(config["quantization_config"])
    vllm_config.packed_modules_mapping = _PACKED
    quant = load_model_spec(name).quant
    for part in parts:
        for prefix in _PREFIXES[part]:
            algo = vllm_config._resolve_quant_algo(prefix)
            want = "none" if algo is None else MIXED_ALGOS[algo]
            assert (part, quant.method_of(part)) == (part, want), prefix
    # the checkpoint's formats really differ per group (the test would not tell a uniform reading apart otherwise)
    assert len({quant.method_of(part) for part in parts}) == 2
