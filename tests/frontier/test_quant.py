"""QuantSpec parsing: bytes per param incl. scales, KV dtype, which parts are quantized."""

import dataclasses

import pytest

from frontier.quant import LM_HEAD, PARTS, QuantSpec, kv_bytes_for_dtype, parse_quantization


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


def test_modelopt_mixed_precision_one_format_per_part():
    """modelopt MIXED_PRECISION (vLLM's ModelOptMixedPrecisionConfig): each layer's quant_algo; a
    part takes its layers' format, the experts' (else the dense MLP's) is the method, parts no
    layer names stay bf16, the LM head is quantized only when listed."""
    layers = {"model.language_model.layers.0.linear_attn.in_proj_qkv": {"quant_algo": "FP8"},
              "model.language_model.layers.3.self_attn.q_proj": {"quant_algo": "FP8"},
              "model.language_model.layers.0.mlp.experts": {"quant_algo": "W4A16_NVFP4", "group_size": 16},
              "model.language_model.layers.0.mlp.shared_expert.gate_proj": {"quant_algo": "W4A16_NVFP4"},
              "mtp.layers.0.mlp.experts": {"quant_algo": "FP8"},
              "lm_head": {"quant_algo": "W4A16_NVFP4", "group_size": 16}}
    cfg = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": layers,
           "kv_cache_scheme": {"num_bits": 8, "type": "float"}}
    q = parse_quantization(cfg)
    assert (q.method, q.weight_bytes_per_param, q.kv_bytes_per_elem) == ("nvfp4_w4a16", 0.5625, 1.0)
    assert q.quantized_parts == ("shared_experts", "routed_experts")
    assert [q.bytes_per_param(p) for p in PARTS + (LM_HEAD,)] == [1.0, 2.0, 0.5625, 0.5625, 1.0, 0.5625]
    assert [q.method_of(p) for p in ("attention", "dense_mlp", "linear_attention", LM_HEAD)] == [
        "fp8", "none", "fp8", "nvfp4_w4a16"]
    assert q.label == ("mixed (attention fp8, shared_experts nvfp4_w4a16, routed_experts nvfp4_w4a16, "
                       "linear_attention fp8, lm_head nvfp4_w4a16)")
    # the legacy hf_quant_config.json carries the same per-layer table
    legacy = {"quantization": {"quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8",
                               "quantized_layers": layers}}
    assert parse_quantization(None, legacy) == q
    assert parse_quantization({"quant_method": "fp8"}).bytes_per_param(LM_HEAD) == 2.0
    for bad, message in (({"x.layers.0.self_attn.q_proj": {"quant_algo": "MXFP8"}},
                          "MIXED_PRECISION quant_algo 'MXFP8' of x.layers.0.self_attn.q_proj is not simulated; "
                          "valid: FP8, NVFP4, W4A16_NVFP4"),
                         ({"x.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
                           "x.layers.1.self_attn.q_proj": {"quant_algo": "NVFP4"}},
                          "MIXED_PRECISION: the attention layers use fp8, nvfp4; one format per weight group"),
                         ({}, "modelopt MIXED_PRECISION without quantized_layers")):
        with pytest.raises(ValueError, match=message):
            parse_quantization({**cfg, "quantized_layers": bad})


def test_nvidia_qwen3_6_nvfp4_checkpoints_are_mixed_precision():
    """NVIDIA's Qwen3.6 NVFP4 checkpoints: FP8 attention and Gated DeltaNet projections, W4A16 NVFP4
    MLP / experts / LM head (they were read as FP8 throughout: 34.1 GiB for 35B-A3B, now 20.2)."""
    from frontier.model_spec import load_model_spec
    from frontier.parallel import ParallelSpec
    m = load_model_spec("nvidia/Qwen3.6-35B-A3B-NVFP4")
    assert m.quant.method == "nvfp4_w4a16" and m.quant.method_of("attention") == "fp8"
    assert m.quant.method_of("linear_attention") == "fp8" and m.quant.bytes_per_param(LM_HEAD) == 0.5625
    head = 248_320 * 2048 * (2.0 - 0.5625)      # the untied LM head, 248,320 rows of 2,048
    plain_head = dataclasses.replace(m, quant=dataclasses.replace(
        m.quant, part_methods=tuple(pm for pm in m.quant.part_methods if pm[0] != LM_HEAD)))
    assert plain_head.weight_bytes_per_rank(ParallelSpec()) - m.weight_bytes_per_rank(ParallelSpec()) == round(head)
    dense = load_model_spec("nvidia/Qwen3.6-27B-NVFP4").quant
    assert (dense.method, dense.quantized_parts, dense.kv_bytes_per_elem) == ("nvfp4_w4a16", ("dense_mlp",), 1.0)
