"""CUDA-graph capture sizes and dispatch, golden values from vLLM 0.33 _set_cudagraph_sizes / CudagraphDispatcher."""

import pytest

from simulator.cuda_graph import CudaGraphConfig

DEFAULT_51 = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))


def test_default_sizes_max_num_seqs_256_and_above():
    for seqs in (256, 512, 1024):
        cg = CudaGraphConfig.from_vllm(seqs, 8192, False, 90)
        assert cg.capture_sizes == DEFAULT_51
        assert len(cg.capture_sizes) == 51


def test_sizes_max_num_seqs_128():
    cg = CudaGraphConfig.from_vllm(128, 8192, False, 90)
    assert cg.capture_sizes == (1, 2, 4, *range(8, 257, 8))
    assert len(cg.capture_sizes) == 35


def test_off_stride_max_num_seqs_and_batched_tokens_are_appended():
    assert CudaGraphConfig.from_vllm(100, 8192, False, 90).capture_sizes == (
        1, 2, 4, *range(8, 97, 8), 100, *range(104, 201, 8))
    assert CudaGraphConfig.from_vllm(256, 300, False, 90).capture_sizes == (*DEFAULT_51[:35], 272, 288, 300)


def test_blackwell_cap_1024():
    cg = CudaGraphConfig.from_vllm(1024, 8192, False, 100)
    assert cg.capture_sizes == (1, 2, 4, *range(8, 256, 8), *range(256, 1025, 16))
    assert CudaGraphConfig.from_vllm(1024, 8192, False, 103).max_capture_size == 1024
    assert CudaGraphConfig.from_vllm(1024, 8192, False, 120).max_capture_size == 512


def test_spec_decode_sizes_model_runner_v2():
    cg = CudaGraphConfig.from_vllm(256, 8192, False, 90, num_spec_tokens=2)
    # grid up to 512 plus uniform decode sizes n*3 for the request-count grid
    assert set(DEFAULT_51) <= set(cg.capture_sizes)
    assert {3, 6, 12, 24, 504} <= set(cg.capture_sizes)
    assert cg.max_capture_size == 512
    assert all(s % 3 == 0 for s in cg.full_sizes)
    assert cg.full_sizes[:5] == (3, 6, 9, 12, 18)          # 8 -> 9, 16 -> 18
    assert cg.full_sizes[-1] == 504                       # 512 -> 513 > 512 is dropped
    assert cg.dispatch(6, 2, True) == ("FULL", 6)
    assert cg.dispatch(21, 7, True) == ("FULL", 24)
    assert cg.dispatch(7, 7, False) == ("PIECEWISE", 8)


def test_dispatch_decode_pads_to_full_graph():
    cg = CudaGraphConfig.from_vllm(256, 8192, False, 90)
    assert cg.dispatch(130, 130, True) == ("FULL", 136)
    assert cg.dispatch(1, 1, True) == ("FULL", 1)
    assert cg.dispatch(3, 3, True) == ("FULL", 4)
    assert cg.dispatch(256, 256, True) == ("FULL", 256)


def test_dispatch_mixed_is_piecewise_and_large_is_eager():
    cg = CudaGraphConfig.from_vllm(256, 8192, False, 90)
    assert cg.dispatch(130, 3, False) == ("PIECEWISE", 136)
    assert cg.dispatch(512, 2, False) == ("PIECEWISE", 512)
    assert cg.dispatch(513, 1, False) == ("NONE", 513)
    # uniform decode above q*max_num_seqs has no FULL key: PIECEWISE
    small = CudaGraphConfig.from_vllm(128, 8192, False, 90)
    assert small.dispatch(130, 130, True) == ("PIECEWISE", 136)


def test_enforce_eager():
    cg = CudaGraphConfig.from_vllm(256, 8192, True, 90)
    assert cg.capture_sizes == ()
    assert cg.dispatch(1, 1, True) == ("NONE", 1)


def test_bad_inputs():
    with pytest.raises(ValueError, match="max_num_seqs"):
        CudaGraphConfig.from_vllm(0, 8192, False, 90)
    with pytest.raises(ValueError, match="ascending"):
        CudaGraphConfig(False, (4, 2), 8)
    cg = CudaGraphConfig.from_vllm(8, 64, False, 90)
    with pytest.raises(ValueError, match="num_reqs"):
        cg.dispatch(2, 3, False)
