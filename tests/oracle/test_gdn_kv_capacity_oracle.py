"""Gated DeltaNet hybrids (Qwen3.5, Qwen3-Next): the KV plan against vLLM 0.33's own code on the
CPU (``gdn_planner.vllm_mamba_plan``: the block-size alignment, the state and attention pages,
the groups, num_blocks, the logged "GPU KV cache size" and the maximum concurrency), for the
same available bytes. Our side: ``frontier memory``'s path (EngineArgs -> resolve_engine ->
build_memory -> ``simulator.memory.gdn_layout``). Exact equality."""

from __future__ import annotations

import json

import pytest

from simulator.engine_args import EngineArgs
from simulator.simulation import build_memory, resolve_engine
from simulator.spec_decode import spec_config_from_vllm

pytestmark = pytest.mark.oracle

GIB = 1 << 30

# Qwen/Qwen3-Next-80B-A3B-Instruct's fields that vLLM's plan reads (the catalogue has no Qwen3-Next
# file): transformers' Qwen3NextConfig defaults, which its docstring says mirror that checkpoint
QWEN3_NEXT = {
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
    "intermediate_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2,
    "head_dim": 256, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
    "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "num_experts": 512,
    "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
    "decoder_sparse_step": 1, "norm_topk_prob": True, "vocab_size": 151936, "max_position_embeddings": 262144,
    "rope_theta": 10000000, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-6, "hidden_act": "silu",
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "attention_bias": False,
}

# (model, tp, pp, prefix caching, kv cache dtype, --block-size, available bytes, max_model_len)
CASES = [
    *[("Qwen/Qwen3.5-35B-A3B", tp, 1, pc, "auto", None, 40 * GIB, 32768) for tp in (1, 2, 4, 8) for pc in (True, False)],
    ("Qwen/Qwen3.5-27B", 1, 1, True, "auto", None, 40 * GIB, 32768),
    ("Qwen/Qwen3.5-27B", 2, 4, True, "auto", None, 17 * GIB + 12345, 131072),
    ("Qwen/Qwen3.5-122B-A10B", 4, 1, False, "auto", None, 40 * GIB, 32768),
    ("Qwen/Qwen3.5-397B-A17B", 8, 2, True, "auto", None, 40 * GIB, 262144),
    ("Qwen/Qwen3.5-35B-A3B", 1, 3, False, "auto", None, 40 * GIB, 32768),
    ("Qwen/Qwen3.5-35B-A3B", 1, 1, True, "fp8", None, 40 * GIB, 32768),
    ("Qwen/Qwen3.5-35B-A3B", 1, 1, True, "auto", 32, 40 * GIB, 32768),
    ("Qwen/Qwen3.5-35B-A3B", 1, 1, False, "auto", 64, 40 * GIB, 32768),
    ("Qwen/Qwen3.5-35B-A3B", 1, 1, True, "auto", 2048, 40 * GIB, 32768),
    ("qwen3-next", 1, 1, True, "auto", None, 40 * GIB, 32768),
    ("qwen3-next", 4, 1, False, "fp8", None, 40 * GIB, 65536),
    # Nemotron-H's Mamba2 blocks (their prefill checkpoints need no 64-token grid in the "align" mode)
    *[("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", tp, 1, pc, "auto", None, 40 * GIB, 32768) for tp in (1, 2, 4, 8)
      for pc in (True, False)],
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 1, 1, True, "auto", 64, 40 * GIB, 32768),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 2, 1, False, "fp8", None, 30 * GIB + 777, 131072),
    ("nvidia/Nemotron-H-56B-Base-8K", 2, 1, False, "auto", None, 40 * GIB, 8192),
    ("nvidia/Nemotron-H-56B-Base-8K", 4, 1, True, "auto", None, 40 * GIB, 8192),
    # (Super's FP8 KV: the planner reads config.json alone, not the hf_quant_config.json that makes vLLM's "auto" fp8)
    *[("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", tp, 1, pc, "fp8", None, 40 * GIB, 65536) for tp in (4, 8)
      for pc in (True, False)],
    ("nvidia/Nemotron-H-56B-Base-8K", 8, 1, False, "auto", 64, 20 * GIB, 8192),
]


@pytest.fixture(scope="module")
def planner(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("VLLM_CACHE_ROOT", str(tmp_path_factory.mktemp("vllm-cache")))   # the registry's model-info cache
    import gdn_planner
    mp.setattr(gdn_planner, "CONFIG_ROOT", str(tmp_path_factory.mktemp("gdn-configs")))
    with gdn_planner.use_in_process_inspection():
        yield gdn_planner
    mp.undo()


def _ours(name: str, tp: int, pp: int, pc: bool, kv_dtype: str, block: int | None, available: int,
          max_model_len: int, tmp_path, num_speculative_tokens: int = 0, **mamba_dtypes: str):
    model = name
    if name == "qwen3-next":
        (tmp_path / "config.json").write_text(json.dumps(QWEN3_NEXT))
        model = str(tmp_path)
    spec = (spec_config_from_vllm({"method": "mtp", "num_speculative_tokens": num_speculative_tokens}, [0.7])
            if num_speculative_tokens else None)
    args = EngineArgs(model=model, gpu="H100", tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      enable_prefix_caching=pc, kv_cache_dtype=kv_dtype, block_size=block,
                      kv_cache_memory_bytes=available, max_model_len=max_model_len, max_num_batched_tokens=8192,
                      speculative_config=spec, **mamba_dtypes)
    resolved = resolve_engine(args)
    return resolved, build_memory(resolved)


# --mamba-cache-dtype / --mamba-ssm-cache-dtype (the state dtypes; Qwen3.5's temporal state is fp32
# by its config unless the flag says otherwise, Qwen3-Next's follows the conv state's)
DTYPE_CASES = [
    ("Qwen/Qwen3.5-35B-A3B", 1, True, {"mamba_ssm_cache_dtype": "bfloat16"}),
    ("Qwen/Qwen3.5-35B-A3B", 2, False, {"mamba_ssm_cache_dtype": "float16"}),
    ("Qwen/Qwen3.5-35B-A3B", 1, True, {"mamba_cache_dtype": "float32"}),
    ("Qwen/Qwen3.5-27B", 4, True, {"mamba_cache_dtype": "float32", "mamba_ssm_cache_dtype": "bfloat16"}),
    ("qwen3-next", 1, True, {"mamba_ssm_cache_dtype": "float32"}),
    ("qwen3-next", 2, False, {"mamba_cache_dtype": "float32"}),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 1, False, {"mamba_ssm_cache_dtype": "bfloat16"}),
    ("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 2, True, {"mamba_cache_dtype": "float32"}),
]


@pytest.mark.parametrize("case", CASES + [(n, tp, 1, pc, "auto", None, 40 * GIB, 32768, d) for n, tp, pc, d in DTYPE_CASES],
                         ids=lambda c: f"{c[0].split('/')[-1]}-tp{c[1]}-pp{c[2]}-{'align' if c[3] else 'none'}-{c[4]}-"
                         f"block{c[5]}" + "".join(f"-{k}={v}" for k, v in (c[8] if len(c) > 8 else {}).items()))
def test_gdn_kv_plan_equals_vllms(planner, case, tmp_path):
    name, tp, pp, pc, kv_dtype, block, available, max_model_len = case[:8]
    dtypes = case[8] if len(case) > 8 else {}
    want = planner.vllm_mamba_plan(QWEN3_NEXT if name == "qwen3-next" else name, tp, pp, available, max_model_len,
                                   8192, pc, kv_dtype, block, **dtypes)
    resolved, budget = _ours(name, tp, pp, pc, kv_dtype, block, available, max_model_len, tmp_path, **dtypes)
    layout = budget.layout
    assert want["mamba_cache_mode"] == ("align" if pc else "none")
    got = {"block_size": budget.block_size, "mamba_page_bytes_real": layout.mamba_state_bytes,
           "attn_page_bytes": layout.page_bytes, "bytes_per_block": budget.bytes_per_block,
           "num_blocks": budget.num_gpu_blocks,
           "blocks_per_request": layout.blocks_per_request(max_model_len, budget.max_in_flight_tokens),
           "logged_tokens": budget.logged_kv_cache_tokens(max_model_len),
           "max_concurrency": budget.max_concurrency(max_model_len)}
    assert got == {k: want[k] for k in got}
    assert want["mamba_page_bytes_padded"] == layout.page_bytes
    kinds = sorted((("full" if g["kind"] == "full_attention" else g["kind"]), g["layers"]) for g in want["groups"])
    if pp == 1:
        assert sorted((g.kind, len(g.layers)) for g in layout.groups) == kinds
    assert budget.start_error(max_model_len) is None


# the checkpoint's MTP layer as drafter (--speculative-config method mtp, k drafts): its full-attention
# layer joins the full group (11 layers: the groups are padded to 11), each GDN group holds k more
# state blocks per request, and the conv state k more rows (35B-A3B without prefix caching: block 1,072)
MTP_CASES = [
    ("Qwen/Qwen3.5-35B-A3B", 1, 1, True, 2),
    ("Qwen/Qwen3.5-35B-A3B", 1, 1, False, 2),
    ("Qwen/Qwen3.5-35B-A3B", 2, 1, True, 1),
    ("Qwen/Qwen3.5-27B", 2, 1, False, 3),
    ("Qwen/Qwen3.5-397B-A17B", 8, 1, True, 2),
]


@pytest.mark.parametrize("case", MTP_CASES, ids=lambda c: f"{c[0].split('/')[-1]}-tp{c[1]}-pp{c[2]}-"
                         f"{'align' if c[3] else 'none'}-mtp{c[4]}")
def test_gdn_kv_plan_with_an_mtp_drafter_equals_vllms(planner, case, tmp_path):
    name, tp, pp, pc, k = case
    want = planner.vllm_mamba_plan(name, tp, pp, 40 * GIB, 32768, 8192, pc, num_speculative_tokens=k)
    _, budget = _ours(name, tp, pp, pc, "auto", None, 40 * GIB, 32768, tmp_path, num_speculative_tokens=k)
    layout = budget.layout
    got = {"block_size": budget.block_size, "mamba_page_bytes_real": layout.mamba_state_bytes,
           "attn_page_bytes": layout.page_bytes, "bytes_per_block": budget.bytes_per_block,
           "num_blocks": budget.num_gpu_blocks, "mamba_num_speculative_blocks": layout.mamba_blocks_per_request
           - (3 if pc else 1), "blocks_per_request": layout.blocks_per_request(32768, budget.max_in_flight_tokens),
           "logged_tokens": budget.logged_kv_cache_tokens(32768), "max_concurrency": budget.max_concurrency(32768)}
    assert got == {k: want[k] for k in got}
    assert sorted((g.kind, len(g.layers)) for g in layout.groups) == sorted(
        (("full" if g["kind"] == "full_attention" else g["kind"]), g["layers"]) for g in want["groups"])


# Blackwell (the sm_100 family): vLLM picks FlashInfer for the attention layers (smallest kernel
# block 16, as FlashAttention 3's; page sizes from 128 up advertised with TRT-LLM's kernels) and,
# in its CUDA 13 build, FlashInfer's GDN prefill: the planner run as there gives the same plan;
# sm_120 (RTX PRO 6000): FlashAttention 2 (blocks of multiples of 16) and FlashInfer's GDN prefill
BLACKWELL_CASES = [
    ("Qwen/Qwen3.5-35B-A3B", "B200", 100, 1, True, 0),
    ("Qwen/Qwen3.5-35B-A3B", "B300", 103, 2, False, 0),
    ("Qwen/Qwen3.5-397B-A17B", "B200", 100, 8, True, 2),
    ("Qwen/Qwen3.5-122B-A10B", "GB300", 103, 4, True, 0),
    ("Qwen/Qwen3.5-27B", "RTX-PRO-6000-Server", 120, 1, True, 1),
]


@pytest.mark.parametrize("case", BLACKWELL_CASES, ids=lambda c: f"{c[0].split('/')[-1]}-{c[1]}-tp{c[3]}-"
                         f"{'align' if c[4] else 'none'}-mtp{c[5]}")
def test_gdn_kv_plan_on_blackwell_equals_vllms(planner, case, tmp_path):
    name, gpu, sm, tp, pc, k = case
    want = planner.vllm_mamba_plan(name, tp, 1, 40 * GIB, 32768, 8192, pc, gpu_sm=sm, num_speculative_tokens=k)
    assert want["gdn_prefill_backend"] == "flashinfer"     # (the planner's reproduction of vLLM's choice)
    spec = spec_config_from_vllm({"method": "mtp", "num_speculative_tokens": k}, [0.7]) if k else None
    args = EngineArgs(model=name, gpu=gpu, tensor_parallel_size=tp, enable_prefix_caching=pc,
                      kv_cache_memory_bytes=40 * GIB, max_model_len=32768, max_num_batched_tokens=8192,
                      speculative_config=spec)
    budget = build_memory(resolve_engine(args))
    got = {"block_size": budget.block_size, "attn_page_bytes": budget.layout.page_bytes,
           "bytes_per_block": budget.bytes_per_block, "num_blocks": budget.num_gpu_blocks,
           "logged_tokens": budget.logged_kv_cache_tokens(32768), "max_concurrency": budget.max_concurrency(32768)}
    assert got == {k: want[k] for k in got}


def test_a_pool_too_small_for_one_request_is_refused_by_both(planner, tmp_path):
    """Qwen3.5-122B-A10B TP 2 at 262,144 tokens with ~3 GiB: vLLM's planner refuses to start, and
    so does ours (one request needs 125 attention blocks of 2,112 tokens + 3 x 3 state blocks, 134,
    against the 123 usable besides the null block)."""
    available = 3 * GIB + 777
    with pytest.raises(ValueError, match="max_model_len"):
        planner.vllm_mamba_plan("Qwen/Qwen3.5-122B-A10B", 2, 1, available, 262144, 8192, True)
    _, budget = _ours("Qwen/Qwen3.5-122B-A10B", 2, 1, True, "auto", None, available, 262144, tmp_path)
    assert (budget.num_gpu_blocks, budget.layout.blocks_per_request(262144, 0)) == (124, 134)
    assert budget.start_error(262144).startswith("vLLM would not start: one request of max_model_len 262144 needs 134")
