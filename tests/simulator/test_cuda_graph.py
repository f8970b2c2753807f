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


# ---------------------------------------------------------------- user-given sizes and modes
# Hand-derived from vLLM 0.33 `_set_cudagraph_sizes` (the oracle test checks the same against vLLM).
PAPER = (1, 2, 4, 8, 16, 32, 64)


def test_user_sizes_are_deduplicated_sorted_and_capped_by_batched_tokens_only():
    cg = CudaGraphConfig.from_vllm(1024, 8192, cudagraph_capture_sizes=(64, 32, 1, 2, 4, 8, 16, 64))
    assert cg.capture_sizes == PAPER and cg.max_capture_size == 64
    assert CudaGraphConfig.from_vllm(1024, 40, cudagraph_capture_sizes=PAPER).capture_sizes == (1, 2, 4, 8, 16, 32)
    # the platform ceiling (512) does not apply to a given list
    assert CudaGraphConfig.from_vllm(64, 8192, cudagraph_capture_sizes=(2000, 3, 1000)).capture_sizes == (3, 1000, 2000)
    # every size above max_num_batched_tokens: nothing captured, eager
    none_left = CudaGraphConfig.from_vllm(8, 16, cudagraph_capture_sizes=(32, 64))
    assert none_left.capture_sizes == () and none_left.dispatch(4, 4, True) == ("NONE", 4)


def test_max_only_builds_the_default_grid_without_decode_sizes():
    assert CudaGraphConfig.from_vllm(256, 8192, max_cudagraph_capture_size=100).capture_sizes == (
        1, 2, 4, *range(8, 97, 8))                                   # truncated to 96
    assert CudaGraphConfig.from_vllm(1024, 8192, max_cudagraph_capture_size=8192).capture_sizes == (
        1, 2, 4, *range(8, 256, 8), *range(256, 8193, 16))           # above the 512 ceiling: allowed
    assert CudaGraphConfig.from_vllm(256, 520, max_cudagraph_capture_size=600).capture_sizes == (
        *DEFAULT_51, 520)                                            # max_num_batched_tokens appended
    assert CudaGraphConfig.from_vllm(100, 8192, max_cudagraph_capture_size=128).capture_sizes == (
        1, 2, 4, *range(8, 129, 8))                                  # no off-stride 100 (decode size)


def test_both_flags_must_agree():
    assert CudaGraphConfig.from_vllm(8, 8192, cudagraph_capture_sizes=PAPER,
                                     max_cudagraph_capture_size=64).capture_sizes == PAPER
    with pytest.raises(ValueError, match=r"max_cudagraph_capture_size\(=8\) should be consistent with the max "
                                         r"value of cudagraph_capture_sizes\(=4\)"):
        CudaGraphConfig.from_vllm(256, 8192, cudagraph_capture_sizes=(1, 2, 4), max_cudagraph_capture_size=8)
    with pytest.raises(ValueError, match=r"\(=64\) .* cudagraph_capture_sizes\(=32\)"):
        CudaGraphConfig.from_vllm(1024, 40, cudagraph_capture_sizes=PAPER, max_cudagraph_capture_size=64)


@pytest.mark.parametrize("kw,needle", [
    ({"cudagraph_capture_sizes": (0, 4)}, "got 0 in [0, 4]"),
    ({"cudagraph_capture_sizes": (4, -2)}, "got -2 in [4, -2]"),
    ({"cudagraph_capture_sizes": (1.5,)}, "got 1.5"),
    ({"cudagraph_capture_sizes": ()}, "at least one element"),
    ({"max_cudagraph_capture_size": 0}, "--max-cudagraph-capture-size must be a positive integer, got 0"),
    ({"max_cudagraph_capture_size": -8}, "got -8"),
    ({"cudagraph_mode": "PIECEWIS"}, "'PIECEWIS' is not one of NONE, PIECEWISE, FULL"),
])
def test_bad_user_values_name_the_value(kw, needle):
    with pytest.raises(ValueError) as err:
        CudaGraphConfig.from_vllm(256, 8192, **kw)
    assert needle in str(err.value)


def test_33_decode_requests_on_the_paper_bins_pad_to_64():
    cg = CudaGraphConfig.from_vllm(1024, 8192, cudagraph_capture_sizes=PAPER)
    assert cg.dispatch(33, 33, True) == ("FULL", 64)
    assert cg.dispatch(33, 3, False) == ("PIECEWISE", 64)
    assert cg.dispatch(65, 65, True) == ("NONE", 65)
    assert CudaGraphConfig.from_vllm(1024, 8192).dispatch(33, 33, True) == ("FULL", 40)


def test_modes_dispatch_and_graph_lists():
    def cg(mode):
        return CudaGraphConfig.from_vllm(256, 8192, cudagraph_capture_sizes=PAPER, cudagraph_mode=mode)
    fap, pw, full, fdo, none = (cg(m) for m in ("FULL_AND_PIECEWISE", "piecewise", "FULL", "FULL_DECODE_ONLY", "NONE"))
    assert fap.mode == "FULL_AND_PIECEWISE" and pw.mode == "PIECEWISE"      # case-insensitive, as vLLM
    assert [c.dispatch(33, 33, True) for c in (fap, pw, full, fdo, none)] == [
        ("FULL", 64), ("PIECEWISE", 64), ("FULL", 64), ("FULL", 64), ("NONE", 33)]
    assert [c.dispatch(33, 3, False) for c in (fap, pw, full, fdo, none)] == [
        ("PIECEWISE", 64), ("PIECEWISE", 64), ("FULL", 64), ("NONE", 33), ("NONE", 33)]
    assert [(c.piecewise_sizes, c.full_sizes) for c in (fap, pw, full, fdo, none)] == [
        (PAPER, PAPER), (PAPER, ()), ((), PAPER), ((), PAPER), ((), ())]
    assert none.capture_sizes == () and CudaGraphConfig.from_vllm(256, 8192, True, cudagraph_mode="FULL").mode == "NONE"


def test_spec_decode_with_user_sizes_rounds_full_graphs_only():
    cg = CudaGraphConfig.from_vllm(256, 8192, num_spec_tokens=2, cudagraph_capture_sizes=PAPER)
    assert cg.capture_sizes == PAPER                               # no decode sizes added
    assert cg.full_sizes == (3, 6, 9, 18, 33)           # 1,2 -> 3; 4 -> 6; 8 -> 9; 16 -> 18; 32 -> 33; 64 -> 66 > 64 dropped
    assert cg.dispatch(21, 7, True) == ("FULL", 33)
    assert cg.dispatch(21, 5, False) == ("PIECEWISE", 32)


def test_graph_memory_counts_the_graphs_of_the_mode():
    from frontier.model_spec import load_model_spec
    from frontier.parallel import ParallelSpec
    from simulator.memory import CUDA_GRAPH_BYTES_PER_LAYER, MIB, cuda_graph_bytes
    model, par = load_model_spec("meta-llama/Llama-3.1-8B"), ParallelSpec()
    per_graph = max(CUDA_GRAPH_BYTES_PER_LAYER * model.num_layers, MIB)      # 2 MiB at 32 layers

    def graphs(mode):
        return cuda_graph_bytes(model, par, CudaGraphConfig.from_vllm(
            256, 8192, cudagraph_capture_sizes=PAPER, cudagraph_mode=mode), first_capture_bytes=0)
    assert graphs("FULL_AND_PIECEWISE") == per_graph * 12       # 7 piecewise + 7 full, first one profiled
    assert graphs("PIECEWISE") == graphs("FULL") == graphs("FULL_DECODE_ONLY") == per_graph * 6
    assert graphs("NONE") == 0


def test_default_sizes_of_earlier_releases():
    """--vllm-version (simulator/vllm_version.py): max_num_batched_tokens appended from 0.21, the
    uniform-decode size (max_num_seqs) from 0.29, the sm_100 ceiling of 1024 from 0.28."""
    def sizes(seqs, tokens, sm, version, **kw):
        return CudaGraphConfig.from_vllm(seqs, tokens, False, sm, vllm_version=version, **kw).capture_sizes
    assert sizes(100, 8192, 90, (0, 28)) == (1, 2, 4, *range(8, 201, 8))             # no 100 before 0.29
    assert sizes(100, 8192, 90, (0, 29)) == (1, 2, 4, *range(8, 97, 8), 100, *range(104, 201, 8))
    assert sizes(256, 300, 90, (0, 20)) == (*DEFAULT_51[:35], 272, 288)             # no 300 before 0.21
    assert sizes(256, 300, 90, (0, 21)) == (*DEFAULT_51[:35], 272, 288, 300)
    assert sizes(256, 520, 90, (0, 21), max_cudagraph_capture_size=600)[-2:] == (512, 520)  # only the max given
    assert sizes(256, 520, 90, (0, 20), max_cudagraph_capture_size=600)[-2:] == (496, 512)
    assert sizes(1024, 8192, 100, (0, 27)) == DEFAULT_51
    assert sizes(1024, 8192, 100, (0, 28))[-1] == 1024
    spec = set(sizes(256, 8192, 90, (0, 28), num_spec_tokens=2))
    assert spec == set(DEFAULT_51) and 3 not in spec                                # no decode grid before 0.29
