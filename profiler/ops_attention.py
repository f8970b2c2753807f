"""Attention family: one layer's attention on one rank over a mixed batch, with the KV write.

A point is a batch: prefill requests (new-token counts, no cached prefix) and decode requests
(KV length incl. the new token), drawn deterministically from the grid and a seed. The KV cache
is paged, vLLM-style::

    k_cache, v_cache: [num_blocks, block_size, kv_heads, head_dim]
    block_table[r]  : the blocks of request r, in order   (token t of r -> block t // bs, slot t % bs)
    slot_mapping    : flat slot of every new token        (block_table[r][t // bs] * bs + t % bs)

Backend "torch" (always): KV write by ``index_copy_`` into the flat cache; prefill by a
per-request loop of ``scaled_dot_product_attention(is_causal=True)`` (varlen); decode by
gathering the pages into a padded [B, kv_heads, S, d] tensor and one masked SDPA call (GQA
via ``enable_gqa``). Backends "vllm" (reshape_and_cache_flash + vLLM's flash-attn varlen) and
"flashinfer" (BatchPrefill/BatchDecode wrappers) run on the same `PagedBatch` (see backends.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from profiler.backends import runner_for
from profiler.context import RankContext, common_row
from profiler.grid import SweepGrid
from profiler.timing import time_both

FAMILY = "attention"


def _split(rng: np.random.Generator, total: int, n: int) -> list[int]:
    """n positive lengths summing to total, drawn around total / n."""
    weights = rng.uniform(0.5, 1.5, n)
    lengths = np.maximum(1, np.floor(total * weights / weights.sum()).astype(int))
    lengths[0] += total - int(lengths.sum())
    return [int(v) for v in lengths]


def _contexts(rng: np.random.Generator, batch: int, mean: int) -> list[int]:
    lo, hi = max(1, mean // 4), max(1, 7 * mean // 4)
    return [int(v) for v in rng.integers(lo, hi + 1, batch)]


def build_points(ctx: RankContext, grid: SweepGrid) -> list[dict[str, Any]]:
    """Prefill-only ("context"), decode-only ("generation") and "mixed" batches."""
    points: list[dict[str, Any]] = []

    def rng(*key: int) -> np.random.Generator:
        return np.random.default_rng([grid.seed, *key])

    for n in grid.attention_prefill_requests:
        for total in grid.attention_prefill_tokens:
            if total >= n:
                points.append({"op_name": "context", "prefill_len": _split(rng(1, n, total), total, n),
                               "decode_ctx": []})
    for batch in grid.attention_decode_batch:
        for mean in grid.attention_decode_ctx:
            points.append({"op_name": "generation", "prefill_len": [],
                           "decode_ctx": _contexts(rng(2, batch, mean), batch, mean)})
    if grid.attention_mixed:
        n, mean = grid.attention_prefill_requests[0], grid.attention_decode_ctx[0]
        for total in grid.attention_prefill_tokens:
            for batch in grid.attention_decode_batch:
                if total >= n:
                    points.append({"op_name": "mixed", "prefill_len": _split(rng(3, n, total), total, n),
                                   "decode_ctx": _contexts(rng(4, batch, mean), batch, mean)})
    for p in points:
        p["block_size"] = grid.block_size
    return points


def _stats(values: list[int], prefix: str) -> dict[str, Any]:
    if not values:
        return {f"{prefix}_min": 0, f"{prefix}_max": 0, f"{prefix}_mean": 0.0, f"{prefix}_p50": 0.0,
                f"{prefix}_p90": 0.0}
    a = np.asarray(values)
    return {f"{prefix}_min": int(a.min()), f"{prefix}_max": int(a.max()), f"{prefix}_mean": float(a.mean()),
            f"{prefix}_p50": float(np.percentile(a, 50)), f"{prefix}_p90": float(np.percentile(a, 90))}


@dataclass(frozen=True)
class PagedBatch:
    """The tensors of one batch on a vLLM-style paged cache (prefill requests first).

    q, out: [new tokens, heads, d]; k_new, v_new: [new tokens, kv heads, d] (written by the KV
    write); k_cache, v_cache: [blocks, block_size, kv heads, d]; slot_mapping: [new tokens]
    int64; block_table: [requests, max blocks] int32, zero-padded; q_lens / kv_lens: per
    request (prefill: its new tokens, no cached prefix; decode: 1 and its context).
    """

    q: torch.Tensor
    k_new: torch.Tensor
    v_new: torch.Tensor
    out: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    slot_mapping: torch.Tensor
    block_table: torch.Tensor
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    num_prefill: int
    block_size: int


def paged_batch(ctx: RankContext, point: dict[str, Any]) -> PagedBatch:
    """Draw one point's tensors (seeded): request r owns consecutive blocks, in request order."""
    dev, dt, bs = ctx.torch_device, ctx.torch_dtype, point["block_size"]
    heads, kv, d = ctx.heads_per_rank, ctx.kv_heads_per_rank, ctx.model.head_dim
    pre, dec = point["prefill_len"], point["decode_ctx"]
    kv_lens = list(pre) + list(dec)
    blocks = [-(-n // bs) for n in kv_lens]
    gen = ctx.generator()
    k_cache = ctx.randn(gen, sum(blocks), bs, kv, d)
    v_cache = ctx.randn(gen, sum(blocks), bs, kv, d)
    starts = np.concatenate([[0], np.cumsum(blocks)])[:-1]
    slots = [starts[r] * bs + t for r, n in enumerate(pre) for t in range(n)]
    slots += [starts[len(pre) + r] * bs + c - 1 for r, c in enumerate(dec)]
    slot_mapping = torch.tensor(slots, dtype=torch.long, device=dev)
    num_new = len(slots)
    q, k_new, v_new = ctx.randn(gen, num_new, heads, d), ctx.randn(gen, num_new, kv, d), ctx.randn(gen, num_new, kv, d)
    out = torch.empty(num_new, heads, d, device=dev, dtype=dt)
    width = max(blocks)
    table = [list(range(s, s + b)) + [0] * (width - b) for s, b in zip(starts.tolist(), blocks)]
    return PagedBatch(q, k_new, v_new, out, k_cache, v_cache, slot_mapping,
                      torch.tensor(table, dtype=torch.int32, device=dev), tuple(pre) + (1,) * len(dec),
                      tuple(kv_lens), len(pre), bs)


def torch_attention(ctx: RankContext, point: dict[str, Any]) -> tuple[Callable[[], None], dict[str, Any]]:
    """Build the tensors of one batch; return the callable that runs write + attention, and
    its tensors (q, out: [new tokens, heads, d] with prefill tokens first; k_cache, v_cache;
    table: decode block table)."""
    b = paged_batch(ctx, point)
    dev, bs, heads, kv = ctx.torch_device, b.block_size, ctx.heads_per_rank, ctx.kv_heads_per_rank
    pre, dec = point["prefill_len"], point["decode_ctx"]
    q, k_new, v_new, out, k_cache, v_cache = b.q, b.k_new, b.v_new, b.out, b.k_cache, b.v_cache
    slot_mapping = b.slot_mapping
    offsets = np.concatenate([[0], np.cumsum(pre)]).astype(int)
    if dec:
        width = max(-(-c // bs) for c in dec)
        table = b.block_table[len(pre):, :width].long()
        mask = (torch.arange(width * bs, device=dev)[None, :] < torch.tensor(dec, device=dev)[:, None])[:, None, None, :]
    flat_k, flat_v = k_cache.view(-1, kv, ctx.model.head_dim), v_cache.view(-1, kv, ctx.model.head_dim)
    gqa = heads != kv

    def fn() -> None:
        flat_k.index_copy_(0, slot_mapping, k_new)
        flat_v.index_copy_(0, slot_mapping, v_new)
        for r in range(len(pre)):  # varlen prefill: one causal SDPA per request
            a, b = int(offsets[r]), int(offsets[r + 1])
            o = F.scaled_dot_product_attention(q[a:b].transpose(0, 1)[None], k_new[a:b].transpose(0, 1)[None],
                                               v_new[a:b].transpose(0, 1)[None], is_causal=True, enable_gqa=gqa)
            out[a:b] = o[0].transpose(0, 1)
        if dec:
            a = int(offsets[-1])
            kd = k_cache[table].flatten(1, 2).transpose(1, 2)  # [B, kv, S, d]
            vd = v_cache[table].flatten(1, 2).transpose(1, 2)
            o = F.scaled_dot_product_attention(q[a:][:, :, None], kd, vd, attn_mask=mask, enable_gqa=gqa)
            out[a:] = o[:, :, 0]

    tensors = {"q": q, "out": out, "k_cache": k_cache, "v_cache": v_cache, "table": table if dec else None}
    return fn, tensors


def run_point(ctx: RankContext, point: dict[str, Any], backend: str = "torch") -> list[dict[str, Any]]:
    """Time one batch; a kernel row and a launch row."""
    runner = runner_for(FAMILY, backend)
    if runner is None:
        fn, _ = torch_attention(ctx, point)
        backend, kernel = "torch", "sdpa varlen loop + padded paged decode + index_copy kv write"
    else:
        fn, kernel = runner(ctx, point)
    pre, dec = point["prefill_len"], point["decode_ctx"]
    spec = {"op_name": point["op_name"], "scope": "kernel", "batch_size": len(pre) + len(dec),
            "num_prefill": len(pre), "num_decode": len(dec), "prefill_tokens": int(sum(pre)),
            "prefill_ctx_max": 0, "num_heads": ctx.heads_per_rank, "num_kv_heads": ctx.kv_heads_per_rank,
            "head_dim": ctx.model.head_dim, "window_size": 0, "attn_dtype": ctx.dtype, "kv_dtype": ctx.dtype,
            "is_mla": False, "kv_lora_rank": None, "q_lora_rank": None, "qk_nope_head_dim": None,
            "qk_rope_head_dim": None, "v_head_dim": None, "mla_gemm_dtype": None}
    spec.update(_stats(pre, "prefill_len"))
    spec.update(_stats(dec, "decode_ctx"))
    rows = []
    for timing in time_both(fn, ctx.torch_device, ctx.timing, cold_l2=True):
        row = common_row(ctx, FAMILY, timing, backend, kernel)
        row.update(spec)
        rows.append(row)
    return rows
