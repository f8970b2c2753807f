"""Operator modules on a tiny model: exact shard shapes, deterministic points, schema-valid rows."""

import pandas as pd
import pytest

from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from frontier.profile_schema import FAMILIES, validate
from profiler import memory_run, ops_attention, ops_elementwise, ops_linear, ops_moe
from profiler.context import RankContext
from profiler.grid import SweepGrid


def ctx_for(config, fast_timing, tp=1, ep=1, dtype="fp32"):
    return RankContext(load_model_spec(config), ParallelSpec(tp=tp, ep=ep), dtype=dtype, timing=fast_timing)


def check_rows(rows, family):
    assert [r["timing_mode"] for r in rows] == ["kernel", "launch"] * (len(rows) // 2)
    if family in FAMILIES:
        validate(pd.DataFrame(rows), family)


@pytest.mark.parametrize("tp, expected", [
    (1, [("qkv_proj", 128, 64), ("o_proj", 64, 64), ("gate_up_proj", 256, 64), ("down_proj", 64, 128),
         ("lm_head", 256, 64)]),
    (4, [("qkv_proj", 48, 64), ("o_proj", 64, 16), ("gate_up_proj", 64, 64), ("down_proj", 64, 32),
         ("lm_head", 64, 64)]),  # 2 KV heads at tp=4: one replicated KV head per rank
])
def test_linear_shapes_are_the_rank_shard(dense_config, fast_timing, tp, expected):
    ctx = ctx_for(dense_config, fast_timing, tp=tp)
    assert ops_linear.gemm_shapes(ctx) == expected
    points = ops_linear.build_points(ctx, SweepGrid(linear_tokens=(1, 8)))
    assert len(points) == 10 and points[1] == {"op_name": "qkv_proj", "m": 8, "n": expected[0][1], "k": 64}
    rows = ops_linear.run_point(ctx, points[1])
    check_rows(rows, "linear")
    assert rows[0]["kernel_source"] == "aten::mm (cpu) [cpu_fastest20]" and rows[0]["dtype"] == "fp32"


def test_attention_points_are_deterministic_mixed_batches(dense_config, fast_timing):
    ctx, grid = ctx_for(dense_config, fast_timing, tp=2), SweepGrid()
    points = ops_attention.build_points(ctx, grid)
    assert points == ops_attention.build_points(ctx, grid)
    assert {p["op_name"] for p in points} == {"context", "generation", "mixed"}
    for p in points:
        assert all(n >= 1 for n in p["prefill_len"]) and all(c >= 1 for c in p["decode_ctx"])
        if p["op_name"] == "context":
            assert sum(p["prefill_len"]) in grid.attention_prefill_tokens
    mixed = next(p for p in points if p["op_name"] == "mixed" and len(p["decode_ctx"]) == 4)
    rows = ops_attention.run_point(ctx, mixed)
    check_rows(rows, "attention")
    r = rows[0]
    assert (r["num_heads"], r["num_kv_heads"], r["head_dim"]) == (2, 1, 16)
    assert r["batch_size"] == r["num_prefill"] + r["num_decode"] == len(mixed["prefill_len"]) + 4
    assert r["decode_ctx_max"] == max(mixed["decode_ctx"]) and r["prefill_tokens"] == sum(mixed["prefill_len"])


def test_attention_torch_path_matches_a_dense_reference(dense_config, fast_timing):
    """The paged decode gather + mask and the varlen loop compute real attention."""
    import torch
    import torch
    import torch.nn.functional as F
    ctx = ctx_for(dense_config, fast_timing)
    point = {"op_name": "mixed", "prefill_len": [5, 3], "decode_ctx": [20, 7], "block_size": 16}
    fn, env = ops_attention.torch_attention(ctx, point)
    fn()
    q, out, k_cache, v_cache, table = env["q"], env["out"], env["k_cache"], env["v_cache"], env["table"]
    kv = k_cache[table[1]].flatten(0, 1)[:7].transpose(0, 1)  # decode request 1: 7 keys
    vv = v_cache[table[1]].flatten(0, 1)[:7].transpose(0, 1)
    ref = F.scaled_dot_product_attention(q[9][:, None], kv, vv, enable_gqa=True)[:, 0]
    torch.testing.assert_close(out[9], ref)
    # prefill request 0 (5 tokens) owns the first page: its KV write landed at slots 0..4
    causal = F.scaled_dot_product_attention(q[:5].transpose(0, 1), k_cache.flatten(0, 1)[:5].transpose(0, 1),
                                            v_cache.flatten(0, 1)[:5].transpose(0, 1), is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out[:5], causal.transpose(0, 1))


def test_moe_points_route_balanced_and_skewed(moe_config, fast_timing):
    ctx = ctx_for(moe_config, fast_timing, tp=2, ep=2)
    points = ops_moe.build_points(ctx, SweepGrid(moe_tokens=(64,)))
    by = {p["distribution"]: p["tokens_per_expert"] for p in points}
    assert len(by["balanced"]) == 4  # 8 experts / ep 2
    assert max(by["skewed"]) > max(by["balanced"])  # the hot expert 0 lives on rank 0
    assert sum(by["skewed"]) > sum(by["balanced"])
    rows = ops_moe.run_point(ctx, points[1])
    check_rows(rows, "moe")
    assert (rows[0]["moe_tp_size"], rows[0]["moe_ep_size"], rows[0]["num_experts"]) == (1, 2, 8)
    assert rows[0]["max_tokens_per_expert"] == max(by["skewed"])


def test_dense_model_has_no_moe_points(dense_config, fast_timing):
    assert ops_moe.build_points(ctx_for(dense_config, fast_timing), SweepGrid()) == []


def test_elementwise_ops_run_in_both_modes(dense_config, fast_timing):
    ctx = ctx_for(dense_config, fast_timing, tp=2)
    points = ops_elementwise.build_points(ctx, SweepGrid(elementwise_tokens=(8,)))
    assert [(p["op_name"], p["hidden_size"]) for p in points] == [
        ("rms_norm", 64), ("fused_add_rms_norm", 64), ("rotary_embedding", 48), ("silu_and_mul", 64),
        ("kv_cache_write", 32)]
    for p in points:
        check_rows(ops_elementwise.run_point(ctx, p), "elementwise")


@pytest.mark.parametrize("config_fixture, tp, ep", [("dense_config", 1, 1), ("dense_config", 4, 1), ("moe_config", 2, 2)])
def test_memory_run_weights_equal_the_model_spec_formula(request, fast_timing, config_fixture, tp, ep):
    ctx = ctx_for(request.getfixturevalue(config_fixture), fast_timing, tp=tp, ep=ep, dtype="bf16")
    [row] = memory_run.run_point(ctx, {"max_num_batched_tokens": 32})
    validate(pd.DataFrame([row]), "memory")
    assert row["weights_bytes"] == ctx.model.weight_bytes_per_rank(ctx.parallel)
    assert row["torch_peak_increase_bytes"] is None and row["cuda_graph_bytes"] is None  # not measurable on CPU
    assert (row["tp"], row["ep"], row["timing_mode"], row["latency_s_median"]) == (tp, ep, None, None)


def test_memory_run_attention_is_causal_gqa_on_4d_inputs(monkeypatch):
    """The memory forward hands SDPA 4-D [1, heads, T, d] tensors (3-D ones send CUDA to the math
    kernel, which materialises the T x T scores) and equals per-head causal attention."""
    import torch
    import torch.nn.functional as F
    shapes = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda q, *a, **kw: shapes.append(q.shape) or sdpa(q, *a, **kw))
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(5, h, 8, generator=gen) for h in (4, 2, 2))
    out = memory_run.causal_attention(q, k, v)
    assert shapes == [torch.Size([1, 4, 5, 8])] and out.shape == (5, 4, 8)
    for head in range(4):                          # query heads 0-1 share KV head 0, 2-3 KV head 1
        s = (q[:, head] @ k[:, head // 2].T) / 8 ** 0.5
        s = s.masked_fill(torch.triu(torch.ones(5, 5, dtype=torch.bool), 1), float("-inf"))
        assert torch.allclose(out[:, head], s.softmax(-1) @ v[:, head // 2], atol=1e-5)
