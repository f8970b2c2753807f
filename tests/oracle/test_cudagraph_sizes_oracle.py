"""Capture sizes vs vLLM 0.33 itself: `VllmConfig._set_cudagraph_sizes` run on a real
`CompilationConfig` (CPU: no model, no GPU; the platform is not datacenter Blackwell, so the
default ceiling is 512 = our sm_version 90). The stand-in VllmConfig carries only the
attributes that method reads: model_config.enforce_eager, compilation_config,
scheduler_config.max_num_seqs / max_num_batched_tokens, uniform_decode_query_len,
speculative_config (None: no dynamic tiers) and performance_mode.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from simulator.cuda_graph import CudaGraphConfig

PAPER = [1, 2, 4, 8, 16, 32, 64]
CASES = [  # max_num_seqs, max_num_batched_tokens, capture sizes, max capture size, num_spec_tokens
    (1024, 8192, None, None, 0), (256, 8192, None, None, 0), (100, 8192, None, None, 0),
    (256, 300, None, None, 0), (64, 8192, None, None, 0), (256, 8192, None, None, 2),
    (1024, 8192, PAPER, None, 0), (1024, 8192, [64, 1, 2, 4, 8, 16, 32, 64], None, 0),
    (1024, 40, PAPER, None, 0), (64, 8192, [1000, 3, 2000], None, 0), (8, 8192, PAPER, 64, 0),
    (256, 8192, None, 100, 0), (256, 8192, None, 2048, 0), (1024, 8192, None, 8192, 0),
    (256, 520, None, 600, 0), (256, 8192, None, 1, 0), (256, 8192, None, 100, 3),
    (256, 8192, PAPER, None, 3), (16, 8192, None, 4, 1),
]


def _vllm(max_num_seqs, max_num_batched_tokens, sizes, max_size, num_spec_tokens, mode="FULL_AND_PIECEWISE",
          performance_mode="balanced"):
    from vllm.config import CompilationConfig, VllmConfig
    from vllm.config.compilation import CUDAGraphMode

    kw = {"cudagraph_mode": CUDAGraphMode[mode]}
    if sizes is not None:
        kw["cudagraph_capture_sizes"] = list(sizes)
    if max_size is not None:
        kw["max_cudagraph_capture_size"] = max_size
    cc = CompilationConfig(**kw)
    fake = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False), compilation_config=cc,
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens),
        uniform_decode_query_len=1 + num_spec_tokens, speculative_config=None, performance_mode=performance_mode)
    VllmConfig._set_cudagraph_sizes(fake)
    return tuple(cc.cudagraph_capture_sizes), cc.max_cudagraph_capture_size


@pytest.mark.parametrize("seqs,tokens,sizes,max_size,spec", CASES)
def test_capture_sizes_equal_vllm(seqs, tokens, sizes, max_size, spec):
    want, want_max = _vllm(seqs, tokens, sizes, max_size, spec)
    ours = CudaGraphConfig.from_vllm(seqs, tokens, sm_version=90, num_spec_tokens=spec,
                                     cudagraph_capture_sizes=None if sizes is None else tuple(sizes),
                                     max_cudagraph_capture_size=max_size)
    assert ours.capture_sizes == want
    assert ours.max_capture_size == want_max


@pytest.mark.parametrize("seqs,tokens,sizes,max_size,spec", CASES)
def test_interactivity_capture_sizes_equal_vllm(seqs, tokens, sizes, max_size, spec):
    """--performance-mode interactivity: every size 1..32 first (user-given sizes unchanged)."""
    want, want_max = _vllm(seqs, tokens, sizes, max_size, spec, performance_mode="interactivity")
    ours = CudaGraphConfig.from_vllm(seqs, tokens, sm_version=90, num_spec_tokens=spec,
                                     cudagraph_capture_sizes=None if sizes is None else tuple(sizes),
                                     max_cudagraph_capture_size=max_size, interactivity=True)
    assert (ours.capture_sizes, ours.max_capture_size) == (want, want_max)


@pytest.mark.parametrize("seqs,tokens,sizes,max_size", [
    (256, 8192, [1, 2, 4], 8),          # max above the largest size
    (256, 8192, [2000], 600),           # max below it
    (1024, 40, PAPER, 64),              # 64 dropped by max_num_batched_tokens: largest kept is 32
])
def test_inconsistent_max_refused_like_vllm(seqs, tokens, sizes, max_size):
    with pytest.raises(ValueError, match="should be consistent") as vllm_error:
        _vllm(seqs, tokens, sizes, max_size, 0)
    with pytest.raises(ValueError) as ours:
        CudaGraphConfig.from_vllm(seqs, tokens, cudagraph_capture_sizes=tuple(sizes),
                                  max_cudagraph_capture_size=max_size)
    assert str(ours.value).startswith(str(vllm_error.value))


def test_mode_none_captures_nothing_like_vllm():
    assert _vllm(256, 8192, PAPER, None, 0, mode="NONE") == ((), 0)
    cg = CudaGraphConfig.from_vllm(256, 8192, cudagraph_capture_sizes=tuple(PAPER), cudagraph_mode="NONE")
    assert cg.capture_sizes == () and cg.max_capture_size == 0


def test_zero_max_refused_by_vllm_and_by_us():
    with pytest.raises(AssertionError, match="greater than or equal to 1"):
        _vllm(256, 8192, None, 0, 0)
    with pytest.raises(ValueError, match="--max-cudagraph-capture-size must be a positive integer, got 0"):
        CudaGraphConfig.from_vllm(256, 8192, max_cudagraph_capture_size=0)


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_optimization_level_mode_equals_vllm(level):
    from vllm.config.vllm import OPTIMIZATION_LEVEL_TO_CONFIG, OptimizationLevel

    from simulator.engine_args import EngineArgs

    want = OPTIMIZATION_LEVEL_TO_CONFIG[OptimizationLevel(level)]["compilation_config"]["cudagraph_mode"]
    assert EngineArgs(optimization_level=level).effective_cudagraph_mode == want.name


@pytest.mark.parametrize("user_max", [None, 256])
def test_gpt_oss_capture_override_like_vllm(user_max):
    # vLLM's GptOssForCausalLMConfig hook runs before _set_cudagraph_sizes: with neither capture
    # flag it sets max_cudagraph_capture_size 1024 (a user's value wins)
    from vllm.config import CompilationConfig, VllmConfig
    from vllm.config.compilation import CUDAGraphMode
    from vllm.model_executor.models.config import MODELS_CONFIG_MAP

    from simulator.engine_args import EngineArgs
    from simulator.simulation import resolve_engine

    cc = CompilationConfig(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE,
                           **({} if user_max is None else {"max_cudagraph_capture_size": user_max}))
    MODELS_CONFIG_MAP["GptOssForCausalLM"].verify_and_update_config(
        SimpleNamespace(structured_outputs_config=SimpleNamespace(reasoning_parser=""), compilation_config=cc))
    fake = SimpleNamespace(
        model_config=SimpleNamespace(enforce_eager=False), compilation_config=cc,
        scheduler_config=SimpleNamespace(max_num_seqs=1024, max_num_batched_tokens=8192),
        uniform_decode_query_len=1, speculative_config=None, performance_mode="balanced")
    VllmConfig._set_cudagraph_sizes(fake)
    resolved = resolve_engine(EngineArgs(model="openai/gpt-oss-120b", gpu="H200", max_cudagraph_capture_size=user_max))
    assert (resolved.max_num_seqs, resolved.max_num_batched_tokens) == (1024, 8192)
    ours = resolved.cudagraph_config()
    assert ours.capture_sizes == tuple(cc.cudagraph_capture_sizes)
    assert ours.max_capture_size == cc.max_cudagraph_capture_size == (user_max or 1024)
    llama = resolve_engine(EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H200")).cudagraph_config()
    assert llama.max_capture_size == 512          # no hook for LlamaForCausalLM
