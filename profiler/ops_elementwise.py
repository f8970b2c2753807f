"""Elementwise family: the memory-bound ops of one layer on one rank.

    rms_norm            x[T, h] -> x * rsqrt(mean(x^2) + eps) * w              width h
    fused_add_rms_norm  r += x; x = rms_norm(r)                                  width h
    rotary_embedding    q[T, H/tp, d], k[T, KV/tp, d] rotated (NeoX halves)      width (H+KV)/tp * d
    silu_and_mul        [T, 2 I/tp] -> silu(g) * u, [T, I/tp]                    width I/tp
    kv_cache_write      k, v [T, KV/tp, d] into a paged cache by slot            width 2 KV/tp d

Rows carry op_name, num_tokens, hidden_size (= the op's width above) and dtype. Attention rows
(scope "kernel") already include the KV write; kv_cache_write is here to price it alone.
Backend "torch": the unfused torch expressions above; "vllm": vLLM's fused CUDA kernels
(profiler/backend_vllm.py). Rows name the backend and kernel.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from profiler.backends import runner_for
from profiler.context import RankContext, common_row
from profiler.grid import SweepGrid
from profiler.timing import time_both

FAMILY = "elementwise"
COLUMNS = ("op_name", "num_tokens", "hidden_size", "dtype")


def op_widths(ctx: RankContext) -> list[tuple[str, int]]:
    m, d = ctx.model, ctx.model.head_dim
    ops = [("rms_norm", m.hidden_size), ("fused_add_rms_norm", m.hidden_size),
           ("rotary_embedding", (ctx.heads_per_rank + ctx.kv_heads_per_rank) * d)]
    inter = m.intermediate_size or m.moe_intermediate_size
    ops.append(("silu_and_mul", -(-inter // ctx.parallel.tp)))
    ops.append(("kv_cache_write", 2 * ctx.kv_heads_per_rank * d))
    return ops


def build_points(ctx: RankContext, grid: SweepGrid) -> list[dict[str, Any]]:
    return [{"op_name": name, "num_tokens": t, "hidden_size": w}
            for name, w in op_widths(ctx) for t in grid.elementwise_tokens]


def _build(ctx: RankContext, name: str, tokens: int, width: int) -> Callable[[], object]:
    dev, dt = ctx.torch_device, ctx.torch_dtype
    gen = ctx.generator()

    def rand(*shape: int) -> torch.Tensor:
        return ctx.randn(gen, *shape)

    if name in ("rms_norm", "fused_add_rms_norm"):
        x, r, w = rand(tokens, width), rand(tokens, width), rand(width)
        if name == "rms_norm":
            return lambda: F.rms_norm(x, (width,), w, 1e-6)
        return lambda: F.rms_norm(r.add_(x), (width,), w, 1e-6)
    if name == "rotary_embedding":
        d, heads = ctx.model.head_dim, ctx.heads_per_rank + ctx.kv_heads_per_rank
        qk = rand(tokens, heads, d)
        cos_sin = rand(max(tokens, 4096), d)  # positions drawn from a 4k-row cos/sin cache
        pos = torch.randint(0, cos_sin.shape[0], (tokens,), generator=gen, device=dev)

        def rope() -> None:
            cos, sin = cos_sin[pos].chunk(2, dim=-1)
            x1, x2 = qk[..., : d // 2], qk[..., d // 2:]
            qk.copy_(torch.cat((x1 * cos[:, None] - x2 * sin[:, None], x2 * cos[:, None] + x1 * sin[:, None]), -1))
        return rope
    if name == "silu_and_mul":
        x = rand(tokens, 2 * width)
        return lambda: F.silu(x[:, :width]) * x[:, width:]
    if name == "kv_cache_write":
        kv = rand(tokens, width)
        cache = torch.zeros(2 * tokens + 16, width, device=dev, dtype=dt)
        slots = torch.randperm(2 * tokens + 16, generator=gen, device=dev)[:tokens]
        return lambda: cache.index_copy_(0, slots, kv)
    raise ValueError(f"unknown elementwise op {name!r}; valid: {', '.join(n for n, _ in op_widths(ctx))}")


def run_point(ctx: RankContext, point: dict[str, Any], backend: str = "torch") -> list[dict[str, Any]]:
    runner = runner_for(FAMILY, backend)
    if runner is None:
        backend, kernel = "torch", f"torch {point['op_name']} (unfused)"
        fn = _build(ctx, point["op_name"], point["num_tokens"], point["hidden_size"])
    else:
        fn, kernel = runner(ctx, point)
    rows = []
    for timing in time_both(fn, ctx.torch_device, ctx.timing, cold_l2=False):
        row = common_row(ctx, FAMILY, timing, backend, kernel)
        row.update(op_name=point["op_name"], num_tokens=point["num_tokens"], hidden_size=point["hidden_size"],
                   dtype=ctx.dtype)
        rows.append(row)
    return rows
