"""P/D disaggregation of a Gated DeltaNet hybrid (Qwen3.5-35B-A3B) behind NixlConnector, in both of
vLLM's mamba cache modes ("align" with prefix caching, the default; "none" without): the prefill
role computes all but each prompt's last token, the pull moves the full-attention KV of those tokens
and every GDN layer's state, the decode role recomputes the last prompt token in its first step.
Under --architecture afd the attention role holds the GDN layers. The scheduler paths are checked
against vLLM's in tests/oracle/test_pd_state_parity.py."""

import pytest

from frontier.ops import ElementwiseOp
from simulator.afd import AfdRole, AfdSpec
from simulator.control_plane import PddSpec, RoleLayout, kv_pull
from simulator.engine_args import EngineArgs
from simulator.kv_cache.state import StateKVCacheManager
from simulator.kv_cache.state_align import AlignStateKVCacheManager
from simulator.request import Request, RequestSpec
from simulator.simulation import SimulationSpec, run_simulation
from simulator.spec_decode import spec_config_from_vllm
from simulator.workload import WorkloadSpec

QWEN35 = dict(model="Qwen/Qwen3.5-35B-A3B", gpu="H100", max_model_len=8192)


def _spec(architecture="pdd", prefix_len=0, **engine):
    return SimulationSpec(engine=EngineArgs(**{**QWEN35, "enable_prefix_caching": False, **engine}),
                          workload=WorkloadSpec(num_prompts=8, random_input_len=2000, random_output_len=8,
                                                random_prefix_len=prefix_len),
                          architecture=architecture, pdd=PddSpec() if architecture == "pdd" else None, debug=True)


def test_a_deferred_free_returns_the_state_blocks_with_the_attention_blocks():
    kv = StateKVCacheManager(40, 16, 4096, num_state_groups=3)
    request = Request.from_spec(RequestSpec("a", 0.0, 40, 4), 16)
    blocks = kv.allocate_slots(request, 40)
    assert len(blocks) == 3 + 3 and kv.num_free_blocks == 39 - 6
    kv.defer_free(request, fence_seq=5)
    assert list(kv.deferred_frees) == [(5, blocks)] and kv.num_free_blocks == 39 - 6
    kv.drain_deferred_frees(4)
    assert kv.num_free_blocks == 39 - 6
    kv.drain_deferred_frees(5)
    assert kv.num_free_blocks == 39 and not kv.state_blocks and not kv.req_to_blocks


@pytest.mark.parametrize("caching, block, manager", [(False, 1056, StateKVCacheManager),
                                                     (True, 1088, AlignStateKVCacheManager)])
def test_pdd_prefills_all_but_the_last_token_and_pulls_kv_and_states(caching, block, manager):
    result = run_simulation(_spec(enable_prefix_caching=caching))
    assert result.summary["completed"] == 8 and result.summary["failed"] == 0
    prefill, decode = result.roles
    assert (prefill.resolved.block_size, decode.resolved.block_size) == (block, block)    # the aligned block
    assert all(type(r.scheduler.kv) is manager for role in result.roles for r in role.cluster.replicas)
    steps = result.trace.step_cols
    prefill_tokens = sum(n for role, n in zip(steps["role"], steps["num_tokens"]) if role == "P")
    assert prefill_tokens == 8 * 1999
    # 10 full-attention layers x 2 KV heads x 256 x 2 (K, V) x 2 bytes = 20,480 bytes a token;
    # 30 GDN layers x (3 x 8,192 x 2 conv + 32 x 128 x 128 x 4 temporal) = 64,389,120 bytes a request
    pull = kv_pull(decode.resolved.model, prefill, decode)
    assert (pull.full_bytes_per_token, pull.state_bytes) == (20_480, 30 * 2_146_304)
    assert pull.num_bytes(0, 1999) == 1999 * 20_480 + 64_389_120
    assert all(r.kv_transfer_s > 0 and r.output_len == 8 for r in result.records)


@pytest.mark.parametrize("caching, block", [(False, 1072), (True, 1088)])
def test_pdd_with_an_mtp_drafter_pulls_the_mtp_layer_and_the_longer_conv_state(caching, block):
    """MTP with 2 drafts: the MTP layer's KV joins the pull (11 attention layers: 22,528 bytes a
    token) and each GDN layer's conv state holds 2 more rows (2,179,072 bytes a layer); without
    prefix caching each GDN group holds 1 + 2 state blocks a request; with it (behind the
    connector, EAGLE's block drop) the align manager drops the last hit block. The decode role
    verifies drafts."""
    spec = spec_config_from_vllm({"method": "mtp", "num_speculative_tokens": 2}, [0.8, 0.6])
    result = run_simulation(_spec(speculative_config=spec, enable_prefix_caching=caching))
    assert result.summary["completed"] == 8 and result.summary["failed"] == 0
    prefill, decode = result.roles
    assert (prefill.resolved.block_size, decode.resolved.block_size) == (block, block)
    pull = kv_pull(decode.resolved.model, prefill, decode)
    assert (pull.full_bytes_per_token, pull.state_bytes) == (11 * 2048, 30 * 2_179_072)
    kv = decode.cluster.replicas[0].scheduler.kv
    if caching:
        assert type(kv) is AlignStateKVCacheManager and kv.drop_last_hit_block and kv.spec_blocks == 2
    else:
        assert type(kv) is StateKVCacheManager and kv.blocks_per_request == 3 * 3
    assert result.summary["spec_num_draft_tokens"] > 0


def test_pdd_with_prefix_caching_hits_kept_states_on_the_prefill_role():
    """8 prompts of a 3,000-token shared prefix + 2,000 own tokens (1,088-token blocks): the first
    prefill keeps no state inside the prefix (its replay boundary lies past it), so the second stops
    its chunk at the full-attention junction (2 blocks) and keeps that state; the other 6 hit it."""
    result = run_simulation(_spec(enable_prefix_caching=True, prefix_len=3000))
    assert result.summary["completed"] == 8
    assert sorted(r.num_prefix_hit_tokens for r in result.records) == [0, 0] + [2176] * 6
    assert (result.summary["prefix_cache_scope"], result.summary["prefix_cache_hits"]) == ("prefill role", 6 * 2176)


@pytest.mark.parametrize("caching, block", [(False, 1056), (True, 1088)])
def test_afd_runs_the_gdn_layers_on_the_attention_role(caching, block):
    """--architecture afd: the attention role (a KV consumer) holds the GDN layers, their states
    and projections; its per-layer time outside the kernels averages the 10 full-attention layers'
    projections and the 30 GDN layers' ones."""
    spec = SimulationSpec(engine=EngineArgs(**QWEN35, enable_prefix_caching=caching),
                          workload=WorkloadSpec(num_prompts=8, random_input_len=2000, random_output_len=8),
                          architecture="afd", afd=AfdSpec(attention=AfdRole("attention"), ffn=AfdRole("ffn", ep=2)),
                          debug=True)
    result = run_simulation(spec)
    assert result.summary["completed"] == 8 and result.summary["failed"] == 0
    prefill, attention = result.roles[0], result.roles[1]
    assert (prefill.resolved.block_size, attention.resolved.block_size) == (block, block)
    manager = AlignStateKVCacheManager if caching else StateKVCacheManager
    assert type(attention.cluster.replicas[0].scheduler.kv) is manager
    steps = result.trace.step_cols
    assert sum(n for role, n in zip(steps["role"], steps["num_tokens"]) if role == "P") == 8 * 1999
    engine = attention.cluster.replicas[0].engine
    a, m = engine.attn, 64
    layer = lambda ops: a._times([(op, 1) for op in ops], "kernel")    # noqa: E731
    base = engine._a_dense_per_layer(m, "kernel") - (10 * layer(a._attn_gemms(m, 16)) + 30 * layer(a._gdn_gemms(m))) / 40
    h = 2048
    assert base == pytest.approx(layer([ElementwiseOp("input_norm", m, h, 4 * h * 2),
                                        ElementwiseOp("post_norm", m, h, 4 * h * 2)]), rel=1e-12)
