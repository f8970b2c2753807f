"""Backend selection, one-line errors and row labelling; the CUDA kernels themselves are skipped
(no GPU here): their shape helpers (routing ids, FlashInfer page tables) are checked on the CPU."""

import sys
import types

import numpy as np
import pytest

from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from profiler import backend_flashinfer, backend_vllm, backends, memory_run, ops_elementwise, ops_linear, ops_moe
from profiler.context import RankContext
from profiler.grid import SweepGrid
from profiler.ops_attention import paged_batch


def ctx_for(config, fast_timing, tp=1, ep=1):
    return RankContext(load_model_spec(config), ParallelSpec(tp=tp, ep=ep), timing=fast_timing)


@pytest.mark.parametrize("backend, device, families, message", [
    ("triton", "cpu", None, "unknown backend 'triton'; valid: torch, flashinfer, vllm"),
    ("vllm", "cpu", None, "backend 'vllm' needs --device cuda; on cpu use torch"),
    ("flashinfer", "cpu", None, "backend 'flashinfer' needs --device cuda; on cpu use torch"),
    ("vllm", "cuda", ["linear", "memory"],
     "backend 'vllm' has kernels for elementwise, attention, moe, none of --families linear,memory; "
     "use --backend torch"),
    ("flashinfer", "cuda:1", ["moe"], "backend 'flashinfer' has kernels for attention, none of --families moe; "
                                      "use --backend torch"),
])
def test_check_backend_one_line_errors(monkeypatch, backend, device, families, message):
    monkeypatch.setattr(backends, "installed", lambda b: True)
    with pytest.raises(ValueError) as err:
        backends.check_backend(backend, device, families)
    assert str(err.value) == message


def test_missing_package_is_refused_and_torch_always_passes(monkeypatch):
    monkeypatch.setattr(backends.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match=r"^backend 'flashinfer' is not installed \(pip install flashinfer\); "
                                         r"valid here: torch$"):
        backends.check_backend("flashinfer", "cuda", ["attention"])
    backends.check_backend("torch", "cpu", ["linear"])
    assert backends.installed("torch")


def test_runners_per_family_and_backend():
    assert backends.runner_for("elementwise", "vllm") is backend_vllm.elementwise
    assert backends.runner_for("attention", "vllm") is backend_vllm.attention
    assert backends.runner_for("moe", "vllm") is backend_vllm.moe
    assert backends.runner_for("attention", "flashinfer") is backend_flashinfer.attention
    assert [backends.runner_for(f, "torch") for f in ("linear", "attention", "moe", "elementwise")] == [None] * 4
    assert backends.runner_for("linear", "vllm") is None and backends.runner_for("moe", "flashinfer") is None
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        backends.runner_for("linear", "cuda")


def test_rows_name_the_backend_and_kernel_that_ran(monkeypatch, dense_config, fast_timing):
    """A backend runner's rows carry its name and kernel; families it lacks run torch and say so."""
    calls = []

    def fake(ctx, point):
        calls.append(point["op_name"])
        return (lambda: None), f"fake {point['op_name']} kernel"

    monkeypatch.setitem(sys.modules, "fake_backend", types.SimpleNamespace(elementwise=fake))
    monkeypatch.setitem(backends.RUNNERS, ("elementwise", "vllm"), "fake_backend:elementwise")
    ctx = ctx_for(dense_config, fast_timing)
    point = ops_elementwise.build_points(ctx, SweepGrid(elementwise_tokens=(8,)))[0]
    rows = ops_elementwise.run_point(ctx, point, "vllm")
    assert calls == ["rms_norm"]
    assert [(r["backend"], r["kernel_source"]) for r in rows] == [
        ("vllm", "fake rms_norm kernel [cpu_fastest20]"), ("vllm", "fake rms_norm kernel [cpu_wall]")]
    linear = ops_linear.run_point(ctx, ops_linear.build_points(ctx, SweepGrid(linear_tokens=(1,)))[0], "vllm")
    assert {r["backend"] for r in linear} == {"torch"} and linear[0]["kernel_source"].startswith("aten::mm (cpu)")
    [mem] = memory_run.run_point(ctx, {"max_num_batched_tokens": 8}, "vllm")
    assert mem["backend"] == "torch"


@pytest.mark.parametrize("tp, ep", [(1, 1), (2, 2)])
def test_topk_ids_reproduce_the_points_loads(moe_config, fast_timing, tp, ep):
    ctx = ctx_for(moe_config, fast_timing, tp=tp, ep=ep)
    m = ctx.model
    for p in ops_moe.build_points(ctx, SweepGrid(moe_tokens=(4, 32, 64))):
        ids = ops_moe.topk_ids(p["num_tokens"], m.num_experts_per_tok, m.num_experts, p["tokens_per_expert"])
        local = len(p["tokens_per_expert"])
        assert ids.shape == (p["num_tokens"], m.num_experts_per_tok)
        assert np.bincount(ids[ids < local], minlength=local).tolist() == p["tokens_per_expert"]
        assert all(len(set(row)) == len(row) for row in ids.tolist()) and ids.min() >= 0 and ids.max() < m.num_experts


def test_topk_ids_refuses_loads_no_routing_has():
    with pytest.raises(ValueError, match=r"tokens_per_expert \[3, 0\] cannot be routed as 2 tokens x top-1"):
        ops_moe.topk_ids(2, 1, 2, [3, 0])


def test_flashinfer_page_tables_follow_the_paged_batch(dense_config, fast_timing):
    ctx = ctx_for(dense_config, fast_timing)
    b = paged_batch(ctx, {"op_name": "mixed", "prefill_len": [5, 20], "decode_ctx": [33, 7], "block_size": 16})
    assert b.q_lens == (5, 20, 1, 1) and b.kv_lens == (5, 20, 33, 7)
    assert b.block_table.tolist() == [[0, 0, 0], [1, 2, 0], [3, 4, 5], [6, 0, 0]]
    indptr, indices, last = backend_flashinfer.page_tables(b, range(0, 2))
    assert (indptr.tolist(), indices.tolist(), last.tolist()) == ([0, 1, 3], [0, 1, 2], [5, 4])
    indptr, indices, last = backend_flashinfer.page_tables(b, range(2, 4))
    assert (indptr.tolist(), indices.tolist(), last.tolist()) == ([0, 3, 4], [3, 4, 5, 6], [1, 7])
