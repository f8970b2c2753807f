"""FlashInfer's paged attention as a profiler runner (backend "flashinfer"; CUDA only).

One point = KV write + BatchPrefillWithPagedKVCacheWrapper (causal) over the prefill
requests + BatchDecodeWithPagedKVCacheWrapper over the decode requests, on the same NHD
paged cache as ops_attention (``(k_cache, v_cache)``, each [pages, page_size, kv heads, d]).
The wrappers are planned once outside the timed call: vLLM plans once per step, not per layer.
The KV write is vLLM's reshape_and_cache_flash when vllm imports (as vLLM's FLASHINFER
backend runs it), else torch ``index_copy_``; the kernel name says which.

API as read from the flashinfer-python 0.7.4 wheel (flashinfer/prefill.py, decode.py):
``Wrapper(float_workspace_buffer, kv_layout="NHD", ...)``; prefill ``plan(qo_indptr,
paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads, num_kv_heads,
head_dim_qk, page_size, causal=..., q_data_type=..., kv_data_type=...)``; decode ``plan(indptr,
indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, q_data_type=...,
kv_data_type=...)``; ``run(q, paged_kv_cache, out=...)``. Other versions may differ. Not yet run
on a GPU in this repository (no CUDA machine in CI): scripts/profile_h200.sh runs it.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable

import numpy as np
import torch

from profiler.context import RankContext
from profiler.ops_attention import PagedBatch, paged_batch

WORKSPACE_BYTES = 128 << 20   # FlashInfer's recommended float workspace


def page_tables(b: PagedBatch, rows: range) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kv_indptr, kv_indices, last_page_len) of requests `rows` in FlashInfer's CSR form."""
    pages = [-(-b.kv_lens[r] // b.block_size) for r in rows]
    table = b.block_table.cpu().numpy()
    indices = np.concatenate([table[r, :n] for r, n in zip(rows, pages)]) if pages else np.zeros(0, np.int32)
    last = [b.kv_lens[r] - (n - 1) * b.block_size for r, n in zip(rows, pages)]
    return (np.concatenate([[0], np.cumsum(pages)]).astype(np.int32), indices.astype(np.int32),
            np.asarray(last, dtype=np.int32))


def attention(ctx: RankContext, point: dict[str, Any]) -> tuple[Callable[[], object], str]:
    """KV write + FlashInfer prefill and decode wrappers over one mixed batch."""
    import flashinfer

    b, dev, dt = paged_batch(ctx, point), ctx.torch_device, ctx.torch_dtype
    heads, kv, d, n_pre = ctx.heads_per_rank, ctx.kv_heads_per_rank, ctx.model.head_dim, b.num_prefill
    n_pre_tok = sum(b.q_lens[:n_pre])
    cache = (b.k_cache, b.v_cache)

    def i32(a: np.ndarray) -> torch.Tensor:
        return torch.tensor(a, dtype=torch.int32, device=dev)

    runs: list[Callable[[], object]] = []
    names = []
    if n_pre:
        indptr, indices, last = page_tables(b, range(n_pre))
        pre = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev), "NHD")
        pre.plan(i32(np.concatenate([[0], np.cumsum(b.q_lens[:n_pre])])), i32(indptr), i32(indices), i32(last),
                 heads, kv, d, b.block_size, causal=True, q_data_type=dt, kv_data_type=dt)
        q, out = b.q[:n_pre_tok], b.out[:n_pre_tok]
        runs.append(lambda: pre.run(q, cache, out=out))
        names.append("BatchPrefillWithPagedKVCacheWrapper")
    if len(b.q_lens) > n_pre:
        indptr, indices, last = page_tables(b, range(n_pre, len(b.q_lens)))
        dec = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev), "NHD", use_tensor_cores=heads // kv >= 4)
        dec.plan(i32(indptr), i32(indices), i32(last), heads, kv, d, b.block_size, q_data_type=dt, kv_data_type=dt)
        qd, outd = b.q[n_pre_tok:], b.out[n_pre_tok:]
        runs.append(lambda: dec.run(qd, cache, out=outd))
        names.append("BatchDecodeWithPagedKVCacheWrapper")
    write, write_name = _kv_write(b)

    def fn() -> None:
        write()
        for run in runs:
            run()

    return fn, f"{write_name} + flashinfer {' + '.join(names)} (NHD paged)"


def _kv_write(b: PagedBatch) -> tuple[Callable[[], object], str]:
    if importlib.util.find_spec("vllm") is not None:
        from vllm import _custom_ops as ops
        one = torch.ones((), device=b.k_new.device, dtype=torch.float32)
        return (lambda: ops.reshape_and_cache_flash(b.k_new, b.v_new, b.k_cache, b.v_cache, b.slot_mapping,
                                                    "auto", one, one)), "vllm reshape_and_cache_flash"
    kv, d = b.k_new.shape[1], b.k_new.shape[2]
    flat_k, flat_v = b.k_cache.view(-1, kv, d), b.v_cache.view(-1, kv, d)

    def write() -> None:
        flat_k.index_copy_(0, b.slot_mapping, b.k_new)
        flat_v.index_copy_(0, b.slot_mapping, b.v_new)
    return write, "index_copy kv write"
