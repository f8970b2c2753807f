"""KV capacity against vLLM 0.33's own planner: num_blocks and "GPU KV cache size: N tokens".

For each deployment we build the KVCacheSpec every attention layer of a rank would report
(FullAttentionSpec / SlidingWindowSpec / MLAAttentionSpec, from the model's config.json, with
vLLM's per-rank KV heads max(1, KV // tp)), one dict per pp stage, and run vLLM's real
`get_global_kv_cache_groups` -> `get_kv_cache_configs` -> `generate_scheduler_kv_cache_config`
-> `get_kv_cache_capacity` (vllm/v1/core/kv_cache_planning.py, kv_cache_utils.py) on the same
available bytes as ours. Our side: `simulator.memory.kv_budget` / `kv_layout`. Exact equality.

The GPU platform's settings that a CPU VllmConfig does not pick itself are set as on a GPU:
hybrid KV cache manager on (`Platform.support_hybrid_kv_cache` is True on CUDA) and model
runner V2 (VLLM_USE_V2_MODEL_RUNNER=1, the 0.33 GPU default, which sets the concurrent
batches of `max_in_flight_tokens`). The KV layout is LBNHC; every spec here has one page
size and alignment 1, for which every layout gives the same bytes per block. Sliding-window
layers take the primary block size (`Attention.get_kv_cache_spec` does so when the backend
runs that block unsplit), and fp8 KV is the per-tensor "fp8" cache dtype (no scale bytes).
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from frontier.gpu import get_gpu
from frontier.model_spec import _catalogue_lookup, load_model_spec, pp_partition
from frontier.parallel import ParallelSpec
from simulator.engine_args import EngineArgs
from simulator.memory import kv_budget, kv_layout, parse_human_int
from simulator.simulation import build_memory, resolve_engine

GIB = 1 << 30

_TINY_LLAMA = {  # ModelConfig only reads it; the planner reads only lengths and flags from it
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
    "intermediate_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128,
    "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 1 << 20,
    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def vllm_config(tmp_path_factory):
    """One VllmConfig, mutated per case (max_model_len, batched tokens, pp, async, override)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig

    folder = tmp_path_factory.mktemp("tiny-llama")
    (folder / "config.json").write_text(json.dumps(_TINY_LLAMA))
    config = VllmConfig(
        model_config=ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="bfloat16", max_model_len=8192),
        scheduler_config=SchedulerConfig(max_model_len=8192, is_encoder_decoder=False, max_num_seqs=256,
                                         max_num_batched_tokens=8192, enable_chunked_prefill=True),
        cache_config=CacheConfig(block_size=16), device_config=DeviceConfig("cpu"),
        parallel_config=ParallelConfig())
    config.scheduler_config.disable_hybrid_kv_cache_manager = False   # as on CUDA
    config.cache_config.kv_cache_layout = "LBNHC"
    assert config.use_v2_model_runner
    yield config
    mp.undo()


def rank_specs(name: str, tp: int, pp: int, block_size: int, fp8_kv: bool) -> list[dict]:
    """What each pp stage's attention layers report (`Attention/MLAAttention.get_kv_cache_spec`)."""
    import torch
    from vllm.v1.kv_cache_interface import (ChunkedLocalAttentionSpec, FullAttentionSpec, MLAAttentionSpec,
                                            SlidingWindowSpec, get_kv_quant_mode)

    cfg, _ = _catalogue_lookup(name)
    cfg = {**cfg, **cfg["text_config"]} if isinstance(cfg.get("text_config"), dict) else cfg
    cfg = transformers_config(cfg)
    cache_dtype = "fp8" if fp8_kv else "auto"
    dtype = torch.float8_e4m3fn if fp8_kv else torch.bfloat16
    layers = int(cfg["num_hidden_layers"])
    types = cfg.get("layer_types") or ["full_attention"] * layers
    specs: list[dict] = []
    start = 0
    for n in pp_partition(layers, pp):
        stage = {}
        for i in range(start, start + n):
            key = f"model.layers.{i}.self_attn.attn"
            if cfg.get("kv_lora_rank"):
                stage[key] = MLAAttentionSpec(
                    block_size=block_size, num_kv_heads=1, max_tp_shards=1,
                    head_size=int(cfg["kv_lora_rank"]) + int(cfg["qk_rope_head_dim"]), dtype=dtype,
                    cache_dtype_str=cache_dtype, kv_quant_mode=get_kv_quant_mode(cache_dtype))
                continue
            heads = int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
            head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // int(cfg["num_attention_heads"]))
            common = dict(block_size=block_size, num_kv_heads=max(1, heads // tp), head_size=head_dim,
                          dtype=dtype, kv_quant_mode=get_kv_quant_mode(cache_dtype))
            if types[i] == "sliding_attention":
                stage[key] = SlidingWindowSpec(**common, sliding_window=int(cfg["sliding_window"]))
            elif types[i] == "chunked_attention":
                stage[key] = ChunkedLocalAttentionSpec(**common, attention_chunk_size=int(cfg["attention_chunk_size"]))
            else:
                stage[key] = FullAttentionSpec(**common)
        specs.append(stage)
        start += n
    return specs


def transformers_config(cfg: dict) -> dict:
    """A Gemma 2 / 3 or Llama 4 config as transformers' own config class reads it (vLLM reads it
    through that class): the class defaults for the fields the file omits (gemma-3-12b's head_dim
    256, not hidden / heads = 240) and the layer_types it derives (Llama 4: "chunked_attention"
    but for the NoPE layers). Other configs unchanged."""
    import transformers

    cls = {"gemma2": transformers.Gemma2Config, "gemma3_text": transformers.Gemma3TextConfig,
           "llama4_text": transformers.Llama4TextConfig}.get(cfg["model_type"])
    if cls is None:
        return cfg
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "sliding_window", "sliding_window_pattern", "layer_types",
            "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval")
    return cls(**{k: cfg[k] for k in keys if k in cfg}).to_dict()


def vllm_capacity(config, specs: list[dict], available: int, *, max_model_len: int,
                  max_num_batched_tokens: int, pp: int, async_scheduling: bool = True,
                  override: int | None = None) -> tuple[int, int]:
    """(num_blocks, logged "GPU KV cache size" tokens) from vLLM's planner."""
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config, get_kv_cache_capacity

    config.model_config.max_model_len = max_model_len
    config.scheduler_config.max_model_len = max_model_len
    config.scheduler_config.max_num_batched_tokens = max_num_batched_tokens
    config.scheduler_config.async_scheduling = async_scheduling
    config.parallel_config.pipeline_parallel_size = pp
    config.cache_config.num_gpu_blocks_override = override
    groups = get_global_kv_cache_groups(config, specs)
    configs = get_kv_cache_configs(config, specs, [available] * len(specs), groups)
    scheduler = generate_scheduler_kv_cache_config(configs)
    tokens, _ = get_kv_cache_capacity(config, scheduler)
    return scheduler.num_blocks, tokens


def with_fp8_kv(model):
    return dataclasses.replace(model, quant=dataclasses.replace(model.quant, kv_bytes_per_elem=1.0))


# (catalogue name, gpu, tp, pp, ep, block size, fp8 KV, max_model_len)
CASES = [
    ("meta-llama/Llama-3.1-8B", "H100", 1, 1, False, 16, False, 131072),
    ("meta-llama/Llama-3.1-8B", "L40S", 1, 1, False, 16, True, 32768),
    ("meta-llama/Llama-3.1-70B", "H100", 4, 1, False, 16, False, 131072),
    ("meta-llama/Llama-3.1-70B", "H200", 8, 1, False, 32, True, 131072),
    ("meta-llama/Llama-3.1-70B", "H100", 2, 3, False, 16, False, 8192),     # 80 layers -> [27, 27, 26]
    ("qwen/qwen3-32b", "H100", 2, 1, False, 16, False, 40960),
    ("qwen/qwen3-32b", "H200", 1, 2, False, 32, True, 40960),
    ("qwen/qwen3-30b-a3b", "H100", 1, 1, False, 16, False, 40960),
    ("qwen/qwen3-30b-a3b", "H100", 2, 1, True, 16, True, 40960),
    ("qwen/qwen3-235b-a22b", "H200", 8, 1, True, 16, False, 40960),          # 4 KV heads, tp 8: replicated
    ("openai/gpt-oss-120b", "H100", 1, 1, False, 16, False, 32768),
    ("openai/gpt-oss-120b", "H100", 4, 1, False, 16, False, 8192),
    ("openai/gpt-oss-120b", "B200", 2, 1, False, 32, True, 131072),
    ("openai/gpt-oss-120b", "H100", 2, 2, False, 16, False, 65536),
    ("openai/gpt-oss-120b", "H100", 1, 4, False, 64, False, 4096),          # stages [9,9,9,9]: 5 sliding / 4 full
    ("openai/gpt-oss-20b", "H100", 1, 3, False, 16, False, 131072),         # 24 layers, pp 3: [8, 8, 8]
    ("deepseek-ai/deepseek-v3", "H200", 8, 1, True, 64, False, 163840),
    ("deepseek-ai/deepseek-v3", "B200", 8, 1, True, 64, True, 163840),
    ("moonshotai/Kimi-K2-Instruct", "H200", 8, 2, True, 64, False, 131072),  # 61 layers, pp 2: [31, 30]
    ("google/gemma-3-27b-it", "H100", 1, 1, False, 16, False, 8192),        # 52 sliding / 10 full: 7 groups
    ("google/gemma-3-27b-it", "H200", 2, 2, False, 16, False, 32768),       # 62 layers, pp 2: [31, 31]
    ("google/gemma-3-12b-it", "H100", 1, 1, False, 16, False, 65536),
    ("google/gemma-3-1b-it", "L40S", 1, 1, False, 16, True, 32768),         # 1 KV head, window 512
    ("google/gemma-2-9b-it", "H100", 1, 1, False, 16, False, 8192),         # alternating, window 4096
    ("google/gemma-2-27b-it", "H100", 2, 3, False, 32, False, 8192),        # 46 layers, pp 3: [15, 16, 15]
    # Llama 4: 36 chunked (8192-token chunks) + 12 NoPE full-attention layers -> 3 + 1 groups of 12
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "H100", 4, 1, False, 16, False, 32768),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "H200", 8, 1, True, 32, True, 131072),   # 1 KV head per rank
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "H200", 8, 1, True, 16, False, 65536),
    ("meta-llama/Llama-4-Maverick-17B-128E-Instruct", "H100", 8, 2, True, 16, False, 16384),  # pp 2: [24, 24]
]


def _ours(name, gpu, tp, pp, ep, block, fp8, max_len, **kw):
    model = load_model_spec(name)
    model = with_fp8_kv(model) if fp8 else model
    parallel = ParallelSpec.from_vllm(tp=tp, pp=pp, dp=1, enable_expert_parallel=ep)
    g = get_gpu(gpu)
    args = EngineArgs(model=name, gpu=gpu, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      enable_expert_parallel=ep, max_model_len=max_len, block_size=block).resolve(model, g)
    budget = kv_budget(model, parallel, g, block_size=block, max_num_batched_tokens=args.max_num_batched_tokens,
                       max_num_seqs=args.max_num_seqs, max_model_len=max_len, **kw)
    return model, parallel, args, budget


@pytest.mark.parametrize("name,gpu,tp,pp,ep,block,fp8,max_len", CASES)
def test_num_blocks_and_logged_tokens_match_vllm(vllm_config, name, gpu, tp, pp, ep, block, fp8, max_len):
    model, parallel, args, budget = _ours(name, gpu, tp, pp, ep, block, fp8, max_len)
    specs = rank_specs(name, tp, pp, block, fp8)
    # our budget's available bytes, then an odd byte count and the smallest pool vLLM accepts
    # (one request of max_model_len plus the null block, and 3 spare blocks)
    need = budget.layout.blocks_per_request(max_len, budget.max_in_flight_tokens) + 1
    for available in (budget.kv_bytes, budget.kv_bytes // 3 + 12345, (need + 3) * budget.bytes_per_block + 7):
        blocks, tokens = vllm_capacity(vllm_config, specs, available, max_model_len=max_len,
                                       max_num_batched_tokens=args.max_num_batched_tokens, pp=pp)
        ours = dataclasses.replace(budget, num_gpu_blocks=available // budget.bytes_per_block)
        assert (ours.num_gpu_blocks, ours.logged_kv_cache_tokens(max_len)) == (blocks, tokens), available
    assert budget.num_gpu_blocks == budget.kv_bytes // budget.bytes_per_block
    assert budget.kv_cache_tokens == budget.logged_kv_cache_tokens(max_len)


def test_hybrid_pool_is_half_the_layers_and_the_window_is_charged(vllm_config):
    """gpt-oss-120b TP1: 18 full + 18 sliding layers -> two groups of 18 sharing one pool."""
    model = load_model_spec("openai/gpt-oss-120b")
    layout = kv_layout(model, ParallelSpec(), 16)
    page = 16 * 2 * 8 * 64 * 2
    assert [(g.kind, len(g.layers)) for g in layout.groups] == [("full", 18), ("sliding", 18)]
    assert layout.bytes_per_block == 18 * page == model.kv_bytes_per_token_per_rank(ParallelSpec()) * 16 // 2
    # L = 8192, 8192 batched tokens, async: in flight 16384 -> the window group needs 8192 tokens too
    assert layout.blocks_per_request(8192, 16384) == 512 + (512 + 1)
    blocks, tokens = vllm_capacity(vllm_config, rank_specs("openai/gpt-oss-120b", 1, 1, 16, False), 40 * GIB,
                                   max_model_len=8192, max_num_batched_tokens=8192, pp=1)
    assert blocks == 40 * GIB // (18 * page) == 72817
    assert tokens == int(72817 / 1025 * 8192) == 581967


@pytest.mark.parametrize("name,gpu,tp,pp,ep,block,fp8,max_len",
                         [c for c in CASES if c[0].startswith(("openai/gpt-oss", "google/gemma", "meta-llama/Llama-4"))])
def test_disabled_hybrid_manager_matches_vllm(vllm_config, name, gpu, tp, pp, ep, block, fp8, max_len):
    """--disable-hybrid-kv-cache-manager: vLLM keeps the sliding-window layers as full attention
    (unify_hybrid_kv_cache_specs), one group of every layer."""
    model, parallel, args, budget = _ours(name, gpu, tp, pp, ep, block, fp8, max_len, hybrid_kv_cache_manager=False)
    assert [g.kind for g in budget.layout.groups] == ["full"]
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True
    try:
        blocks, tokens = vllm_capacity(vllm_config, rank_specs(name, tp, pp, block, fp8), budget.kv_bytes,
                                       max_model_len=max_len, max_num_batched_tokens=args.max_num_batched_tokens,
                                       pp=pp)
    finally:
        vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = False
    assert (budget.num_gpu_blocks, budget.kv_cache_tokens) == (blocks, tokens)


@pytest.mark.parametrize("async_scheduling,pp", [(False, 1), (False, 2), (True, 2)])
def test_in_flight_tokens_follow_async_and_pp(vllm_config, async_scheduling, pp):
    model, parallel, args, budget = _ours("openai/gpt-oss-120b", "H100", 2, pp, False, 16, False, 32768,
                                          async_scheduling=async_scheduling)
    assert budget.max_in_flight_tokens == args.max_num_batched_tokens * (pp + async_scheduling)
    blocks, tokens = vllm_capacity(vllm_config, rank_specs("openai/gpt-oss-120b", 2, pp, 16, False),
                                   budget.kv_bytes, max_model_len=32768,
                                   max_num_batched_tokens=args.max_num_batched_tokens, pp=pp,
                                   async_scheduling=async_scheduling)
    assert (budget.num_gpu_blocks, budget.kv_cache_tokens) == (blocks, tokens)


def test_num_gpu_blocks_override_matches_vllm(vllm_config):
    model, parallel, args, budget = _ours("openai/gpt-oss-120b", "H100", 1, 1, False, 16, False, 8192,
                                          num_gpu_blocks_override=5000)
    blocks, tokens = vllm_capacity(vllm_config, rank_specs("openai/gpt-oss-120b", 1, 1, 16, False),
                                   budget.kv_bytes + 10 * GIB, max_model_len=8192,
                                   max_num_batched_tokens=args.max_num_batched_tokens, pp=1, override=5000)
    assert (budget.num_gpu_blocks, budget.kv_cache_tokens) == (blocks, tokens) == (5000, int(5000 / 1025 * 8192))


@pytest.mark.parametrize("name,tp,block,value", [
    ("meta-llama/Llama-3.1-8B", 1, 16, "20G"),
    ("openai/gpt-oss-120b", 2, 16, "30.5g"),
    ("deepseek-ai/deepseek-v3", 8, 64, "50000000000"),
])
def test_kv_cache_memory_bytes_end_to_end(vllm_config, name, tp, block, value):
    """--kv-cache-memory-bytes: determine_available_memory returns it as given (through
    reserve_mm_ipc_gpu_memory, the identity for a text model), so the log line is exact."""
    from vllm.multimodal.gpu_ipc_memory import reserve_mm_ipc_gpu_memory

    given = parse_human_int(value)
    engine = EngineArgs(model=name, gpu="H200", tensor_parallel_size=tp, enable_expert_parallel=tp > 1,
                        max_model_len=32768, block_size=block, kv_cache_memory_bytes=given)
    resolved = resolve_engine(engine)
    budget = build_memory(resolved)
    available = reserve_mm_ipc_gpu_memory(given, None, 1)
    assert budget.kv_bytes == available == given
    blocks, tokens = vllm_capacity(vllm_config, rank_specs(name, tp, 1, block, False), available,
                                   max_model_len=32768, max_num_batched_tokens=resolved.max_num_batched_tokens, pp=1)
    assert (budget.num_gpu_blocks, budget.kv_cache_tokens) == (blocks, tokens)


@pytest.mark.parametrize("name,tp,block,max_len", [("meta-llama/Llama-3.1-8B", 1, 16, 8191),
                                                    ("openai/gpt-oss-120b", 2, 16, 32768),
                                                    ("google/gemma-3-27b-it", 1, 16, 131072)])
def test_start_refused_exactly_where_vllm_refuses(vllm_config, name, tp, block, max_len):
    """vLLM needs one request of max_model_len besides the null block (_check_enough_kv_cache_memory)."""
    specs = rank_specs(name, tp, 1, block, False)
    model, parallel = load_model_spec(name), ParallelSpec.from_vllm(tp=tp)
    layout = kv_layout(model, parallel, block)
    need = layout.blocks_per_request(max_len, 2 * 8192)
    for available, ok in (((need + 1) * layout.bytes_per_block, True), ((need + 1) * layout.bytes_per_block - 1, False)):
        ours = kv_budget(model, parallel, get_gpu("H200"), max_num_batched_tokens=8192, max_num_seqs=256,
                         block_size=block, max_model_len=max_len, kv_cache_memory_bytes=available)
        if ok:
            blocks, _ = vllm_capacity(vllm_config, specs, available, max_model_len=max_len,
                                      max_num_batched_tokens=8192, pp=1)
            assert ours.num_gpu_blocks == blocks == need + 1 and ours.start_error(max_len) is None
        else:
            with pytest.raises(ValueError, match="To serve at least one request"):
                vllm_capacity(vllm_config, specs, available, max_model_len=max_len, max_num_batched_tokens=8192, pp=1)
            assert ours.start_error(max_len).startswith("vLLM would not start")


@pytest.mark.parametrize("name,gpu,tp,pp,ep,block,fp8,max_len", [CASES[0], CASES[5], CASES[10], CASES[13], CASES[16],
                                                                  CASES[21], CASES[25]])
def test_max_model_len_auto_fit_matches_vllm(vllm_config, name, gpu, tp, pp, ep, block, fp8, max_len):
    """--max-model-len auto: vLLM's planner (original_max_model_len -1) shrinks max_model_len to what
    the pool holds; ours (MemoryBudget.max_fitting_model_len) on the same bytes: equal, for pools
    that hold ~1/3, ~1/10 and a few blocks beyond one token's request, and one that holds it all."""
    _, _, args, budget = _ours(name, gpu, tp, pp, ep, block, fp8, max_len)
    specs = rank_specs(name, tp, pp, block, fp8)
    config = vllm_config
    need = budget.layout.blocks_per_request(max_len, budget.max_in_flight_tokens) + 1
    pools = (need * budget.bytes_per_block // 3 + 777, need * budget.bytes_per_block // 10,
             (need + 5) * budget.bytes_per_block)
    saved = config.model_config.original_max_model_len
    try:
        config.model_config.original_max_model_len = -1
        for available in pools:
            vllm_capacity(config, specs, available, max_model_len=max_len,
                          max_num_batched_tokens=args.max_num_batched_tokens, pp=pp)
            want = config.model_config.max_model_len
            ours = dataclasses.replace(budget, num_gpu_blocks=available // budget.bytes_per_block)
            assert ours.max_fitting_model_len(max_len) == want, available
    finally:
        config.model_config.original_max_model_len = saved


def test_llama4_specs_are_chunked_but_every_fourth_layer():
    from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, FullAttentionSpec

    (stage,) = rank_specs("meta-llama/Llama-4-Scout-17B-16E-Instruct", 4, 1, 16, False)
    kinds = [type(spec) for spec in stage.values()]
    assert kinds == [FullAttentionSpec if (i + 1) % 4 == 0 else ChunkedLocalAttentionSpec for i in range(48)]
    assert {spec.attention_chunk_size for spec in stage.values() if type(spec) is ChunkedLocalAttentionSpec} == {8192}
