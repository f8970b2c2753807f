"""Nemotron-H (Mamba2 hybrids: Nemotron-H, Nemotron 3 Nano): the block pattern, the Mamba2 state in
the GDN fields, weights, the ops of a step, what is refused, and a run. The KV plan equals vLLM's
own planner in tests/oracle/test_gdn_kv_capacity_oracle.py, the parameters transformers' modules in
tests/oracle/test_nemotron_params_oracle.py."""

from __future__ import annotations

import pytest

from frontier.model_spec import load_model_spec, model_spec_from_config, _catalogue_lookup
from frontier.ops import GdnOp, GemmOp, MoeOp
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine
from simulator.cost_model import RooflineCostModel
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, resolve_engine, run_simulation
from simulator.workload import WorkloadSpec

NANO, H56 = "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "nvidia/Nemotron-H-56B-Base-8K"


def test_the_block_pattern_and_the_mamba2_state():
    m = load_model_spec(NANO)
    assert (m.num_layers, m.num_attention_layers, m.num_linear_attention_layers, m.num_moe_layers,
            m.num_mlp_layers) == (52, 6, 23, 23, 0)
    assert m.block_pattern.startswith("MEMEM*E") and not m.mlp_gated and m.norms_per_layer == 1
    # the Mamba2 mixer in the GDN fields: n_groups 8 of state 128, 64 heads of 64
    assert (m.linear_num_key_heads, m.linear_key_head_dim, m.linear_num_value_heads, m.linear_value_head_dim,
            m.linear_conv_kernel_dim, m.mamba_ssm_dtype) == (8, 128, 64, 64, 4, "float32")
    assert m.linear_conv_dim == 4096 + 2 * 8 * 128
    assert (m.has_attention(5), m.has_ffn(5), m.has_attention(0), m.has_ffn(1), m.is_moe_layer(1)) == (
        True, False, False, True, True)
    dense = load_model_spec(H56)
    assert (dense.num_attention_layers, dense.num_linear_attention_layers, dense.num_mlp_layers,
            dense.num_moe_layers, dense.intermediate_size) == (10, 54, 54, 0, 32768)


def test_weights_equal_transformers_counts():
    # every parameter in bf16: 31,577,937,344 and 56,324,350,464 parameters (transformers' NemotronH modules)
    assert load_model_spec(NANO).weight_bytes_per_rank(ParallelSpec(tp=1)) == 2 * 31_577_937_344
    assert load_model_spec(H56).weight_bytes_per_rank(ParallelSpec(tp=1)) == 2 * 56_324_350_464
    # KV: only the 6 attention layers hold tokens (2 KV heads of 128, bf16)
    assert load_model_spec(NANO).kv_bytes_per_token_per_rank(ParallelSpec(tp=1)) == 6 * 2 * 2 * 128 * 2


def test_config_refusals():
    cfg, _ = _catalogue_lookup(NANO)
    with pytest.raises(ValueError, match="hybrid_override_pattern must give each of 52 layers"):
        model_spec_from_config({**cfg, "hybrid_override_pattern": "M*"}, "x")
    with pytest.raises(ValueError, match="n_groups=0"):
        model_spec_from_config({**cfg, "n_groups": 0}, "x")


def test_the_ops_of_a_step():
    r = resolve_engine(EngineArgs(model=NANO, gpu="H100", tensor_parallel_size=2, enable_prefix_caching=False))
    engine = BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu), r.cudagraph_config())
    ops = {getattr(op, "name", type(op).__name__): (op, n) for op, n in engine.layer_ops(64)}
    # one fused add + norm and one all-reduce a block; no post-attention norm
    assert ops["input_norm"][1] == 52 and "post_norm" not in ops
    assert ops["CommOp"][1] == 52
    # Mamba2's in_proj: z, x (2 x 4096), B, C (2 x 8 x 128) and dt (64), split by TP 2
    assert ops["mamba_in_proj"] == (GemmOp("mamba_in_proj", 64, (2 * 4096 + 2 * 1024 + 64) // 2, 2688), 23)
    assert ops["mamba_out_proj"] == (GemmOp("mamba_out_proj", 64, 2688, 2048), 23)
    assert ops["qkv_proj"][1] == 6
    moe, n = ops["MoeOp"]
    assert n == 23 and isinstance(moe, MoeOp) and not moe.gated and moe.inter == 1856 // 2
    assert moe.flops == 4.0 * 2688 * 928 * moe.routed_pairs      # up 2hI + down 2hI (not gated)
    assert ops["shared_up_proj"] == (GemmOp("shared_up_proj", 64, 3712 // 2, 2688), 23)      # relu2: up, down
    gdn = engine.gdn_ops((500, 1), (0, 700))
    assert [(op.kernel, n) for op, n in gdn] == [("conv1d", 23), ("ssd", 23)]
    assert gdn[1][0] == GdnOp((500,), 1, 32, 128, 64, 4, 4.0, 2.0, 0, "ssd")


def test_what_is_refused():
    def resolve(**kw):
        return resolve_engine(EngineArgs(model=NANO, gpu="H100", **kw))
    with pytest.raises(ValueError, match="with --pipeline-parallel-size > 1 is not simulated"):
        resolve(enable_prefix_caching=False, pipeline_parallel_size=2)
    with pytest.raises(ValueError, match="with --architecture afd is not simulated"):
        run_simulation(SimulationSpec(engine=EngineArgs(model=NANO, gpu="H100", enable_prefix_caching=False),
                                      architecture="afd", workload=WorkloadSpec(num_prompts=2)))


def test_a_run():
    spec = SimulationSpec(engine=EngineArgs(model=NANO, gpu="H100", tensor_parallel_size=2, enable_prefix_caching=False),
                          workload=WorkloadSpec(num_prompts=50, request_rate=10.0, random_input_len=1000,
                                                random_output_len=50), debug=True)
    result = run_simulation(spec)
    assert result.summary["completed"] == 50 and result.summary["failed"] == 0
    assert result.memory.block_size == 2096 and result.memory.layout.mamba_blocks_per_request == 1


def test_prefix_caching_in_the_align_mode():
    # vLLM's default: the "align" mamba cache mode (blocks of 2,096 tokens at TP 2: no 64-token grid
    # for Mamba2's checkpoints), 3 state blocks a request and group; shared prefixes hit
    spec = SimulationSpec(engine=EngineArgs(model=NANO, gpu="H100", tensor_parallel_size=2),
                          workload=WorkloadSpec(num_prompts=40, request_rate=5.0, random_input_len=300,
                                                random_prefix_len=5000, random_output_len=20), debug=True)
    result = run_simulation(spec)
    assert result.summary["completed"] == 40
    assert (result.memory.block_size, result.memory.layout.mamba_blocks_per_request) == (2096, 3)
    assert result.summary["prefix_cache_hits"] == 39 * 4192        # the prefix's 2 whole blocks, after the first


def test_layers_block_type_configs():
    # newer configs (Nemotron 3.5 Lightning, Ultra) name each layer's block instead of the pattern
    m = load_model_spec("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4")
    assert m.block_pattern == load_model_spec(NANO).block_pattern and m.num_layers == 52
    cfg, _ = _catalogue_lookup("nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-NVFP4")
    with pytest.raises(ValueError, match="layers_block_type holds 'ssm'; valid: mamba, attention, mlp, moe"):
        model_spec_from_config({**cfg, "layers_block_type": ["ssm"] + cfg["layers_block_type"][1:]}, "x")
    # Ultra's config has no num_hidden_layers: its block names count them
    ultra_cfg, _ = _catalogue_lookup("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16")
    ultra = load_model_spec("nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16")
    assert "num_hidden_layers" not in ultra_cfg and ultra.num_layers == len(ultra_cfg["layers_block_type"])
    assert ultra.moe_latent_size == 2048


def test_latent_moe():
    # Nemotron 3 Super: 512 experts over a 1,024-wide latent; the rank's tokens are projected to it
    # before the dispatch and back after (replicated bf16 linears), the shared expert sees 4,096
    m = load_model_spec("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8")
    assert (m.moe_latent_size, m.num_experts, m.num_experts_per_tok, m.hidden_size) == (1024, 512, 22, 4096)
    r = resolve_engine(EngineArgs(model="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8", gpu="H100",
                                  tensor_parallel_size=4))
    engine = BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu), r.cudagraph_config())
    ops = {getattr(op, "name", type(op).__name__): op for op, _ in engine.layer_ops(32)}
    assert ops["moe_latent_in"] == GemmOp("moe_latent_in", 32, 1024, 4096)
    assert ops["moe_latent_out"] == GemmOp("moe_latent_out", 32, 4096, 1024)
    assert (ops["MoeOp"].hidden, ops["MoeOp"].inter) == (1024, 2688 // 4)
    assert ops["shared_up_proj"] == GemmOp("shared_up_proj", 32, 5376 // 4, 4096, 1.0, 2.0, "fp8")


def test_prefill_decode_disaggregation():
    # P/D as for Gated DeltaNet hybrids (NixlConnector's one-token backoff for Mamba states): the
    # prefill role hits a 6,000-token shared prefix's 2 whole blocks of 2,096 tokens
    from simulator.control_plane import PddSpec, RoleLayout
    spec = SimulationSpec(engine=EngineArgs(model=NANO, gpu="H100"), architecture="pdd",
                          pdd=PddSpec(prefill=RoleLayout("prefill", tp=2), decode=RoleLayout("decode", tp=2)), debug=True,
                          workload=WorkloadSpec(num_prompts=30, request_rate=4.0, random_input_len=500,
                                                random_prefix_len=6000, random_output_len=20))
    result = run_simulation(spec)
    assert (result.summary["completed"], result.summary["failed"]) == (30, 0)
    # 28 of 30 hit both blocks (the first two arrive before the first prefill has cached them); the
    # prefill role looks up each prompt less its last token (the backoff): 30 x 6,499
    assert (result.summary["prefix_cache_hits"], result.summary["prefix_cache_queries"]) == (28 * 4192, 30 * 6499)
