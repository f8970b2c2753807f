"""Sliding-window layers price only the keys inside their window (batch_engine.window_pieces)."""

from __future__ import annotations

import dataclasses

from simulator.batch_engine import BatchShape, window_pieces
from test_step_pricing_fast_paths import LLAMA_8B, engine


def _keys(new: tuple[int, ...], ctx: tuple[int, ...]) -> int:
    """Keys attended summed over queries, as the op counts them: query j of a piece on X context
    tokens attends X + j + 1 keys."""
    return sum(n * c + n * (n + 1) // 2 for n, c in zip(new, ctx))


def test_decodes_clip_to_the_window() -> None:
    assert window_pieces((1, 1, 1), (5, 127, 500), 128) == ((1, 1, 1), (5, 127, 127))


def test_prefill_splits_into_window_pieces() -> None:
    # a chunk ending inside the first window is exact
    assert window_pieces((100,), (10,), 128) == ((100,), (10,))
    # 300 tokens from position 0: pieces of 128, 128, 44; later pieces sit on w - (L + 1) // 2
    assert window_pieces((300,), (0,), 128) == ((128, 128, 44), (0, 64, 106))
    # a chunk deep into a long prompt: every piece past the first window
    assert window_pieces((256,), (4000,), 128) == ((128, 128), (64, 64))
    # mixed step: the decode stays one entry, the prefill is split
    assert window_pieces((1, 200), (900, 0), 128) == ((1, 128, 72), (127, 0, 92))


def test_pieces_keep_the_keys_per_query() -> None:
    # exact: a query at position p attends min(p + 1, window) keys
    for n, c, w in [(300, 0, 128), (8192, 0, 128), (1000, 50, 128), (5000, 7000, 4096), (4096, 0, 4096)]:
        exact = sum(min(p + 1, w) for p in range(c, c + n))
        approx = _keys(*window_pieces((n,), (c,), w))
        assert abs(approx / exact - 1) < 0.005, (n, c, w, approx, exact)
        assert sum(window_pieces((n,), (c,), w)[0]) == n


def test_sliding_layers_scale_linearly_in_a_long_prefill() -> None:
    hybrid = dataclasses.replace(LLAMA_8B, sliding_window=128, num_sliding_layers=16)
    e = engine(hybrid)
    (full, n_full), (slid, n_slid) = e.attention_ops(BatchShape((8192,), (0,)))
    assert (n_full, n_slid) == (16, 16)
    assert full.prefill_new == (8192,) and full.prefill_ctx == (0,)
    assert slid.prefill_new == (128,) * 64 and slid.prefill_ctx == (0,) + (64,) * 63
    # the full layers' work grows ~4x from 4k to 8k tokens, the sliding layers' 2x
    (full4, _), (slid4, _) = e.attention_ops(BatchShape((4096,), (0,)))
    assert 3.9 < full.flops / full4.flops < 4.1
    assert 2.0 < slid.flops / slid4.flops < 2.02   # the first piece (causal from 0) is cheaper


def test_chunk_pieces_split_at_chunk_boundaries() -> None:
    from simulator.batch_engine import chunk_pieces
    # decodes see their own chunk only: positions 5, 127, 128, 500 in chunks of 128
    assert chunk_pieces((1, 1, 1, 1), (5, 127, 128, 500), 128) == ((1, 1, 1, 1), (5, 127, 0, 116))
    # a prefill from 0: one piece per chunk, each on no context; one from 100 crosses at 128 and 256
    assert chunk_pieces((300,), (0,), 128) == ((128, 128, 44), (0, 0, 0))
    assert chunk_pieces((200,), (100,), 128) == ((28, 128, 44), (100, 0, 0))
    # exact: a query at position p attends p % chunk + 1 keys
    for n, c, k in [(300, 0, 128), (8192, 50, 8192), (20000, 7000, 8192), (1, 16384, 8192)]:
        assert _keys(*chunk_pieces((n,), (c,), k)) == sum(p % k + 1 for p in range(c, c + n))


def test_chunked_layers_are_priced_on_their_chunk() -> None:
    # a Llama-4-like model: 3 of every 4 layers chunked (8192 tokens); a decode at 10,000 tokens of
    # context costs its NoPE layers 10,000 keys and its chunked layers 10,000 % 8192 = 1,808
    chunked = dataclasses.replace(LLAMA_8B, attention_chunk_size=8192,
                                  chunked_layer_flags=tuple((i + 1) % 4 != 0 for i in range(32)))
    ops = engine(chunked).attention_ops(BatchShape((1,), (10000,)))
    assert [(op.decode_ctx, n) for op, n in ops] == [((10000,), 8), ((1808,), 24)]
