"""ModelSpec: exact weight / KV bytes per rank for catalogue models (hand-computed in comments)."""

import dataclasses
import json

import pytest

from frontier.model_spec import _catalogue_lookup, catalogue_names, load_model_spec, model_spec_from_config, pp_partition
from frontier.parallel import ParallelSpec
from frontier.quant import QuantSpec

GB = 1e9


@pytest.fixture(scope="module")
def llama():
    return load_model_spec("meta-llama/Llama-3.1-8B")


def test_llama_fields(llama):
    assert (llama.hidden_size, llama.num_layers, llama.num_attention_heads, llama.num_kv_heads) == (4096, 32, 32, 8)
    assert (llama.head_dim, llama.intermediate_size, llama.vocab_size) == (128, 14336, 128256)
    assert not llama.is_moe and not llama.is_mla and not llama.tie_word_embeddings
    assert llama.architecture == "LlamaForCausalLM" and llama.quant.method == "none"


# Llama-3.1-8B per layer (params): q,o 4096*4096 each, k,v 4096*1024 each -> 41,943,040 attention;
# MLP 3*4096*14336 = 176,160,768; sum 218,103,808; norms 2*4096 (bf16, replicated).
# Vocab 128256 = 2004*64 (no padding): embed = lm_head = 128256*4096 = 525,336,576 params.
# Whole model: 32*218,103,808 + 32*8192 + 4096 + 2*525,336,576 = 8,030,261,248 params (the published count).
@pytest.mark.parametrize("tp, expected", [
    (1, 16_060_522_496),  # 2 B * 8,030,261,248
    (2, 8_030_527_488),   # 32*(436,207,616/2 + 16,384) + 2*(128256/2*4096*2) + 8192
    (4, 4_015_529_984),   # 32*(436,207,616/4 + 16,384) + 2*(128256/4*4096*2) + 8192
])
def test_llama_bf16_weight_bytes(llama, tp, expected):
    assert llama.weight_bytes_per_rank(ParallelSpec(tp=tp)) == expected


@pytest.mark.parametrize("tp, expected", [
    (1, 9_081_200_640),  # 32*(218,103,808*1 B + 16,384) + 2*525,336,576*2 B + 8192
    (2, 4_540_866_560),  # 32*(109,051,904 + 16,384) + 2*262,668,288*2 + 8192
])
def test_llama_fp8_weight_bytes(llama, tp, expected):
    fp8 = dataclasses.replace(llama, quant=QuantSpec.from_method("fp8"))
    assert fp8.weight_bytes_per_rank(ParallelSpec(tp=tp)) == expected


def test_llama_pp2_worst_stage_is_last(llama):
    # [16, 16] layers; last stage = 16 layers + lm_head + final norm (8192 B more than the first)
    # 16*436,224,000 + 1,050,673,152 + 8192
    assert pp_partition(32, 2) == [16, 16]
    assert llama.weight_bytes_per_rank(ParallelSpec(pp=2)) == 8_030_265_344


@pytest.mark.parametrize("parallel, expected", [
    (ParallelSpec(tp=1), 131_072),  # 32 layers * 2 (K,V) * 8 heads * 128 * 2 B
    (ParallelSpec(tp=8), 16_384),   # 32 * 2 * 1 * 128 * 2
    (ParallelSpec(tp=16), 16_384),  # tp > kv heads: one replicated KV head per rank
    (ParallelSpec(pp=2), 65_536),   # 16 layers on the worst stage
])
def test_llama_kv_bytes_per_token(llama, parallel, expected):
    assert llama.kv_bytes_per_token_per_rank(parallel) == expected


def test_llama_fp8_kv(llama):
    fp8kv = dataclasses.replace(llama, quant=QuantSpec.from_method("none", kv_cache_dtype="fp8"))
    assert fp8kv.kv_bytes_per_token_per_rank(ParallelSpec()) == 65_536  # 131072 / 2


def test_pp_partition_matches_vllm_get_pp_indices():
    assert pp_partition(61, 4) == [15, 15, 16, 15]  # remainder goes before the last stage
    assert pp_partition(10, 4) == [2, 3, 3, 2]
    assert pp_partition(7, 2) == [4, 3]


def test_deepseek_v3_mla():
    ds = load_model_spec("deepseek-ai/DeepSeek-V3")
    assert ds.is_mla and ds.is_moe and ds.num_dense_layers == 3 and ds.num_moe_layers == 58
    assert (ds.num_experts, ds.num_experts_per_tok, ds.num_shared_experts) == (256, 8, 1)
    assert ds.quant.method == "fp8_block" and ds.quant.weight_bytes_per_param == 1 + 4 / (128 * 128)
    # 61 layers * (kv_lora_rank 512 + qk_rope_head_dim 64) * 2 B = 70,272; the latent is not split by TP
    assert ds.kv_bytes_per_token_per_rank(ParallelSpec()) == 70_272
    assert ds.kv_bytes_per_token_per_rank(ParallelSpec(tp=8)) == 70_272
    assert ds.kv_bytes_per_token_per_rank(ParallelSpec(pp=4)) == 16 * 576 * 2  # worst stage has 16 layers
    # ~671B params at ~1 B/param + bf16 embeddings: 673.15 GB, MTP layer not counted
    assert 670 * GB < ds.weight_bytes_per_rank(ParallelSpec()) < 676 * GB


def test_qwen3_30b_a3b_expert_sharding():
    m = load_model_spec("Qwen/Qwen3-30B-A3B")
    assert m.is_moe and m.intermediate_size == 0 and m.num_moe_layers == 48
    # TP4 + EP4 (vLLM --enable-expert-parallel): per layer on one rank
    #   attention (8 q heads, 1 kv head, hd 128): (2*2048*8*128 + 2*2048*1*128)*2 B = 9,437,184
    #   router 2048*128*2 B = 524,288; experts 128/4=32 local * 3*2048*768 * 2 B = 301,989,888; norms 8192
    #   layer = 311,959,552; 48 layers = 14,974,058,496
    #   vocab 151936/4*2048*2 B = 155,582,464, embed + lm_head = 311,164,928; final norm 4096
    ep = ParallelSpec.from_vllm(tp=4, enable_expert_parallel=True)
    assert (ep.ep, ep.moe_tp) == (4, 1)
    assert m.weight_bytes_per_rank(ep) == 15_285_227_520
    # without EP the experts are TP-sharded 4 ways: same bytes (128 * 3*2048*192 * 2 B)
    assert m.weight_bytes_per_rank(ParallelSpec.from_vllm(tp=4)) == 15_285_227_520
    # DP4 attention + EP4: attention replicated (full 18,874,368 params), experts 32 per rank
    #   layer = 37,748,736 + 524,288 + 301,989,888 + 8192 = 340,271,104; *48 = 16,333,012,992
    #   vocab unsplit: 2 * 151936*2048*2 = 1,244,659,712; + 4096
    dp = ParallelSpec.from_vllm(tp=1, dp=4, enable_expert_parallel=True)
    assert m.weight_bytes_per_rank(dp) == 17_577_676_800
    # experts alone scale with 1/ep: layer(ep=1) - layer(ep=8) = 603,979,776*2 B * (1 - 1/8)
    full, ep8 = ParallelSpec(tp=8, ep=8, ffn_tp=1), ParallelSpec(tp=8, ep=1, ffn_tp=8)
    assert m.layer_bytes_per_rank(0, ep8) == m.layer_bytes_per_rank(0, full)
    assert m.layer_bytes_per_rank(0, ParallelSpec(tp=1)) - m.layer_bytes_per_rank(0, ParallelSpec(tp=1, dp=8, ep=8)) == 1_056_964_608
    # KV: 48 layers * 2 * 4 kv heads * 128 * 2 B = 98,304
    assert m.kv_bytes_per_token_per_rank(ParallelSpec()) == 98_304


def test_gpt_oss_120b_mxfp4():
    m = load_model_spec("openai/gpt-oss-120b")
    assert m.quant.method == "mxfp4" and m.quant.weight_bytes_per_param == 0.53125
    assert m.quant.quantized_parts == ("routed_experts",)
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size) == (128, 4, 2880)
    assert (m.sliding_window, m.num_sliding_layers) == (128, 18)
    # experts 36*128*3*2880*2880 params * 0.53125 = 60,914,073,600 B; attention bf16 1,911,029,760;
    # embed + lm_head 2*201088*2880*2 = 2,316,533,760; routers 26,542,080; norms ~0.8 MB -> 65.17e9 B
    total = m.weight_bytes_per_rank(ParallelSpec())
    assert 65.1 * GB < total < 65.2 * GB
    # KV: all 36 layers hold full pages (sliding layers not discounted): 36*2*8*64*2 = 73,728
    assert m.kv_bytes_per_token_per_rank(ParallelSpec()) == 73_728


def test_kimi_k25_text_config_int4():
    m = load_model_spec("moonshotai/Kimi-K2.5")
    assert m.architecture == "DeepseekV3ForCausalLM" and m.hidden_size == 7168 and m.num_experts == 384
    assert m.quant.method == "int4_wo" and m.quant.weight_bytes_per_param == 0.5 + 2 / 32
    # attention, shared experts, dense MLP ignored (a Gated DeltaNet layer, which Kimi has none of, would not be)
    assert m.quant.quantized_parts == ("routed_experts", "linear_attention")
    assert m.kv_bytes_per_token_per_rank(ParallelSpec()) == 61 * 576 * 2
    assert 590 * GB < m.weight_bytes_per_rank(ParallelSpec()) < 598 * GB  # checkpoint is ~594 GB


def test_tied_embeddings_count_once_on_one_stage():
    m = load_model_spec("Qwen/Qwen3-0.6B")
    assert m.tie_word_embeddings
    untied = dataclasses.replace(m, tie_word_embeddings=False)
    vocab_bytes = 151936 * 1024 * 2
    assert untied.weight_bytes_per_rank(ParallelSpec()) - m.weight_bytes_per_rank(ParallelSpec()) == vocab_bytes
    # pp=2: embed on stage 0, lm_head copy on stage 1 -> tying saves nothing on the worst stage
    assert untied.weight_bytes_per_rank(ParallelSpec(pp=2)) == m.weight_bytes_per_rank(ParallelSpec(pp=2))


def test_modelopt_fp8_hf_quant_config():
    m = load_model_spec("nvidia/Llama-3.1-70B-Instruct-FP8")
    assert m.quant.method == "fp8" and m.quant.kv_bytes_per_elem == 1.0
    assert m.kv_bytes_per_token_per_rank(ParallelSpec()) == 80 * 2 * 8 * 128  # fp8 KV


def test_catalogue_name_forms():
    assert load_model_spec("META-LLAMA/llama-3.1-8b").num_layers == 32
    assert load_model_spec("openai--gpt-oss-20b").num_experts == 32
    assert load_model_spec("gpt-oss-120b").num_experts == 128


def test_unknown_name_lists_close_matches():
    with pytest.raises(ValueError, match=r"unknown model 'Qwen/Qwen3-31B-A3B'.*close matches: Qwen/Qwen3-30B-A3B") as err:
        load_model_spec("Qwen/Qwen3-31B-A3B")
    assert "\n" not in str(err.value) and str(err.value).endswith("`frontier models` lists the catalogue")
    with pytest.raises(ValueError) as err:
        load_model_spec("nope")
    assert str(err.value) == ("unknown model 'nope': not a config.json path nor a catalogue name; "
                              "`frontier models` lists the catalogue")


def test_catalogue_names_are_loadable_names():
    names = catalogue_names()
    assert names == sorted(names, key=str.lower) and len(names) == len(set(n.lower() for n in names))
    for name in ("Qwen/Qwen3-30B-A3B", "openai/gpt-oss-120b", "meta-llama/Meta-Llama-3.1-8B"):
        assert name in names and load_model_spec(name).name == name


def _tiny(**extra):
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, **extra}


def test_load_from_path_and_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_tiny(num_key_value_heads=2)))
    for where in (tmp_path, tmp_path / "config.json"):
        m = load_model_spec(str(where))
        assert (m.num_kv_heads, m.head_dim, m.max_position_embeddings) == (2, 16, 0)


def test_unsupported_model_type_is_one_line():
    with pytest.raises(ValueError, match="unsupported model_type 'jamba'"):
        model_spec_from_config(_tiny(model_type="jamba"), "x")


def test_mistral_sliding_window_and_vocab_padding():
    m = model_spec_from_config(_tiny(model_type="mistral", sliding_window=4096), "m")
    assert (m.sliding_window, m.num_sliding_layers) == (4096, 2)
    # vocab 100 pads to 128: embed = lm_head = 128*64*2 B; layers 2*(2*(4*64*16*2)+3*64*128)*2 B + norms
    layer = (2 * 64 * 64 + 2 * 64 * 64 + 3 * 64 * 128) * 2 + 2 * 64 * 2
    assert m.weight_bytes_per_rank(ParallelSpec()) == 2 * layer + 2 * 128 * 64 * 2 + 64 * 2


def test_frontier_catalogue_additions():
    # frontier/catalogue/models/: Llama-2-70b-hf (used by the shared Vidur profiles)
    m = load_model_spec("meta-llama/Llama-2-70b-hf")
    assert (m.num_layers, m.num_attention_heads, m.num_kv_heads, m.intermediate_size) == (80, 64, 8, 28672)
    # per layer (params): q,o 8192^2 each + k,v 8192*1024 each = 150,994,944; MLP 3*8192*28672 = 704,643,072
    # 80 layers -> 68,451,041,280 (+ norms 80*16384); embed + lm_head 2*32000*8192 = 524,288,000; final 8192
    assert m.weight_bytes_per_rank(ParallelSpec()) == 2 * (68_451_041_280 + 80 * 16_384 + 524_288_000 + 8192)
    assert load_model_spec("meta-llama/Llama-2-7b-hf").kv_bytes_per_token_per_rank(ParallelSpec()) == 524_288


def test_missing_required_field_is_value_error():
    cfg = _tiny()
    del cfg["vocab_size"]
    with pytest.raises(ValueError, match=r"lacks required field\(s\) \['vocab_size'\]"):
        model_spec_from_config(cfg, "x")


@pytest.mark.parametrize("key, value, valid", [("hidden_size", "x", 1), ("num_hidden_layers", -2, 1),
                                               ("num_key_value_heads", 2.5, 1), ("num_experts", True, 0),
                                               ("intermediate_size", float("inf"), 0),
                                               ("interleave_moe_layer_step", "2", 0)])
def test_a_field_that_is_no_whole_number_is_named(key, value, valid):
    """int() of such a field raised "invalid literal for int() with base 10: 'x'" (or nothing)."""
    with pytest.raises(ValueError, match=rf"^x: config.json {key}={value!r}; valid: a whole number >= {valid}$"):
        model_spec_from_config({**_tiny(), key: value}, "x")
    with pytest.raises(ValueError, match=r"^x: config.json holds a JSON list, not an object$"):
        model_spec_from_config([1, 2], "x")


def test_a_local_config_that_is_no_json_object_is_named(tmp_path):
    """A binary file, broken JSON or a JSON list as config.json: a traceback (AttributeError) or a
    bare decoder message before."""
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    for content, want in ((b"\xcb\x00\x01", "is not a UTF-8 text file (byte 0)"),
                          (b'{"a":', "is not valid JSON: Expecting value at line 1 column 6"),
                          (b"[1, 2]", "holds a JSON list, not an object")):
        path.write_bytes(content)
        with pytest.raises(ValueError) as err:
            load_model_spec(str(path.parent))
        assert str(err.value) == f"model config {str(path)!r} {want}"
    path.write_text(json.dumps(_tiny()))
    (path.parent / "hf_quant_config.json").write_text("[]")
    with pytest.raises(ValueError, match=r"hf_quant_config.json' holds a JSON list, not an object"):
        load_model_spec(str(path))


def test_minimax_m2_5_is_a_mixtral_style_fp8_block_moe():
    m = load_model_spec("MiniMaxAI/MiniMax-M2.5")
    assert (m.num_experts, m.num_experts_per_tok, m.moe_intermediate_size, m.intermediate_size) == (256, 8, 1536, 0)
    assert m.quant.method == "fp8_block" and m.num_dense_layers == 0
    # KV: 62 layers x (K+V) x 8 kv heads x 128 x 2 B (bf16 cache) = 253,952 B; TP4 holds 2 heads
    assert m.kv_bytes_per_token_per_rank(ParallelSpec()) == 62 * 2 * 8 * 128 * 2 == 253952
    assert m.kv_bytes_per_token_per_rank(ParallelSpec(tp=4)) == 253952 // 4
    # ~229e9 params in fp8 (128x128 block scales) + bf16 embeddings, LM head, norms, router
    assert m.weight_bytes_per_rank(ParallelSpec()) == 230023160832
    # its q/k RMSNorm spans the whole TP-sharded projection (vLLM's MiniMaxText01RMSNormTP)
    assert m.tp_wide_qk_norm and not load_model_spec("Qwen/Qwen3-32B").tp_wide_qk_norm
    # its gate holds fp32 weights and multiplies in fp32 (vLLM: params_dtype / out_dtype fp32)
    assert m.router_dtype == "fp32" and load_model_spec("Qwen/Qwen3-30B-A3B").router_dtype == "bf16"
    with pytest.raises(ValueError, match=r"router_dtype='fp16' \(MiniMaxAI/MiniMax-M2.5\); valid: \('bf16', 'fp32'\)"):
        dataclasses.replace(m, router_dtype="fp16")


# ---- Gemma 2 / 3 (catalogue configs written from the hub's published config.json values)

def test_gemma_3_27b_sandwich_norms_tied_embeddings_and_layer_types():
    m = load_model_spec("google/gemma-3-27b-it")
    assert (m.architecture, m.hidden_size, m.num_layers, m.num_attention_heads, m.num_kv_heads) == (
        "Gemma3ForConditionalGeneration", 5376, 62, 32, 16)
    # text_config omits vocab_size and max_position_embeddings: Gemma3TextConfig's defaults
    assert (m.head_dim, m.vocab_size, m.max_position_embeddings, m.tie_word_embeddings) == (128, 262208, 131072, True)
    assert (m.sliding_window, m.num_sliding_layers, m.norms_per_layer) == (1024, 52, 4)
    assert [i for i in range(62) if not m.is_sliding_layer(i)] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]
    # per layer: q, o 5376*32*128 = 22,020,096 each, k, v 5376*16*128 = 11,010,048 each -> 66,060,288;
    # MLP 3*5376*21504 = 346,816,512; four norms 4*5376. Vocab 262208 = 4097*64 (no padding), tied:
    # embed 262208*5376 = 1,409,630,208 once. 62*412,876,800 + 62*21,504 + 1,409,630,208 + 5376
    # = 27,009,330,432 params (the published 27B without the ~0.4B SigLIP vision tower); + that tower
    # and the multimodal projector, 423,060,336 (test_vision_params_oracle: transformers' count)
    assert m.weight_bytes_per_rank(ParallelSpec()) == 2 * (27_009_330_432 + 423_060_336)


def test_gemma_defaults_and_derived_layer_types():
    base = {"model_type": "gemma3_text", "hidden_size": 3840, "num_hidden_layers": 8, "num_attention_heads": 16}
    m = model_spec_from_config(base, "g3")
    # transformers' Gemma3TextConfig defaults: head_dim 256 (not 3840 / 16 = 240), 4 KV heads,
    # vocab 262208, window 4096, every 6th layer full
    assert (m.head_dim, m.num_kv_heads, m.vocab_size, m.sliding_window) == (256, 4, 262208, 4096)
    assert m.sliding_layer_flags == (True, True, True, True, True, False, True, True)
    m = model_spec_from_config({**base, "sliding_window_pattern": 3}, "g3")
    assert m.sliding_layer_flags == (True, True, False, True, True, False, True, True)
    m = model_spec_from_config({**base, "layer_types": ["full_attention"] * 7 + ["sliding_attention"]}, "g3")
    assert (m.num_sliding_layers, m.is_sliding_layer(7), m.is_sliding_layer(0)) == (1, True, False)
    g2 = model_spec_from_config({"model_type": "gemma2", "num_hidden_layers": 4}, "g2")
    assert (g2.hidden_size, g2.vocab_size, g2.max_position_embeddings, g2.sliding_window) == (2304, 256000, 8192, 4096)
    assert g2.sliding_layer_flags == (True, False, True, False)
    g1 = model_spec_from_config({"model_type": "gemma", "num_hidden_layers": 2}, "g1")
    assert (g1.sliding_window, g1.norms_per_layer, g1.head_dim, g1.tie_word_embeddings) == (0, 2, 256, True)


def test_gemma_catalogue_models():
    for name, layers, full, window, head_dim in (
            ("google/gemma-3-12b-it", 48, 8, 1024, 256), ("google/gemma-3-4b-it", 34, 5, 1024, 256),
            ("google/gemma-3-1b-it", 26, 4, 512, 256), ("google/gemma-2-27b-it", 46, 23, 4096, 128),
            ("google/gemma-2-9b-it", 42, 21, 4096, 256)):
        m = load_model_spec(name)
        assert (m.num_layers, m.num_layers - m.num_sliding_layers, m.sliding_window, m.head_dim) == (
            layers, full, window, head_dim), name
        assert m.norms_per_layer == 4 and m.tie_word_embeddings and not m.is_sliding_layer(1 if "-2-" in name else 5)


@pytest.mark.parametrize("extra,match", [
    ({"layer_types": ["sliding_attention", "chunked_attention"]}, "layer_types must list 2 entries"),
    ({"layer_types": ["sliding_attention"]}, "layer_types must list 2 entries"),
    ({"sliding_window_pattern": 0}, "sliding_window_pattern=0; valid: a whole number >= 1"),
    ({"use_bidirectional_attention": True}, "use_bidirectional_attention"),
])
def test_bad_gemma_layer_layouts_are_one_line_errors(extra, match):
    with pytest.raises(ValueError, match=match):
        model_spec_from_config({"model_type": "gemma3_text", "num_hidden_layers": 2, **extra}, "g")


def test_gemma_null_window_and_float_layer_count():
    # an explicit null window is no window (the class keeps it; vLLM then runs every layer full);
    # a whole float layer count still derives the layer types
    m = model_spec_from_config({"model_type": "gemma3_text", "num_hidden_layers": 6, "sliding_window": None}, "g")
    assert (m.sliding_window, m.num_sliding_layers, m.sliding_layer_flags) == (0, 0, ())
    m = model_spec_from_config({"model_type": "gemma2", "num_hidden_layers": 4.0}, "g")
    assert (m.num_layers, m.sliding_layer_flags) == (4, (True, False, True, False))


# ---- Llama 4 (AIConfigurator's catalogue configs)

def test_llama4_scout_chunked_layers_and_shared_expert():
    m = load_model_spec("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert (m.architecture, m.num_layers, m.num_experts, m.num_experts_per_tok) == (
        "Llama4ForConditionalGeneration", 48, 16, 1)
    # every layer MoE (interleave_moe_layer_step 1): 16 routed + 1 shared expert of 8192
    assert (m.num_dense_layers, m.intermediate_size, m.moe_intermediate_size) == (0, 0, 8192)
    assert (m.num_shared_experts, m.shared_expert_intermediate_size) == (1, 8192)
    # no_rope_layers absent: every 4th layer is NoPE (full attention), the others chunked
    assert (m.attention_chunk_size, m.num_chunked_layers, m.sliding_window) == (8192, 36, 0)
    assert [i for i in range(48) if not m.is_chunked_layer(i)] == list(range(3, 48, 4))
    # per layer: q, o 5120*40*128 = 26,214,400 each, k, v 5120*8*128 = 5,242,880 each -> 62,914,560;
    # 17 experts of 3*5120*8192 = 125,829,120 -> 2,139,095,040; router 5120*16 = 81,920; norms 2*5120:
    # 2,202,101,760 per layer. 48 layers + untied embed and lm_head 2*202048*5120 + final norm 5120
    # = 107,769,861,120 params (the published 109B with the vision encoder)
    assert m.weight_bytes_per_rank(ParallelSpec()) == 2 * 107_769_861_120


def test_llama4_maverick_interleaves_dense_and_moe_layers():
    m = load_model_spec("meta-llama/Llama-4-Maverick-17B-128E-Instruct")
    assert (m.num_dense_layers, m.num_moe_layers, m.intermediate_size, m.num_experts) == (24, 24, 16384, 128)
    assert [m.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    # PP 2 splits 12 dense + 12 MoE layers per stage (the dense layers are not first)
    pp2 = ParallelSpec.from_vllm(tp=8, pp=2, enable_expert_parallel=True)
    layers = [m.layer_bytes_per_rank(i, pp2) for i in range(48)]
    assert sum(layers[:24]) == sum(layers[24:])


@pytest.mark.parametrize("extra,match", [
    ({"attention_chunk_size": 0}, "attention_chunk_size=0; valid: a whole number >= 1 or null"),
    ({"no_rope_layers": [1, 2]}, "no_rope_layers must list 2 entries of 0 / 1"),
    ({"no_rope_layer_interval": 0}, "no_rope_layer_interval=0"),
])
def test_bad_llama4_layouts_are_one_line_errors(extra, match):
    cfg = {"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 1, **extra}
    with pytest.raises(ValueError, match=match):
        model_spec_from_config(cfg, "l4")


def test_llama4_without_chunks():
    cfg = {"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
           "intermediate_size": 128, "vocab_size": 100, "num_local_experts": 4, "num_experts_per_tok": 1}
    assert model_spec_from_config(cfg, "l4").chunked_layer_flags == (True, True, True, False)   # the class default
    m = model_spec_from_config({**cfg, "attention_chunk_size": None}, "l4")
    assert (m.attention_chunk_size, m.num_chunked_layers) == (0, 0)


def test_multimodal_checkpoints_say_their_vision_encoder_is_not_counted():
    for name in ("google/gemma-3-4b-it", "meta-llama/Llama-4-Scout-17B-16E-Instruct", "moonshotai/Kimi-K2.5",
                 "Qwen/Qwen3-VL-8B-Instruct"):
        note = load_model_spec(name).vision_encoder_note()
        assert note.startswith(f"{name} is a multimodal checkpoint"), name
        counted = "meta-llama" not in name
        assert ("weights are counted" in note) == counted and ("weights and" in note) != counted, name
        assert ("encoder work is priced" in note) == (name in ("google/gemma-3-4b-it", "Qwen/Qwen3-VL-8B-Instruct"))
        assert ("text-only" in note) == (name in ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "moonshotai/Kimi-K2.5"))
    for name in ("google/gemma-3-1b-it", "meta-llama/Llama-3.1-8B", "openai/gpt-oss-120b"):
        assert load_model_spec(name).vision_encoder_note() is None, name


def test_qwen3_5_gated_deltanet_layers_and_weights():
    m = load_model_spec("Qwen/Qwen3.5-35B-A3B")
    assert (m.architecture, m.num_layers, m.num_linear_attention_layers, m.num_experts) == (
        "Qwen3_5MoeForConditionalGeneration", 40, 30, 256)
    assert [i for i in range(40) if not m.is_linear_attention_layer(i)] == list(range(3, 40, 4))
    assert (m.linear_num_key_heads, m.linear_num_value_heads, m.linear_key_head_dim, m.linear_value_head_dim,
            m.linear_conv_kernel_dim, m.mamba_ssm_dtype, m.attn_output_gate) == (16, 32, 128, 128, 4, "float32", True)
    assert (m.num_shared_experts, m.shared_expert_intermediate_size, m.num_mtp_layers, m.head_dim) == (1, 512, 1, 256)
    # GDN layer: key_dim 16*128 = 2048, value_dim 32*128 = 4096; in_proj_qkvz 2048*(2*2048 + 2*4096)
    # = 25,165,824, in_proj_ba 2048*64 = 131,072, out_proj 4096*2048 = 8,388,608, conv1d (2*2048 +
    # 4096)*4 = 32,768, A_log + dt_bias 64, gated norm 128 -> 33,718,464. Full attention: q_proj with
    # the output gate 2048*(2*16*256) = 16,777,216, o_proj 8,388,608, k and v 2048*512 each ->
    # 27,262,976. MoE: 256 experts 3*2048*512 = 805,306,368 + shared 3,145,728 + router 524,288 =
    # 808,976,384; norms 4,096. 30 GDN layers 842,698,944 each + 10 full 836,243,456 each, untied
    # embed and lm_head 2*248,320*2048, final norm 2,048: 34,660,523,648 params (transformers'
    # Qwen3_5MoeForCausalLM: 34,660,610,688, the 87,040 more being the shared-expert gates and q/k norms);
    # + the vision tower on the first stage: 446,571,248 params (transformers' Qwen3_5MoeVisionModel),
    # 441,955,440 of them split by TP (27 blocks of qkv 3,984,768 with its bias, proj 1,327,104, fc1
    # 4,962,512 with its bias, fc2 4,958,208; the merger's fc1 21,238,272 with its bias, fc2
    # 9,437,184) and 4,615,808 replicated (the blocks' norms and row-parallel biases 27 x 6,912, the
    # patch embedding 1,770,624, the position embedding 2,654,208, the merger's norm and fc2 bias 4,352)
    assert (m.vision_params_sharded, m.vision_params_replicated) == (441_955_440, 4_615_808)
    assert m.weight_bytes_per_rank(ParallelSpec()) == 2 * (34_660_523_648 + 446_571_248)
    assert m.vision_bytes_per_rank(4) == 2 * (441_955_440 // 4 + 4_615_808)
    assert dataclasses.replace(m, vision_params_sharded=0, vision_params_replicated=0).weight_bytes_per_rank(
        ParallelSpec()) == 2 * 34_660_523_648
    # KV per token: the 10 full-attention layers only (2 KV heads of 256; one per rank at TP 2)
    assert m.kv_bytes_per_token_per_rank(ParallelSpec()) == 10 * 2 * 2 * 256 * 2
    assert m.kv_bytes_per_token_per_rank(ParallelSpec(tp=2)) == 10 * 2 * 1 * 256 * 2
    # PP 4 (10 layers a stage, layers 3, 7 full in the first): the worst stage holds 3 full layers
    assert m.kv_bytes_per_token_per_rank(ParallelSpec(pp=4)) == 3 * 2 * 2 * 256 * 2
    assert m.vision_encoder_note() is not None
    dense = load_model_spec("Qwen/Qwen3.5-27B")
    assert (dense.num_layers, dense.num_linear_attention_layers, dense.is_moe, dense.intermediate_size) == (
        64, 48, False, 17408)


def test_gated_deltanet_defaults_and_derived_layer_types():
    """Fields a config.json omits take transformers' Qwen3Next / Qwen3.5 class defaults (head_dim
    256, GDN 16 key / 32 value heads of 128, conv 4), and without layer_types every
    full_attention_interval-th layer (default 4) is full attention."""
    cfg = {"model_type": "qwen3_next", "hidden_size": 256, "num_hidden_layers": 6, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512, "num_experts": 0}
    m = model_spec_from_config(cfg, "next")
    assert m.linear_attention_flags == (True, True, True, False, True, True)
    assert (m.head_dim, m.linear_num_key_heads, m.linear_num_value_heads, m.linear_key_head_dim,
            m.linear_value_head_dim, m.linear_conv_kernel_dim, m.mamba_ssm_dtype, m.attn_output_gate) == (
        256, 16, 32, 128, 128, 4, "", True)
    m = model_spec_from_config({**cfg, "full_attention_interval": 2, "attn_output_gate": False}, "next")
    assert m.linear_attention_flags == (True, False) * 3 and not m.attn_output_gate


@pytest.mark.parametrize("extra,match", [
    ({"layer_types": ["linear_attention"] * 3}, "layer_types must list 4 entries of 'linear_attention'"),
    ({"layer_types": ["sliding_attention"] * 4}, "layer_types must list 4 entries"),
    ({"linear_num_value_heads": 24}, "linear_num_value_heads=24 must be a multiple of linear_num_key_heads=16"),
    ({"linear_conv_kernel_dim": 0.5}, r"linear_conv_kernel_dim=0.5; valid: a whole number >= 1"),
    ({"full_attention_interval": -1}, r"full_attention_interval=-1; valid: a whole number >= 1"),
    ({"mamba_ssm_dtype": "fp8"}, "mamba_ssm_dtype='fp8'; valid: float32, bfloat16, float16"),
])
def test_bad_gated_deltanet_layouts_are_one_line_errors(extra, match):
    cfg = {"model_type": "qwen3_5_text", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512, **extra}
    with pytest.raises(ValueError, match=match):
        model_spec_from_config(cfg, "q35")


def test_kimi_k25_vision_tower_splits_by_tp_unless_tp_leaves_heads_over():
    """MoonViT (hidden 1152, MLP 4304, 27 blocks, 16 heads): per block qkv 3,981,312 + 3,456 bias,
    wo 1,327,104, fc0 4,958,208 + 4,304 bias, fc1 4,958,208 split by TP (411,279,984 in all);
    replicated the blocks' two LayerNorms and row-parallel biases 27 x 6,912, the patch conv
    3*14*14*1152 + 1,152, the 64 x 64 position grid 4,718,592, the final LayerNorm 2,304 and the
    projector (LayerNorm 2,304, 4608 x 4608 + 4,608, 4608 x 7168 + 7,168): 59,863,936."""
    m = load_model_spec("moonshotai/Kimi-K2.5")
    assert (m.vision_params_sharded, m.vision_params_replicated, m.vision_num_heads) == (411_279_984, 59_863_936, 16)
    assert m.vision_bytes_per_rank(8) == int(round(2 * (411_279_984 / 8 + 59_863_936)))
    assert m.vision_bytes_per_rank(32) == 2 * (411_279_984 + 59_863_936)      # 16 heads over 32 ranks: whole
    # the old-schema vision keys (vt_*) are not what vLLM reads: transformers' defaults, the same values
    cfg, _ = _catalogue_lookup("moonshotai/Kimi-K2.5")
    odd = {**cfg, "vision_config": {**cfg["vision_config"], "vt_hidden_size": 2048}}
    assert model_spec_from_config(odd, "k").vision_params_sharded == 411_279_984


def test_qwen3_vl_vision_tower_has_deepstack_mergers():
    """Qwen3-VL-8B's ViT (hidden 1152, MLP 4304, 27 blocks; merger width 4 x 1152 = 4608, out 4096):
    Qwen3.5's tower plus three deepstack mergers, each fc1 4608 x 4608 + 4,608 and fc2 4608 x 4096
    split (40,112,640), its LayerNorm over the merged width 9,216 and fc2 bias 4,096 replicated."""
    m = load_model_spec("Qwen/Qwen3-VL-8B-Instruct")
    merger = 4608 * 4608 + 4608 + 4608 * 4096
    blocks = 27 * (3 * 1152 * 1152 + 3 * 1152 + 1152 * 1152 + 2 * 1152 * 4304 + 4304)
    assert m.vision_params_sharded == blocks + 4 * merger == 571_730_544
    assert m.vision_params_replicated == (27 * 6 * 1152 + 3 * 2 * 16 * 16 * 1152 + 1152 + 2304 * 1152
                                          + 2 * 1152 + 4096 + 3 * (2 * 4608 + 4096)) == 4_657_792
    assert m.vision_num_heads == 0
