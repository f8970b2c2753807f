"""KV budget, vLLM 0.33 formula: requested = ceil(total*gmu); kv = requested - non_kv - graphs."""

import dataclasses
import math

import pytest

from frontier.gpu import GpuSpec
from frontier.model_spec import ModelSpec
from frontier.parallel import ParallelSpec
from simulator import memory
from simulator.memory import activation_peak_bytes, kv_budget

H100 = GpuSpec(name="H100-SXM", memory_bytes=85520809984, hbm_bw_bytes_per_s=3.35e12, bf16_flops=989e12,
               fp8_flops=1979e12, fp4_flops=0, fp32_flops=67e12, nvlink_bw_bytes_per_s=450e9, network_bw_bytes_per_s=50e9,
               gpus_per_node=8, price_per_hour_usd=0.0, sm_version=90, source="test")   # 81559 MiB as nvidia-smi
LLAMA_8B = ModelSpec(name="llama-3.1-8b", architecture="LlamaForCausalLM", hidden_size=4096, num_layers=32,
                     num_attention_heads=32, num_kv_heads=8, head_dim=128, intermediate_size=14336,
                     vocab_size=128256, tie_word_embeddings=False, max_position_embeddings=131072)

MIB = 1 << 20


def budget(**kw):
    args = dict(max_num_batched_tokens=8192, max_num_seqs=256)
    args.update(kw)
    parallel = args.pop("parallel", ParallelSpec())
    model = args.pop("model", LLAMA_8B)
    return kv_budget(model, parallel, H100, **args)


def test_llama_8b_h100_tp1_formula():
    b = budget()
    requested = math.ceil(85520809984 * 0.92)
    assert b.requested_bytes == requested
    assert b.weights_bytes == LLAMA_8B.weight_bytes_per_rank(ParallelSpec())
    assert b.non_torch_bytes == memory.NON_TORCH_TP1_BYTES
    # profile_run peak: 8192 tokens * (3*h + gate_up 2I + act I) * 2 bytes (> sampler 256 x vocab fp32)
    assert b.activation_bytes == 8192 * (3 * 4096 + 3 * 14336) * 2 == 905_969_664
    assert b.bytes_per_block == 32 * 2 * 16 * 8 * 128 * 2 == 2 * MIB
    expected_kv = requested - b.weights_bytes - b.non_torch_bytes - b.activation_bytes - b.cuda_graph_bytes
    assert b.kv_bytes == expected_kv
    assert b.num_gpu_blocks == expected_kv // (2 * MIB)
    assert b.kv_cache_tokens == b.num_gpu_blocks * 16
    assert 430_000 < b.kv_cache_tokens < 500_000          # vLLM logs ~4.5e5 tokens for this setup


def test_override_wins():
    b = budget(num_gpu_blocks_override=1000)
    assert (b.num_gpu_blocks, b.kv_cache_tokens, b.kv_bytes) == (1000, 16000, 1000 * 2 * MIB)


def test_logged_tokens_and_concurrency_follow_max_model_len():
    b = budget(num_gpu_blocks_override=1000)
    assert b.max_concurrency(8192) == 1000 / 512
    # max_model_len 1000 -> 63 blocks per request; int(1000 / 63 * 1000)
    assert b.logged_kv_cache_tokens(1000) == int(1000 / 63 * 1000) == 15873
    assert budget(num_gpu_blocks_override=1000, max_model_len=1000).kv_cache_tokens == 15873


def test_eager_has_no_graph_memory_and_more_blocks():
    eager, graphs = budget(enforce_eager=True), budget()
    assert eager.cuda_graph_bytes == 0 < graphs.cuda_graph_bytes
    assert eager.num_gpu_blocks > graphs.num_gpu_blocks


def test_tp_splits_weights_and_kv_heads():
    tp1, tp2 = budget(), budget(parallel=ParallelSpec(tp=2))
    assert tp2.bytes_per_block == tp1.bytes_per_block // 2
    assert tp2.non_torch_bytes == memory.NON_TORCH_MULTI_GPU_BYTES
    assert tp2.num_gpu_blocks > 2 * tp1.num_gpu_blocks


def test_sampler_peak_dominates_with_few_tokens():
    peak = activation_peak_bytes(LLAMA_8B, ParallelSpec(), 256, 256)
    assert peak == 256 * 4096 * 2 + 256 * 128256 * (2 + 4 * memory.SAMPLER_FP32_COPIES)


def test_model_that_does_not_fit():
    big = dataclasses.replace(LLAMA_8B, num_layers=176)       # 73.46 GiB of weights > 73.28 requested
    with pytest.raises(ValueError, match="does not fit.*raise tp/pp or gpu_memory_utilization"):
        budget(model=big)
    almost = dataclasses.replace(LLAMA_8B, num_layers=172)    # weights fit, activations + graphs do not
    with pytest.raises(ValueError, match="no memory left for KV cache"):
        budget(model=almost)


def test_bad_inputs():
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        budget(gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="block_size"):
        budget(block_size=0)
    with pytest.raises(ValueError, match="num_gpu_blocks_override"):
        budget(num_gpu_blocks_override=0)
    with pytest.raises(ValueError, match="max_model_len"):
        budget().max_concurrency(0)


def test_one_group_of_every_layer_for_a_plain_model():
    layout = memory.kv_layout(LLAMA_8B, ParallelSpec(pp=3), 32)       # 32 layers, pp 3 -> [11, 11, 10]
    assert [(g.kind, len(g.layers)) for g in layout.groups] == [("full", 32)]
    assert layout.page_bytes == 32 * 2 * 8 * 128 * 2
    assert layout.bytes_per_block == 11 * layout.page_bytes
    assert layout.blocks_per_request(1000, 16384) == 32                # cdiv(1000, 32)


HYBRID = dataclasses.replace(LLAMA_8B, name="hybrid", num_layers=36, sliding_window=128, num_sliding_layers=18)


def test_hybrid_groups_share_one_pool_sized_by_the_largest_group():
    layout = memory.kv_layout(HYBRID, ParallelSpec(), 16)
    assert [(g.kind, g.layers[:3], len(g.layers)) for g in layout.groups] == [
        ("full", (1, 3, 5), 18), ("sliding", (0, 2, 4), 18)]
    assert layout.bytes_per_block == 18 * layout.page_bytes
    # per request: cdiv(L, 16) full blocks + cdiv(min(127 + in flight, L), 16) + 1 window blocks
    assert layout.blocks_per_request(100_000, 16384) == 6250 + (1032 + 1)
    assert layout.blocks_per_request(4096, 16384) == 256 + 257
    # pp 4: stages of 9 layers hold 5 sliding + 4 full, or 4 + 5
    assert memory.kv_layout(HYBRID, ParallelSpec(pp=4), 16).bytes_per_block == 5 * layout.page_bytes


def test_unequal_hybrid_splits_the_larger_kind_into_groups():
    # 10 full + 30 sliding: group size 10 -> 1 full group, 3 sliding groups of 10
    m = dataclasses.replace(LLAMA_8B, num_layers=40, sliding_window=512, num_sliding_layers=30)
    layout = memory.kv_layout(m, ParallelSpec(), 16)
    assert [(g.kind, len(g.layers)) for g in layout.groups] == [("full", 10)] + [("sliding", 10)] * 3
    assert layout.bytes_per_block == 10 * layout.page_bytes
    # 12 full + 13 sliding: 13 < 1.5 * 12 -> one group each, padded to 13
    m = dataclasses.replace(LLAMA_8B, num_layers=25, sliding_window=128, num_sliding_layers=13)
    layout = memory.kv_layout(m, ParallelSpec(), 16)
    assert [(g.kind, len(g.layers)) for g in layout.groups] == [("full", 12), ("sliding", 13)]
    assert layout.bytes_per_block == 13 * layout.page_bytes


def test_logged_tokens_of_a_hybrid_model_count_the_window_group():
    b = budget(model=HYBRID, num_gpu_blocks_override=10_000, max_model_len=4096)
    assert b.max_in_flight_tokens == 2 * 8192                          # async scheduling, pp 1
    assert b.kv_cache_tokens == int(10_000 / (256 + 257) * 4096) == 79844
    sync = budget(model=HYBRID, num_gpu_blocks_override=10_000, max_model_len=4096, async_scheduling=False)
    assert sync.max_in_flight_tokens == 8192 and sync.kv_cache_tokens == int(10_000 / (256 + 257) * 4096)
    long = budget(model=HYBRID, num_gpu_blocks_override=10_000, max_model_len=100_000, async_scheduling=False)
    assert long.kv_cache_tokens == int(10_000 / (6250 + 521) * 100_000)   # window: cdiv(127 + 8192, 16) + 1


def test_kv_cache_memory_bytes_replaces_the_profiled_budget():
    b = budget(kv_cache_memory_bytes=20 * (1 << 30) + 5)
    assert b.kv_bytes == 20 * (1 << 30) + 5
    assert b.num_gpu_blocks == 10240 and b.kv_cache_tokens == 10240 * 16
    assert dict(b.sources)["activation"] == "estimated, unused: kv_cache_memory_bytes given"
    big = dataclasses.replace(LLAMA_8B, num_layers=176)      # weights alone exceed the requested memory
    assert budget(model=big, kv_cache_memory_bytes=1 << 30).num_gpu_blocks == (1 << 30) // (176 * 2 * 16 * 8 * 128 * 2)
    with pytest.raises(ValueError, match="kv-cache-memory-bytes 1000 is less than one KV block"):
        budget(kv_cache_memory_bytes=1000)
    with pytest.raises(ValueError, match="kv_cache_memory_bytes=0 must be > 0"):
        budget(kv_cache_memory_bytes=0)


def test_human_readable_byte_counts_as_vllm():
    assert [memory.parse_human_int(v) for v in ("1k", "1K", "25.6k", "8G", "8g", " 123 ")] == [
        1000, 1024, 25600, 8 << 30, 8 * 10**9, 123]
    with pytest.raises(ValueError, match="decimals are not allowed with binary suffix G; did you mean 2.5g"):
        memory.parse_human_int("2.5G")
    with pytest.raises(ValueError, match="'8GB' is not a byte count"):
        memory.parse_human_int("8GB")


def test_simulate_runs_on_the_given_kv_cache_memory():
    from simulator.engine_args import EngineArgs
    from simulator.simulation import SimulationSpec, run_simulation
    from simulator.workload import WorkloadSpec

    spec = SimulationSpec(engine=EngineArgs(max_model_len=4096, kv_cache_memory_bytes=1 << 30),
                          workload=WorkloadSpec(num_prompts=8, random_input_len=200, random_output_len=10))
    result = run_simulation(spec)
    assert (result.memory.kv_bytes, result.memory.num_gpu_blocks) == (1 << 30, 512)
    assert result.summary["completed"] == 8
    with pytest.raises(ValueError, match="--kv-cache-memory-bytes must be a positive integer"):
        EngineArgs(kv_cache_memory_bytes=-1)


def test_start_error_where_one_request_of_max_model_len_does_not_fit():
    # 1 GiB of a 2 MiB-per-block model: 512 blocks, 511 usable besides the null block
    b = budget(kv_cache_memory_bytes=1 << 30)
    assert b.num_gpu_blocks == 512 and b.start_error(511 * 16) is None
    assert b.start_error(511 * 16 + 1).startswith(
        "vLLM would not start: one request of max_model_len 8177 needs 512 KV blocks (1.00 GiB) but 511 are usable")
    # the window group of a hybrid model counts too: 256 + 257 blocks at 4096 tokens
    hybrid_bytes = 18 * 16 * 2 * 8 * 128 * 2
    assert budget(model=HYBRID, kv_cache_memory_bytes=514 * hybrid_bytes).start_error(4096) is None
    assert "needs 513 KV blocks" in budget(model=HYBRID, kv_cache_memory_bytes=513 * hybrid_bytes).start_error(4096)


def test_memory_command_prints_the_given_kv_memory_and_the_start_error():
    from typer.testing import CliRunner

    from frontier.cli import app

    res = CliRunner().invoke(app, ["memory", "--kv-cache-memory-bytes", "1G", "--max-model-len", "8177"])
    assert res.exit_code == 0, res.output
    assert "  kv cache                           1.00 GiB  (given)" in res.output
    assert "GPU KV cache size: 8,177 tokens" in res.output            # int(512 / cdiv(8177, 16) * 8177)
    assert res.output.strip().splitlines()[-1].startswith("vLLM would not start: one request of max_model_len 8177")
    res = CliRunner().invoke(app, ["memory", "--kv-cache-memory-bytes", "1.5G"])
    assert res.exit_code != 0 and "decimals are not allowed with binary suffix G" in res.output


def test_budget_of_earlier_releases():
    """--vllm-version (simulator/vllm_version.py): before 0.14 the requested memory is total x
    utilization unrounded; before 0.20 no CUDA-graph estimate is subtracted; before 0.21 the logged
    token count is num_blocks // groups x block size; before 0.26 a window group reserves
    max_num_batched_tokens, not the tokens in flight."""
    now = budget()
    v19 = budget(vllm_version=(0, 19))
    assert v19.cuda_graph_bytes == 0 < now.cuda_graph_bytes
    assert v19.kv_bytes == now.kv_bytes + now.cuda_graph_bytes
    assert v19.num_gpu_blocks == v19.kv_bytes // (2 * MIB)
    assert dict(v19.sources)["cuda_graph"] == "not subtracted before vLLM 0.20"
    v13 = budget(vllm_version=(0, 13), gpu_memory_utilization=0.9)
    unrounded = 85520809984 * 0.9                                       # 76968728985.6
    assert v13.kv_bytes == int(unrounded - v13.weights_bytes - v13.non_torch_bytes - v13.activation_bytes)
    assert v13.num_gpu_blocks == int((unrounded - v13.weights_bytes - v13.non_torch_bytes
                                      - v13.activation_bytes) // (2 * MIB))
    assert v13.requested_bytes == math.ceil(unrounded)
    # logged tokens: 0.20 counts blocks (no max_model_len), 0.21 the concurrency at max_model_len
    assert budget(num_gpu_blocks_override=1000, max_model_len=1000, vllm_version=(0, 20)).kv_cache_tokens == 16000
    assert budget(num_gpu_blocks_override=1000, max_model_len=1000, vllm_version=(0, 21)).kv_cache_tokens == 15873
    hybrid = budget(model=HYBRID, num_gpu_blocks_override=10_000, max_model_len=100_000, vllm_version=(0, 20))
    assert hybrid.kv_cache_tokens == 10_000 // 2 * 16                  # two groups
    # window reservation: max_num_batched_tokens (8192) before 0.26, 2 x 8192 in flight from 0.26
    v25 = budget(model=HYBRID, num_gpu_blocks_override=10_000, max_model_len=100_000, vllm_version=(0, 25))
    v26 = budget(model=HYBRID, num_gpu_blocks_override=10_000, max_model_len=100_000, vllm_version=(0, 26))
    assert (v25.max_in_flight_tokens, v26.max_in_flight_tokens) == (8192, 16384)
    assert v25.kv_cache_tokens == int(10_000 / (6250 + 521) * 100_000)
    assert v26.kv_cache_tokens == int(10_000 / (6250 + 1033) * 100_000)


def test_engine_default_utilization_follows_the_release():
    from simulator.engine_args import EngineArgs
    assert EngineArgs().effective_gpu_memory_utilization == 0.92
    assert EngineArgs(vllm_version="0.19.0").effective_gpu_memory_utilization == 0.9
    assert EngineArgs(vllm_version="0.20").effective_gpu_memory_utilization == 0.92
    assert EngineArgs(vllm_version="0.12.0", gpu_memory_utilization=0.8).effective_gpu_memory_utilization == 0.8
    with pytest.raises(ValueError, match=r"--gpu-memory-utilization must be in \(0, 1\], got 1.5"):
        EngineArgs(gpu_memory_utilization=1.5)


def test_memory_command_takes_the_release():
    import json

    from typer.testing import CliRunner

    from frontier.cli import app

    res = CliRunner().invoke(app, ["memory", "--gpu", "H100", "--vllm-version", "0.19.0", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert (report["vllm_version"], report["gpu_memory_utilization"], report["cuda_graph_gib"]) == ("0.19.0", 0.9, 0.0)
    assert report["kv_cache_tokens"] == report["num_gpu_blocks"] * 16
    res = CliRunner().invoke(app, ["memory", "--gpu", "H100", "--vllm-version", "0.19.0"])
    assert "per GPU, vLLM 0.19 formula:" in res.output.splitlines()[0]
    res = CliRunner().invoke(app, ["memory", "--vllm-version", "1.0"])
    assert res.exit_code == 2 and "error: --vllm-version 1.0 is outside 0.10 to 0.33" in res.output


LLAMA4_LIKE = dataclasses.replace(LLAMA_8B, name="llama4-like", attention_chunk_size=8192,
                                  chunked_layer_flags=tuple((i + 1) % 4 != 0 for i in range(32)))


def test_chunked_layers_form_groups_unless_vllm_turns_the_hybrid_manager_off():
    # 24 chunked + 8 full layers: groups of 8 (3 chunked + 1 full), a block a quarter of one over
    # all 32 layers; vLLM keeps one group of every layer with an EAGLE drafter, before 0.14 (its
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE default "0") and when asked
    hybrid = budget(model=LLAMA4_LIKE, max_model_len=32768)
    assert [(g.kind, len(g.layers)) for g in hybrid.layout.groups] == [("full", 8)] + [("chunked", 8)] * 3
    assert (hybrid.layout.attention_chunk_size, hybrid.layout.sliding_window) == (8192, 0)
    assert hybrid.bytes_per_block * 4 == budget(max_model_len=32768).bytes_per_block
    for kw in ({"num_spec_tokens": 2}, {"vllm_version": (0, 13)}, {"hybrid_kv_cache_manager": False}):
        one = budget(model=LLAMA4_LIKE, max_model_len=32768, **kw)
        assert [(g.kind, len(g.layers)) for g in one.layout.groups] == [("full", 32)], kw
    assert len(budget(model=LLAMA4_LIKE, max_model_len=32768, vllm_version=(0, 14)).layout.groups) == 4


def test_a_chunked_group_reserves_one_chunk_and_the_tokens_in_flight():
    # ChunkedLocalAttentionSpec.max_admission_blocks_per_request: ceil(min(C + in-flight, L) / bs)
    layout = budget(model=LLAMA4_LIKE, max_model_len=32768).layout
    assert layout.blocks_per_request(32768, 16384) == 2048 + 3 * 1536
    assert layout.blocks_per_request(4096, 16384) == 4 * 256


def _qwen35_35b():
    from frontier.model_spec import load_model_spec
    return load_model_spec("Qwen/Qwen3.5-35B-A3B")


def test_gated_deltanet_layout_aligns_the_block_to_the_state():
    """Qwen3.5-35B-A3B at TP 1 (30 GDN layers, 10 full attention with 2 KV heads of 256): a GDN
    layer's state is the conv state 3 x (2*16*128 + 32*128) x 2 B = 49,152 plus the fp32 temporal
    state 32 x 128 x 128 x 4 B = 2,097,152 -> 2,146,304 bytes; an attention token 2*2*256*2 = 2,048
    bytes a layer. Prefix caching (vLLM's "align" mode): blocks of a multiple of lcm(16, 64) = 64
    tokens, the smallest whose page holds the state: 64 x ceil(2,146,304 / 131,072) = 1,088
    (page 2,228,224); without: multiples of 16, 16 x ceil(2,146,304 / 32,768) = 1,056. Groups of 10:
    1 full + 3 mamba; a request holds ceil(L / block) attention blocks + 3 x (2 state blocks + 1
    prefill checkpoint), or + 3 x 1 without prefix caching."""
    m = _qwen35_35b()
    align = memory.kv_layout(m, ParallelSpec(), 16)
    assert (align.block_size, align.page_bytes, align.mamba_state_bytes) == (1088, 2_228_224, 2_146_304)
    assert sorted((g.kind, len(g.layers)) for g in align.groups) == [("full", 10)] + [("mamba", 10)] * 3
    assert align.bytes_per_block == 10 * 2_228_224
    assert align.blocks_per_request(32768, 0) == 31 + 3 * 3
    none = memory.kv_layout(m, ParallelSpec(), 16, prefix_caching=False)
    assert (none.block_size, none.page_bytes, none.blocks_per_request(32768, 0)) == (1056, 1056 * 2048, 32 + 3)
    # a larger --block-size is the unit: 2,048 tokens (align: lcm(2048, 64)) hold the state at once
    assert memory.kv_layout(m, ParallelSpec(), 2048).block_size == 2048
    # TP 4: one KV head a rank (1,024 bytes a token), a quarter of the state (536,576 bytes)
    tp4 = memory.kv_layout(m, ParallelSpec(tp=4), 16)
    assert (tp4.mamba_state_bytes, tp4.block_size) == (536_576, 64 * math.ceil(536_576 / (64 * 1024)))


def test_gated_deltanet_budget_uses_the_aligned_block():
    m = _qwen35_35b()
    b = budget(model=m, kv_cache_memory_bytes=40 << 30, max_model_len=32768)
    assert (b.block_size, b.num_gpu_blocks, b.kv_cache_tokens) == (1088, (40 << 30) // (10 * 2_228_224),
                                                                   int(1927 / 40 * 32768))
    # every weight of a GDN layer is in the budget (30 GDN layers of 33,718,464 params, see test_model_spec),
    # and the vision tower's 446,571,248
    assert b.weights_bytes == 2 * (34_660_523_648 + 446_571_248)


@pytest.mark.parametrize("kw,match", [
    (dict(gpu_sm=89), "L40S is sm_89; the plan is modelled on sm_90 GPUs"),
    (dict(vllm_version=(0, 20)), "--vllm-version 0.20: the plan is vLLM 0.33's"),
    (dict(hybrid_kv_cache_manager=False), "only with its hybrid KV cache manager"),
])
def test_gated_deltanet_plans_outside_the_modelled_ones_are_one_line_errors(kw, match):
    gpu = H100
    if kw.pop("gpu_sm", None):
        gpu = dataclasses.replace(H100, name="L40S", sm_version=89)
    with pytest.raises(ValueError, match=match):
        kv_budget(_qwen35_35b(), ParallelSpec(), gpu, max_num_batched_tokens=8192, max_num_seqs=256, **kw)


def test_gated_deltanet_state_must_split_evenly_over_tp():
    m = dataclasses.replace(_qwen35_35b(), linear_num_value_heads=48, num_attention_heads=32, num_kv_heads=32)
    with pytest.raises(ValueError, match="tensor parallel size 32 must divide the Gated DeltaNet conv width"):
        memory.gdn_state_bytes(m, 32)


def test_gated_deltanet_state_dtypes_follow_the_flags_as_vllm_resolves_them():
    """--mamba-cache-dtype sets the conv state's dtype (auto: bf16), --mamba-ssm-cache-dtype the
    temporal state's (auto: Qwen3.5's config float32; a model without one, as Qwen3-Next: the conv
    state's). Qwen3.5-35B-A3B at TP 1: conv 3 x 8,192 elements, temporal 32 x 128 x 128."""
    from frontier.model_spec import model_spec_from_config
    from simulator.engine_args import EngineArgs, with_mamba_dtypes
    m = _qwen35_35b()
    conv, temporal = 3 * 8192, 32 * 128 * 128
    cases = {("auto", "auto"): conv * 2 + temporal * 4, ("auto", "bfloat16"): conv * 2 + temporal * 2,
             ("float32", "auto"): conv * 4 + temporal * 4, ("float32", "float16"): conv * 4 + temporal * 2}
    for (conv_dtype, ssm_dtype), want in cases.items():
        assert memory.gdn_state_bytes(with_mamba_dtypes(m, conv_dtype, ssm_dtype), 1) == want
    nxt = model_spec_from_config({"model_type": "qwen3_next", "hidden_size": 256, "num_hidden_layers": 4,
                                  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
                                  "intermediate_size": 512, "mamba_ssm_dtype": "float32"}, "next")
    assert nxt.mamba_ssm_dtype == ""                 # vLLM reads that field for Qwen3.5 only
    assert memory.gdn_state_bytes(with_mamba_dtypes(nxt, "auto", "auto"), 1) == conv * 2 + temporal * 2
    assert memory.gdn_state_bytes(with_mamba_dtypes(nxt, "float32", "auto"), 1) == conv * 4 + temporal * 4
    with pytest.raises(ValueError, match="--mamba-ssm-cache-dtype 'bf16' is not one of auto, float32, float16, bfloat16"):
        EngineArgs(mamba_ssm_cache_dtype="bf16")


def test_multimodal_flags_drop_or_replicate_the_vision_tower():
    """--limit-mm-per-prompt drops a tower only when every modality it serves is limited to 0
    (Qwen3-VL's image and video, Kimi-K2.5's vision_chunk), as --language-model-only does;
    --mm-encoder-tp-mode data puts the whole tower on every rank."""
    from simulator.engine_args import EngineArgs, mm_limits
    from simulator.simulation import resolve_engine

    def weights(**kw):
        return resolve_engine(EngineArgs(gpu="H100", tensor_parallel_size=2, **kw)).model

    vl = "Qwen/Qwen3-VL-8B-Instruct"
    base = weights(model=vl)
    sharded, replicated = 571_730_544, 4_657_792          # test_model_spec: Qwen3-VL-8B's ViT
    assert (base.vision_params_sharded, base.vision_params_replicated) == (sharded, replicated)
    for limits in ('{"image": 0, "video": 0}', {"image": {"count": 0}, "video": 0}, (("video", 0), ("image", 0))):
        m = weights(model=vl, limit_mm_per_prompt=limits)
        assert (m.vision_params_sharded, m.vision_params_replicated, m.has_vision_encoder) == (0, 0, False)
        assert m.vision_encoder_note() is None
    assert weights(model=vl, limit_mm_per_prompt='{"image": 0}') == base      # videos still served
    data = weights(model=vl, mm_encoder_tp_mode="data")
    assert (data.vision_params_sharded, data.vision_params_replicated) == (0, sharded + replicated)
    p = ParallelSpec(tp=2)
    assert data.weight_bytes_per_rank(p) - base.weight_bytes_per_rank(p) == 2 * (sharded - sharded // 2)   # bf16
    assert "weights are counted" in data.vision_encoder_note()
    kimi = "moonshotai/Kimi-K2.5"
    assert weights(model=kimi, limit_mm_per_prompt='{"image": 0, "video": 0}').vision_params_sharded == 411_279_984
    assert weights(model=kimi, limit_mm_per_prompt='{"vision_chunk": 0}').vision_params_sharded == 0
    assert mm_limits('{"video": 1, "image": 2}') == (("image", 2), ("video", 1))
    for bad, message in (("image=0", "--limit-mm-per-prompt 'image=0' is not JSON"),
                         ('{"image": -1}', "--limit-mm-per-prompt 'image': -1; counts are integers >= 0"),
                         ('{"image": true}', "'image': True; counts are integers >= 0"),
                         ("[1]", "--limit-mm-per-prompt '[1]' must map modalities to counts")):
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            mm_limits(bad)
    with pytest.raises(ValueError, match="--mm-encoder-tp-mode 'dp' is not one of weights, data"):
        EngineArgs(mm_encoder_tp_mode="dp")
