"""SGLang start-up derivations (simulator/sglang_layout.py) and CUDA graphs (simulator/sglang_graphs.py)."""

import pytest

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from simulator.sglang_graphs import SglangGraphs, decode_capture_sizes, prefill_capture_sizes
from simulator.sglang_layout import PRE_LOAD_USED_TP1, SglangArgs, resolve_sglang, sglang_parallel

LLAMA_8B = "meta-llama/Llama-3.1-8B"


def layout(gpu: str = "H100", tp: int = 1, model: str = LLAMA_8B, **flags):
    return resolve_sglang(SglangArgs(**flags), load_model_spec(model), ParallelSpec(tp=tp), get_gpu(gpu))


def test_capture_sizes():
    assert decode_capture_sizes(256) == (1, 2, 4, 8, 12) + tuple(range(16, 257, 8))     # 36 sizes
    assert decode_capture_sizes(512)[-3:] == (480, 496, 512)
    assert decode_capture_sizes(100)[-2:] == (96, 100)          # max_bs itself is captured
    sizes = prefill_capture_sizes(8192)
    assert len(sizes) == 58 and sizes[:3] == (4, 8, 12) and sizes[-2:] == (7680, 8192)
    assert prefill_capture_sizes(100)[-1] == 96


def test_dispatch():
    g = SglangGraphs(decode_capture_sizes(256), prefill_capture_sizes(8192))
    assert g.dispatch(5, 5, True) == ("FULL", 8)
    assert g.dispatch(300, 300, True) == ("NONE", 300)        # above max_bs: eager
    assert g.dispatch(1000, 3, False) == ("PIECEWISE", 1024)  # an extend batch: breakable prefill graph
    assert g.dispatch(9000, 3, False) == ("NONE", 9000)
    eager = SglangGraphs((), ())
    assert eager.enforce_eager and eager.mode == "NONE" and eager.dispatch(5, 5, True) == ("NONE", 5)


def test_mem_fraction_static_worked_examples():
    # engine-semantics section 7.6: H100 TP1, chunk 8192, decode max_bs 256, 58 prefill graphs ->
    # reserved 512 + 12288 + 128 + 512 + 464 = 13904 MiB of 81559 -> 0.830; H200 -> 0.903
    assert layout("H100").mem_fraction_static == 0.83
    assert layout("H200").mem_fraction_static == 0.903
    # TP4 on H100: decode max_bs 512 (graphs 1024 MiB) and 512 MiB of communicators:
    # reserved 512 + 12288 + 512 + 1024 + 464 = 14800 -> round((81559 - 14800) / 81559, 3)
    assert layout("H100", tp=4, model="meta-llama/Llama-3.1-70B").mem_fraction_static == round(
        (81559 - 14800) / 81559, 3)
    # no graphs: no graph reserve, but at least 10 GiB above 60 GiB: 512 + 12288 + 128 = 12928
    assert layout("H100", disable_cuda_graph=True).mem_fraction_static == round((81559 - 12928) / 81559, 3)


def test_token_pool_and_running_requests():
    lay = layout("H100")
    gpu = get_gpu("H100")
    model = load_model_spec(LLAMA_8B)
    pre = gpu.memory_bytes - PRE_LOAD_USED_TP1
    weights = model.weight_bytes_per_rank(ParallelSpec(tp=1))
    per_token = 32 * 2 * 8 * 128 * 2            # layers x (K, V) x kv heads x head dim x bf16
    assert lay.kv_bytes_per_token == per_token
    assert lay.config.max_total_tokens == int((pre - weights - pre * (1 - 0.83)) // per_token) == 415620
    # min(clamp(int(415620 / 131072 * 512), 2048, 4096), 415620 // 2)
    assert lay.config.max_running_requests == 2048
    assert layout("H200").config.max_running_requests == int(912370 / 131072 * 512) == 3563
    assert layout("H100", max_total_tokens=1000).config.max_total_tokens == 1000
    assert layout("H100", max_total_tokens=1000).config.max_running_requests == 500       # tokens // 2
    assert layout("H100", max_running_requests=64).config.max_running_requests == 64
    assert layout("H100", max_running_requests=64).graphs.decode_sizes[-1] == 64         # max_bs cut to it


def test_defaults_by_gpu_memory():
    assert (layout("L40S").config.chunked_prefill_size, layout("L40S").graphs.decode_sizes[-1]) == (4096, 32)
    b200 = layout("B200", model="deepseek-ai/DeepSeek-V3", tp=8)      # MLA: FlashInfer, page size 1
    assert (b200.config.chunked_prefill_size, b200.graphs.decode_sizes[-1]) == (16384, 512)
    assert b200.graphs.prefill_sizes[-1] == 8192                       # MLA prefill graphs stop at 8192
    assert layout("H100", chunked_prefill_size=-1).graphs.prefill_sizes[-1] == 16384     # max_prefill_tokens


@pytest.mark.parametrize("kwargs,message", [
    ({"page_size": 0}, "--page-size 0; must be a positive integer"),
    ({"mem_fraction_static": 1.0}, "--mem-fraction-static 1.0; must be in (0, 1)"),
    ({"chunked_prefill_size": 0}, "--chunked-prefill-size 0; must be a positive integer or -1"),
    ({"max_running_requests": 0}, "--max-running-requests 0; must be a positive integer"),
])
def test_args_refuse_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SglangArgs(**kwargs)


def test_layouts_not_simulated_are_refused():
    with pytest.raises(ValueError, match="simulates one tensor-parallel group here"):
        resolve_sglang(SglangArgs(), load_model_spec(LLAMA_8B), ParallelSpec(tp=1, pp=2), get_gpu("H100"))
    with pytest.raises(ValueError, match="sliding-window layers"):
        layout("H100", model="openai/gpt-oss-120b", tp=2)
    with pytest.raises(ValueError, match="does not fit the 79.15 GiB free at start; raise the TP size"):
        layout("H100", model="meta-llama/Llama-3.1-70B")



def test_page_size_follows_the_default_attention_backend():
    assert layout("H100").config.page_size == 1                                     # FA3
    b200 = layout("B200")                                                           # trtllm_mha
    assert b200.config.page_size == 64 and b200.config.max_total_tokens % 64 == 0
    assert layout("B200", model="deepseek-ai/DeepSeek-V3", tp=8).config.page_size == 1   # MLA: FlashInfer
    assert layout("H100", page_size=16).config.page_size == 16
    assert layout("H100", page_size=16, max_total_tokens=1000).config.max_total_tokens == 992


def test_expert_parallel_layout():
    """--ep-size: an MoE model's experts over ep ranks, each split over tp / ep (SGLang's
    moe_tp_size); moot for a dense model; the weights per rank, hence the pool, are the TP layout's."""
    v3 = load_model_spec("deepseek-ai/DeepSeek-V3")
    assert sglang_parallel(SglangArgs(ep_size=8), v3, 8) == ParallelSpec(tp=8, ep=8)
    four = sglang_parallel(SglangArgs(ep_size=4), v3, 8)
    assert (four.ep, four.moe_tp, four.local_experts(256)) == (4, 2, 64)
    assert sglang_parallel(SglangArgs(), v3, 8) == ParallelSpec(tp=8)
    assert sglang_parallel(SglangArgs(ep_size=8), load_model_spec(LLAMA_8B), 8) == ParallelSpec(tp=8)
    pools = {ep: resolve_sglang(SglangArgs(ep_size=ep), v3, sglang_parallel(SglangArgs(ep_size=ep), v3, 8),
                                get_gpu("H200")).config.max_total_tokens for ep in (1, 4, 8)}
    assert pools[1] == pools[4] == pools[8]
    with pytest.raises(ValueError, match="--ep-size 16 must divide the tensor parallel size 8"):
        sglang_parallel(SglangArgs(ep_size=16), v3, 8)
    with pytest.raises(ValueError, match="--ep-size 16 must divide mistralai/Mixtral-8x7B-v0.1's 8 experts"):
        sglang_parallel(SglangArgs(ep_size=16), load_model_spec("mistralai/Mixtral-8x7B-v0.1"), 16)


def test_block_scaled_experts_split_as_sglang_allows():
    """Qwen3-235B-A22B-FP8 (128 x 128 blocks, experts 1536 wide) on TP 8: 1536 / 8 = 192 is not whole
    blocks, which SGLang refuses (moe_ep_setup.py); --ep-size 4 splits each expert over 2 ranks
    (768, six blocks) and starts."""
    q = load_model_spec("Qwen/Qwen3-235B-A22B-FP8")
    with pytest.raises(ValueError, match=r"1536 / 8 ranks = 192 is not a multiple of the weight quantization block "
                                         r"128x128; SGLang refuses this layout \(use a larger --ep-size"):
        sglang_parallel(SglangArgs(), q, 8)
    assert sglang_parallel(SglangArgs(ep_size=4), q, 8).moe_tp == 2


def test_multimodal_model_reserves_the_vlm_embedding_cache():
    """SGLang 0.5.23 takes SGLANG_VLM_CACHE_SIZE_MB (100 MiB) of a multimodal model's KV budget
    (mm_runtime_reservation_gb, CPU feature transport): Qwen3-VL-8B's 147,456-byte tokens, 711 of them."""
    import dataclasses
    vl = load_model_spec("Qwen/Qwen3-VL-8B-Instruct")
    text = dataclasses.replace(vl, has_vision_encoder=False)
    per_token = vl.kv_bytes_per_token_per_rank(ParallelSpec())
    assert per_token == 147_456
    pools = [resolve_sglang(SglangArgs(), m, ParallelSpec(), get_gpu("H100")).config.max_total_tokens
             for m in (text, vl)]
    assert pools[0] - pools[1] in (100 * (1 << 20) // per_token, 100 * (1 << 20) // per_token + 1)
