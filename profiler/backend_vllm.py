"""vLLM's own kernels as profiler runners (backend "vllm"; CUDA only, see backends.py).

Signatures are those of vLLM 0.33 (read from its source: vllm/_custom_ops.py,
vllm/model_executor/layers/fused_moe/fused_moe.py, vllm/vllm_flash_attn/flash_attn_interface.py,
vllm/v1/attention/backends/flash_attn.py). Each runner builds the same shapes as the torch
path of its ops module and returns ``(callable, kernel name)``:

    elementwise  rms_norm(out, x, w, eps)                    fused_add_rms_norm(x, residual, w, eps)
                 rotary_embedding(pos, q, k, d, cos_sin, is_neox=True)
                 torch.ops._C.silu_and_mul(out, x)           reshape_and_cache_flash(k, v, kc, vc, slots, "auto", 1, 1)
    attention    reshape_and_cache_flash, then ONE flash_attn_varlen_func over the whole batch on the
                 paged cache (block_table, seqused_k, causal), FA version as vLLM picks it
    moe          fused_experts(x, w13, w2, topk_weights, topk_ids, global_num_experts=E,
                 expert_map=local ids or -1) on the point's routing (ops_moe.topk_ids)

Importing this module imports vllm: only backends.runner_for does, after check_backend.
Not yet run on a GPU in this repository (no CUDA machine in CI): scripts/profile_h200.sh runs it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from profiler.context import RankContext
from profiler.ops_attention import paged_batch
from profiler.ops_moe import topk_ids

_EPS = 1e-6


def _ops():
    from vllm import _custom_ops as ops
    return ops


def elementwise(ctx: RankContext, point: dict[str, Any]) -> tuple[Callable[[], object], str]:
    """One elementwise point (profiler/ops_elementwise.py shapes) on vLLM's CUDA kernel."""
    ops, name, tokens, width = _ops(), point["op_name"], point["num_tokens"], point["hidden_size"]
    gen, dev, dt = ctx.generator(), ctx.torch_device, ctx.torch_dtype

    def rand(*shape: int) -> torch.Tensor:
        return ctx.randn(gen, *shape)

    if name == "rms_norm":
        x, w, out = rand(tokens, width), rand(width), torch.empty(tokens, width, device=dev, dtype=dt)
        return (lambda: ops.rms_norm(out, x, w, _EPS)), "vllm _C.rms_norm"
    if name == "fused_add_rms_norm":
        x, r, w = rand(tokens, width), rand(tokens, width), rand(width)
        return (lambda: ops.fused_add_rms_norm(x, r, w, _EPS)), "vllm _C.fused_add_rms_norm"
    if name == "rotary_embedding":
        d = ctx.model.head_dim
        q, k = rand(tokens, ctx.heads_per_rank * d), rand(tokens, ctx.kv_heads_per_rank * d)
        cos_sin = rand(max(tokens, 4096), d)  # [positions, rot_dim = d]: cos half || sin half
        pos = torch.randint(0, cos_sin.shape[0], (tokens,), generator=gen, device=dev)
        return (lambda: ops.rotary_embedding(pos, q, k, d, cos_sin, True)), "vllm _C.rotary_embedding (neox)"
    if name == "silu_and_mul":
        x, out = rand(tokens, 2 * width), torch.empty(tokens, width, device=dev, dtype=dt)
        return (lambda: torch.ops._C.silu_and_mul(out, x)), "vllm _C.silu_and_mul"
    if name == "kv_cache_write":
        kv, d, bs = ctx.kv_heads_per_rank, ctx.model.head_dim, 16
        k, v = rand(tokens, kv, d), rand(tokens, kv, d)
        blocks = -(-(2 * tokens + 16) // bs)
        k_cache = torch.zeros(blocks, bs, kv, d, device=dev, dtype=dt)
        v_cache = torch.zeros_like(k_cache)
        slots = torch.randperm(blocks * bs, generator=gen, device=dev)[:tokens]
        one = torch.ones((), device=dev, dtype=torch.float32)
        return (lambda: ops.reshape_and_cache_flash(k, v, k_cache, v_cache, slots, "auto", one, one),
                "vllm _C_cache_ops.reshape_and_cache_flash")
    raise ValueError(f"unknown elementwise op {name!r}; valid: rms_norm, fused_add_rms_norm, rotary_embedding, "
                     "silu_and_mul, kv_cache_write")


def attention(ctx: RankContext, point: dict[str, Any]) -> tuple[Callable[[], object], str]:
    """KV write + one varlen flash-attention call over the mixed batch, as vLLM's FLASH_ATTN
    backend runs a layer (prefill requests have no cached prefix here)."""
    from vllm.v1.attention.backends.fa_utils import get_flash_attn_version
    from vllm.vllm_flash_attn import flash_attn_varlen_func

    ops, b, dev = _ops(), paged_batch(ctx, point), ctx.torch_device
    d = ctx.model.head_dim
    version = get_flash_attn_version(head_size=d, kv_cache_block_size=b.block_size)
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(b.q_lens)]), dtype=torch.int32, device=dev)
    seqused_k = torch.tensor(b.kv_lens, dtype=torch.int32, device=dev)
    one = torch.ones((), device=dev, dtype=torch.float32)

    def fn() -> None:
        ops.reshape_and_cache_flash(b.k_new, b.v_new, b.k_cache, b.v_cache, b.slot_mapping, "auto", one, one)
        flash_attn_varlen_func(q=b.q, k=b.k_cache, v=b.v_cache, out=b.out, cu_seqlens_q=cu_q,
                               max_seqlen_q=max(b.q_lens), seqused_k=seqused_k, max_seqlen_k=max(b.kv_lens),
                               softmax_scale=d ** -0.5, causal=True, block_table=b.block_table,
                               fa_version=version)

    return fn, f"vllm reshape_and_cache_flash + flash_attn_varlen_func (FA{version}, paged)"


def moe(ctx: RankContext, point: dict[str, Any]) -> tuple[Callable[[], object], str]:
    """The local experts of one rank through vLLM's fused_experts (Triton fused MoE)."""
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts

    m, dev = ctx.model, ctx.torch_device
    h, inter = m.hidden_size, -(-m.moe_intermediate_size // ctx.parallel.moe_tp)
    counts, tokens, k = point["tokens_per_expert"], point["num_tokens"], m.num_experts_per_tok
    gen = ctx.generator()
    w13 = ctx.randn(gen, len(counts), 2 * inter, h, scale=h ** -0.5)
    w2 = ctx.randn(gen, len(counts), h, inter, scale=inter ** -0.5)
    x = ctx.randn(gen, tokens, h)
    ids = torch.tensor(topk_ids(tokens, k, m.num_experts, counts), dtype=torch.int32, device=dev)
    weights = torch.full((tokens, k), 1.0 / k, dtype=torch.float32, device=dev)
    expert_map = None
    if len(counts) < m.num_experts:   # EP: global id -> local index, -1 for the other ranks' experts
        expert_map = torch.full((m.num_experts,), -1, dtype=torch.int32, device=dev)
        expert_map[: len(counts)] = torch.arange(len(counts), dtype=torch.int32, device=dev)

    def fn() -> None:
        fused_experts(x, w13, w2, weights, ids, global_num_experts=m.num_experts, expert_map=expert_map)

    return fn, "vllm fused_experts (triton fused_moe)"
