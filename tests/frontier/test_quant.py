"""QuantSpec parsing: bytes per param incl. scales, KV dtype, which parts are quantized."""

import pytest

from frontier.quant import PARTS, QuantSpec, kv_bytes_for_dtype, parse_quantization


def test_no_config_is_bf16():
    q = parse_quantization(None)
    assert (q.method, q.weight_bytes_per_param, q.kv_bytes_per_elem) == ("none", 2.0, 2.0)


def test_fp8_per_tensor_and_block():
    assert parse_quantization({"quant_method": "fp8"}).weight_bytes_per_param == 1.0
    q = parse_quantization({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert q.method == "fp8_block" and q.weight_bytes_per_param == 1.000244140625  # 1 + 4 B fp32 / 16384


def test_fp8_ignore_list_of_layernorms_and_router_keeps_all_parts():
    # Qwen3-*-FP8 lists post_attention_layernorm and mlp.gate (router): neither excludes a part
    q = parse_quantization({"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": [
        "lm_head", "model.layers.0.post_attention_layernorm", "model.layers.0.mlp.gate"]})
    assert q.quantized_parts == PARTS


def test_mxfp4_experts_only():
    q = parse_quantization({"quant_method": "mxfp4"})
    assert (q.method, q.weight_bytes_per_param, q.quantized_parts) == ("mxfp4", 0.53125, ("routed_experts",))
    assert q.bytes_per_param("attention") == 2.0 and q.bytes_per_param("routed_experts") == 0.53125


def test_compressed_tensors_int4_kimi_style():
    cfg = {"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights": {
        "num_bits": 4, "type": "int", "group_size": 32, "symmetric": True, "strategy": "group"}}},
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"],
        "kv_cache_scheme": None}
    q = parse_quantization(cfg)
    assert (q.method, q.weight_bytes_per_param) == ("int4_wo", 0.5625)  # 0.5 + 2 B bf16 scale / 32
    assert q.quantized_parts == ("routed_experts", "linear_attention") and q.kv_bytes_per_elem == 2.0
    # modelopt's exclusions of Gated DeltaNet layers (nvidia/Qwen3.5-122B-A10B-NVFP4) keep them bf16
    q = parse_quantization({**cfg, "ignore": ["lm_head", "model.language_model.layers.0.linear_attn*"]})
    assert q.quantized_parts == ("attention", "dense_mlp", "shared_experts", "routed_experts")


def test_modelopt_nvfp4_with_fp8_kv_from_hf_quant_config():
    q = parse_quantization(None, {"quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                                                   "group_size": 16, "exclude_modules": ["lm_head"]}})
    assert (q.method, q.weight_bytes_per_param, q.kv_bytes_per_elem) == ("nvfp4", 0.5625, 1.0)


def test_compressed_tensors_fp8_kv_scheme_dict():
    cfg = {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}},
           "kv_cache_scheme": {"num_bits": 8, "type": "float"}}
    q = parse_quantization(cfg)
    assert (q.method, q.weight_bytes_per_param, q.kv_bytes_per_elem) == ("fp8", 1.0, 1.0)


def test_awq_int4_group128():
    q = parse_quantization({"quant_method": "awq", "bits": 4, "group_size": 128})
    assert q.weight_bytes_per_param == 0.51953125  # 0.5 + (2 B scale + 0.5 B packed zero) / 128


def test_unsupported_method_is_one_line_error():
    with pytest.raises(ValueError, match="unsupported quant_method 'bitsandbytes'"):
        parse_quantization({"quant_method": "bitsandbytes"})


def test_from_method_and_kv_dtype():
    assert QuantSpec.from_method("nvfp4", kv_cache_dtype="fp8_e4m3").kv_bytes_per_elem == 1.0
    assert kv_bytes_for_dtype("auto") == 2.0
    with pytest.raises(ValueError, match="kv_cache_dtype='int3'"):
        kv_bytes_for_dtype("int3")
    with pytest.raises(ValueError, match="method='int2'"):
        QuantSpec(method="int2")
    with pytest.raises(ValueError, match="unknown parts"):
        QuantSpec(quantized_parts=("embeddings",))
