"""Batch engine: step shapes, CUDA-graph padding, weights read once, speed."""

import time

import pytest

from frontier.gpu import GpuSpec
from frontier.model_spec import ModelSpec
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.cost_model import RooflineCostModel
from simulator.cuda_graph import CudaGraphConfig

H100 = GpuSpec(name="H100-SXM", memory_bytes=85520809984, hbm_bw_bytes_per_s=3.35e12, bf16_flops=989e12,
               fp8_flops=1979e12, fp4_flops=0, fp32_flops=67e12, nvlink_bw_bytes_per_s=450e9, network_bw_bytes_per_s=50e9,
               gpus_per_node=8, price_per_hour_usd=0.0, sm_version=90, source="test")
LLAMA_8B = ModelSpec(name="llama-3.1-8b", architecture="LlamaForCausalLM", hidden_size=4096, num_layers=32,
                     num_attention_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                     vocab_size=128256, tie_word_embeddings=False, max_position_embeddings=131072)
MOE = ModelSpec(name="toy-moe", architecture="Qwen3MoeForCausalLM", hidden_size=2048, num_layers=48,
                num_attention_heads=32, num_kv_heads=4, head_dim=128, intermediate_size=0, vocab_size=151936,
                tie_word_embeddings=False, max_position_embeddings=40960, num_experts=128,
                num_experts_per_tok=8, moe_intermediate_size=768)
MLA = ModelSpec(name="toy-mla", architecture="DeepseekV3ForCausalLM", hidden_size=7168, num_layers=61,
                num_attention_heads=128, num_kv_heads=128, head_dim=192, intermediate_size=18432,
                vocab_size=129280, tie_word_embeddings=False, max_position_embeddings=163840, num_experts=256,
                num_experts_per_tok=8, moe_intermediate_size=2048, num_shared_experts=1,
                shared_expert_intermediate_size=2048, num_dense_layers=3, kv_lora_rank=512, q_lora_rank=1536,
                qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)


def engine(model=LLAMA_8B, parallel=ParallelSpec(), eager=False, max_num_seqs=256):
    cg = CudaGraphConfig.from_vllm(max_num_seqs, 8192, eager, H100.sm_version)
    return BatchEngine(model, parallel, H100, RooflineCostModel(H100), cg)


def decode(n, ctx=1024):
    return BatchShape((1,) * n, (ctx,) * n)


def test_decode_pads_to_capture_size_and_uses_full_graph():
    cost = engine().step_cost(decode(130))
    assert (cost.num_tokens, cost.padded_tokens, cost.cudagraph_mode) == (130, 136, "FULL")


def test_mixed_and_large_steps():
    e = engine()
    mixed = e.step_cost(BatchShape((100, 1, 1), (0, 50, 60)))
    assert (mixed.padded_tokens, mixed.cudagraph_mode) == (104, "PIECEWISE")
    big = e.step_cost(BatchShape((2048,), (0,)))
    assert (big.padded_tokens, big.cudagraph_mode) == (2048, "NONE")


def test_eager_costs_more_than_graphs_for_decode():
    graphs, eager = engine().step_cost(decode(8)), engine(eager=True).step_cost(decode(8))
    assert eager.cudagraph_mode == "NONE" and eager.padded_tokens == 8
    assert eager.duration_s > graphs.duration_s


def test_mixed_step_reads_weights_once():
    e = engine()
    mixed = e.step_cost(BatchShape((512,) + (1,) * 64, (0,) + (1000,) * 64)).duration_s
    separate = e.step_cost(BatchShape((512,), (0,))).duration_s + e.step_cost(decode(64, 1000)).duration_s
    assert mixed < separate


def test_decode_cost_grows_with_batch_and_context():
    e = engine()
    t1, t64, t256 = (e.step_cost(decode(n)).duration_s for n in (1, 64, 256))
    assert 4e-3 < t1 < t64 < t256                     # bs1 is bound by reading ~16 GB of weights
    assert e.step_cost(decode(64, 4096)).duration_s > t64


def test_tensor_and_pipeline_parallel():
    t1 = engine().step_cost(decode(1)).duration_s
    t2 = engine(parallel=ParallelSpec(tp=2)).step_cost(decode(1)).duration_s
    assert t1 / 2 < t2 < t1                           # half the weights, plus all-reduces
    pp2 = engine(parallel=ParallelSpec(pp=2)).step_cost(decode(1)).duration_s
    assert t1 < pp2 < t1 * 1.01                       # stages in sequence + one activation send


def test_moe_and_mla_models_price():
    moe = engine(MOE, ParallelSpec.from_vllm(tp=2, enable_expert_parallel=True))
    mla = engine(MLA, ParallelSpec.from_vllm(tp=8))
    for e in (moe, mla):
        for batch in (decode(32), BatchShape((256, 1), (0, 10))):
            assert 0 < e.step_cost(batch).duration_s < 1.0


def test_memoized_and_fast():
    e = engine()
    b = decode(256)
    assert e.step_cost(b) is e.step_cost(b)
    batches = [BatchShape((1,) * 256, tuple(1000 + i + j for j in range(256))) for i in range(50)]
    e.step_cost(batches[0])
    start = time.perf_counter()
    for batch in batches[1:]:
        e.step_cost(batch)
    assert (time.perf_counter() - start) / 49 < 1e-3


def test_bad_batch_shapes():
    with pytest.raises(ValueError, match="non-empty"):
        BatchShape((), ())
    with pytest.raises(ValueError, match="non-empty"):
        BatchShape((1, 1), (0,))
    with pytest.raises(ValueError, match=">= 1"):
        BatchShape((0,), (0,))
    with pytest.raises(ValueError, match="tp=3"):
        engine(parallel=ParallelSpec(tp=3))


def test_gemma_sandwich_norms_are_priced():
    """Gemma 2 / 3 layers run two more RMSNorms (post-attention, post-feedforward, no residual):
    2 per layer, [m, h] read and written, on top of the fused input / pre-MLP norms."""
    import dataclasses
    gemma = dataclasses.replace(LLAMA_8B, name="gemma-like", norms_per_layer=4)
    ops = {op.name: (op, n) for op, n in engine(gemma).layer_ops(64)}
    op, n = ops["sandwich_norm"]
    assert (n, op.tokens, op.hidden, op.bytes_per_token) == (64, 64, 4096, 2 * 4096 * 2)
    assert "sandwich_norm" not in {op.name for op, _ in engine().layer_ops(64)}
    extra = RooflineCostModel(H100).op_times_s([op], "kernel")[0] * 64
    assert engine(gemma).step_cost(decode(64)).duration_s == pytest.approx(
        engine().step_cost(decode(64)).duration_s + extra, rel=1e-12)
