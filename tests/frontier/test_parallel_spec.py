"""ParallelSpec: validation messages with numbers, vLLM mapping, model compatibility checks."""

import dataclasses

import pytest

from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec


def test_defaults_and_derived_ffn_tp():
    p = ParallelSpec(tp=4, dp=2)
    assert (p.ffn_tp, p.moe_tp, p.ep, p.world_size) == (8, 8, 1, 8)
    assert ParallelSpec(tp=2, pp=3, dp=2, ep=4).ffn_tp == 1
    assert ParallelSpec(tp=2, pp=3, dp=2, ep=4).world_size == 12


def test_from_vllm():
    assert ParallelSpec.from_vllm(tp=4, dp=2, enable_expert_parallel=True) == ParallelSpec(tp=4, dp=2, ep=8, ffn_tp=1)
    assert ParallelSpec.from_vllm(tp=4, dp=2) == ParallelSpec(tp=4, dp=2, ep=1, ffn_tp=8)


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=0), r"tp=0 must be an integer >= 1"),
    (dict(tp=2, dp=2, ep=3), r"ep=3 must divide tp\*dp=2\*2=4"),
    (dict(tp=2, ep=2, ffn_tp=2), r"tp\*dp=2\*1=2 must equal ffn_tp\*ep=2\*2=4"),
    (dict(tp=2, ffn_tp=0), r"ffn_tp=0 must be an integer >= 1"),
])
def test_validation_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ParallelSpec(**kwargs)


@pytest.fixture(scope="module")
def llama():
    return load_model_spec("meta-llama/Llama-3.1-8B")


def test_check_model_accepts_kv_replication(llama):
    ParallelSpec(tp=16).check_model(llama)  # 16 % 8 kv heads == 0: each KV head on 2 ranks


@pytest.mark.parametrize("parallel, message", [
    (ParallelSpec(tp=3), r"tp=3 must divide num_attention_heads=32"),
    (ParallelSpec(pp=33), r"pp=33 exceeds num_layers=32"),
])
def test_check_model_errors(llama, parallel, message):
    with pytest.raises(ValueError, match=message):
        parallel.check_model(llama)


def test_check_model_kv_heads(llama):
    odd = dataclasses.replace(llama, num_attention_heads=48)
    with pytest.raises(ValueError, match=r"tp=6 must divide num_kv_heads=8"):
        ParallelSpec(tp=6).check_model(odd)
    with pytest.raises(ValueError, match=r"tp=12 must be a multiple of num_kv_heads=8"):
        ParallelSpec(tp=12).check_model(odd)


def test_check_model_experts():
    moe = load_model_spec("Qwen/Qwen3-30B-A3B")
    ParallelSpec.from_vllm(tp=8, enable_expert_parallel=True).check_model(moe)
    with pytest.raises(ValueError, match=r"ep=6 must divide num_experts=128 of .*valid ep: 1, 2, 4, 8, 16, 32, 64, 128$"):
        ParallelSpec(tp=2, dp=3, ep=6, ffn_tp=1).check_model(moe)


def test_check_model_mla_ignores_kv_heads():
    ds = load_model_spec("deepseek-ai/DeepSeek-V3")
    ParallelSpec.from_vllm(tp=8, dp=2, enable_expert_parallel=True).check_model(ds)


@pytest.mark.parametrize("model, tp, ep, share", [
    ("MiniMaxAI/MiniMax-M2.5", 8, False, 192),       # 1536 / 8: vLLM's "not divisible by ... block_n = 128"
    ("Qwen/Qwen3-235B-A22B-FP8", 8, False, 192),
    ("Qwen/Qwen3-30B-A3B-FP8", 4, False, 192),       # 768 / 4
])
def test_check_model_block_quantized_experts_split_into_whole_blocks(model, tp, ep, share):
    spec = load_model_spec(model)
    assert spec.quant.weight_block_size == (128, 128)
    with pytest.raises(ValueError, match=rf"moe_intermediate_size \d+ / {tp} ranks = {share} is not a multiple of "
                                         r"the weight quantization block 128x128; vLLM refuses this layout "
                                         r"\(use --enable-expert-parallel"):
        ParallelSpec.from_vllm(tp=tp, enable_expert_parallel=ep).check_model(spec)
    ParallelSpec.from_vllm(tp=tp, enable_expert_parallel=True).check_model(spec)     # whole experts per rank
    ParallelSpec.from_vllm(tp=2).check_model(spec)                                   # 384 or 768: whole blocks


def test_check_model_block_quantized_dense_mlp():
    spec = load_model_spec("Qwen/Qwen3-32B-FP8")                                      # intermediate 25600
    assert spec.quant.weight_block_size == (128, 128)
    ParallelSpec(tp=8).check_model(spec)                                              # 3200 = 25 blocks
    odd = dataclasses.replace(spec, intermediate_size=25600 + 128 * 4)                # 26112 / 8 = 3264
    with pytest.raises(ValueError, match=r"dense MLP's intermediate_size 26112 / 8 ranks = 3264 is not a multiple"):
        ParallelSpec(tp=8).check_model(odd)
    assert load_model_spec("meta-llama/Llama-3.1-8B").quant.weight_block_size is None
