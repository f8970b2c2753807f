"""--vllm-version: which release's model kernels, KV budget and engine defaults to reproduce (simulator/vllm_version.py)."""

import pytest

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from simulator.engine_args import EngineArgs
from simulator.simulation import SimulationSpec, run_simulation
from simulator.vllm_version import DEFAULT, SEMANTICS, moe_dp_chunk_note, parse_vllm_version
from simulator.workload import WorkloadSpec


def test_release_strings_parse_to_major_minor():
    assert parse_vllm_version("0.19.0") == (0, 19)
    assert parse_vllm_version("v0.23") == (0, 23)
    assert parse_vllm_version(" 0.33.1 ") == (0, 33) == SEMANTICS
    assert parse_vllm_version("0.10.2") == (0, 10)
    assert parse_vllm_version(DEFAULT) == SEMANTICS


@pytest.mark.parametrize("text, needle", [
    ("banana", "--vllm-version 'banana' is not a vLLM release; give MAJOR.MINOR[.PATCH], e.g. 0.19.0 "
               "(valid: 0.10 to 0.33)"),
    ("0.19.0rc1", "'0.19.0rc1' is not a vLLM release"),
    ("0.9.2", "--vllm-version 0.9.2 is outside 0.10 to 0.33, the releases the simulator knows"),
    ("0.34.0", "--vllm-version 0.34.0 is outside 0.10 to 0.33"),
    (None, "None is not a vLLM release"),
    (0.2, '--vllm-version 0.2 is a number, not a release (a scenario file reads 0.20 as 0.2); quote it, '
          'e.g. vllm-version: "0.20.0"'),
])
def test_bad_versions_are_refused_with_what_is_valid(text, needle):
    with pytest.raises(ValueError) as err:
        parse_vllm_version(text)
    assert needle in str(err.value)
    with pytest.raises(ValueError, match="vllm-version"):
        EngineArgs(vllm_version=text)


def test_resolved_engine_carries_the_version():
    args = EngineArgs(model="MiniMaxAI/MiniMax-M2.5", gpu="H200", tensor_parallel_size=4, vllm_version="0.19.0")
    resolved = args.resolve(load_model_spec(args.model), get_gpu(args.gpu))
    assert resolved.vllm_version == (0, 19)
    assert EngineArgs().vllm_version == "0.33.0"


def _tpot_ms(model: str, version: str) -> float:
    spec = SimulationSpec(
        engine=EngineArgs(model=model, gpu="H200", tensor_parallel_size=4, max_model_len=4096, vllm_version=version),
        workload=WorkloadSpec(num_prompts=8, random_input_len=256, random_output_len=16, seed=0),
        max_concurrency=4)
    return run_simulation(spec).summary["mean_tpot_ms"]


def test_the_version_reaches_the_priced_steps():
    """MiniMax-M2.5 decodes at TP 4 before 0.23 pay the cast + SGEMM router and the unfused q/k
    norm (two more kernels per layer each); from 0.23 on the prices are 0.33's. A model without
    those kernels prices the same under every version."""
    old, new, now = (_tpot_ms("MiniMaxAI/MiniMax-M2.5", v) for v in ("0.22.0", "0.23.0", "0.33.0"))
    assert old > new * 1.01 and new == now
    assert _tpot_ms("Qwen/Qwen3-30B-A3B", "0.12.0") == _tpot_ms("Qwen/Qwen3-30B-A3B", "0.33.0")


def test_engine_defaults_of_earlier_releases():
    """B200 (>= 160 GiB): 16384 batched tokens and a 1024-token capture ceiling from vLLM 0.28;
    8192 and 512 before. H100 is not affected."""
    def resolve(gpu, version):
        args = EngineArgs(model="meta-llama/Llama-3.1-8B", gpu=gpu, vllm_version=version)
        return args.resolve(load_model_spec(args.model), get_gpu(gpu))
    new, old = resolve("B200", "0.28.0"), resolve("B200", "0.27.0")
    assert (new.max_num_batched_tokens, new.max_num_seqs, new.cudagraph_config().max_capture_size) == (16384, 1024, 1024)
    assert (old.max_num_batched_tokens, old.max_num_seqs, old.cudagraph_config().max_capture_size) == (8192, 1024, 512)
    assert resolve("H100", "0.12").max_num_batched_tokens == resolve("H100", "0.33").max_num_batched_tokens == 8192


def test_moe_dp_chunks_before_0_20_are_a_pricing_note():
    """vLLM 0.12-0.19 chunk the MoE by 256 tokens per rank with these kernels under DP x EP; not
    modelled, so a run says so. 0.20+ (the 256-token budget instead), DP 1, EP 1 or another
    kernel: no note."""
    note = moe_dp_chunk_note((0, 19), "deepep_low_latency", 2, 2)
    assert note.startswith("vLLM 0.19 runs the MoE layers with --all2all-backend deepep_low_latency in chunks of "
                           "256 tokens per DP rank (VLLM_MOE_DP_CHUNK_SIZE)")
    assert moe_dp_chunk_note((0, 12), "flashinfer_all2allv", 8, 8) is not None
    assert [moe_dp_chunk_note(*a) for a in (((0, 20), "deepep_low_latency", 2, 2), ((0, 19), "deepep_high_throughput",
            2, 2), ((0, 19), "deepep_low_latency", 1, 2), ((0, 19), "deepep_low_latency", 2, 1))] == [None] * 4


def test_chunked_prefill_off_raises_the_defaulted_budget_to_max_model_len():
    """--no-enable-chunked-prefill: the defaulted budget is max(max_model_len, the tier's) from vLLM 0.12,
    max_model_len before; the min(max_num_seqs x max_model_len, ...) clamp came with 0.12 too. A
    given budget below max_model_len is refused (vLLM's verify_max_model_len)."""
    model, h100 = load_model_spec("meta-llama/Llama-3.1-8B"), get_gpu("H100")

    def tokens(**kw):
        return EngineArgs(model=model.name, **kw).resolve(model, h100).max_num_batched_tokens
    assert tokens(enable_chunked_prefill=False, max_model_len=16384) == 16384
    assert tokens(enable_chunked_prefill=False, max_model_len=4096) == 8192
    assert tokens(enable_chunked_prefill=False, max_model_len=4096, vllm_version="0.11.0") == 4096
    assert tokens(max_num_seqs=2, max_model_len=2048) == 4096
    assert tokens(max_num_seqs=2, max_model_len=2048, vllm_version="0.11.0") == 8192
    off = EngineArgs(model=model.name, enable_chunked_prefill=False, max_model_len=16384).resolve(model, h100)
    assert off.scheduler_config().enable_chunked_prefill is False
    short = EngineArgs(model=model.name, enable_chunked_prefill=False, max_model_len=16384, max_num_batched_tokens=2048)
    with pytest.raises(ValueError, match="must be >= max_model_len=16384 when chunked prefill is off"):
        short.resolve(model, h100).scheduler_config()


def test_deepep_high_throughput_with_dp_runs_without_cuda_graphs():
    """Its kernels are not CUDA-graph compatible: vLLM 0.11+ sets cudagraph_mode NONE (even a user's
    FULL), 0.10 PIECEWISE; one DP rank or another backend keeps the graphs."""
    def mode(**kw):
        return EngineArgs(model="Qwen/Qwen3-30B-A3B", enable_expert_parallel=True, **kw).effective_cudagraph_mode
    ht = dict(all2all_backend="deepep_high_throughput", data_parallel_size=2)
    assert mode(**ht) == "NONE" and mode(**ht, cudagraph_mode="FULL") == "NONE"
    assert mode(**ht, vllm_version="0.10.2") == "PIECEWISE" and mode(**ht, cudagraph_mode="NONE") == "NONE"
    assert mode(all2all_backend="deepep_high_throughput") == mode(**{**ht, "all2all_backend": "deepep_low_latency"}) \
        == "FULL_AND_PIECEWISE"
    model = load_model_spec("Qwen/Qwen3-30B-A3B")
    resolved = EngineArgs(model=model.name, enable_expert_parallel=True, **ht).resolve(model, get_gpu("H200"))
    assert resolved.cudagraph_config().capture_sizes == ()


def test_performance_mode():
    """vLLM 0.17+: throughput doubles the defaulted batch limits (a given one stays), interactivity
    captures every CUDA-graph size 1..32 before the usual grid; refused for earlier releases."""
    model, h100 = load_model_spec("meta-llama/Llama-3.1-8B"), get_gpu("H100")

    def resolve(**kw):
        return EngineArgs(model=model.name, **kw).resolve(model, h100)
    fast = resolve(performance_mode="throughput")
    assert (fast.max_num_batched_tokens, fast.max_num_seqs) == (16384, 2048)
    given = resolve(performance_mode="throughput", max_num_seqs=64)
    assert (given.max_num_batched_tokens, given.max_num_seqs) == (16384, 64)
    ll = EngineArgs(model=model.name, data_parallel_size=2, enable_expert_parallel=True, performance_mode="throughput",
                    all2all_backend="deepep_low_latency").resolve(model, h100)
    assert (ll.max_num_batched_tokens, ll.max_num_seqs) == (512, 512)
    sizes = resolve(performance_mode="interactivity").cudagraph_config().capture_sizes
    assert sizes[:34] == tuple(range(1, 33)) + (40, 48)
    assert sizes[32:] == resolve().cudagraph_config().capture_sizes[7:]     # 1, 2, 4, 8, 16, 24, 32 before
    assert resolve(performance_mode="interactivity", vllm_version="0.17.0").max_num_seqs == 1024
    with pytest.raises(ValueError, match=r"^--performance-mode came with vLLM 0.17; --vllm-version 0.16.0 has none"):
        EngineArgs(model=model.name, performance_mode="throughput", vllm_version="0.16.0")
    with pytest.raises(ValueError, match=r"^--performance-mode 'fast' is not one of balanced, interactivity, throughput"):
        EngineArgs(model=model.name, performance_mode="fast")


def test_a_defaulted_max_num_seqs_follows_a_smaller_token_budget():
    """Every release from 0.11 (``default_max_num_seqs`` capped by ``max_num_batched_tokens``; 0.12+
    ``max_num_seqs = min(max_num_seqs, max_num_batched_tokens)`` when defaulted): a budget of 512
    tokens runs at most 512 requests; before 2026-12-01 the simulator refused it (512 < 1024)."""
    model = load_model_spec("meta-llama/Llama-3.1-8B")
    for version in ("0.11.0", "0.33.0"):
        r = EngineArgs(model=model.name, max_num_batched_tokens=512, vllm_version=version).resolve(model, get_gpu("H100"))
        assert (r.max_num_batched_tokens, r.max_num_seqs) == (512, 512)
    given = EngineArgs(model=model.name, max_num_batched_tokens=512, max_num_seqs=600)
    with pytest.raises(ValueError, match="max_num_batched_tokens=512; must be >= max_num_seqs=600"):
        given.resolve(model, get_gpu("H100")).scheduler_config()


@pytest.mark.parametrize("version, sm, method, moe_tp, ep, kernel", [
    ((0, 12), 90, "fp8_block", 2, 1, "DeepGEMM"),          # Qwen3-235B-A22B-FP8 TP 2 on an H200
    ((0, 14), 90, "fp8_block", 1, 4, "DeepGEMM"),          # under EP the MoE TP size is 1
    ((0, 13), 90, "fp8_block", 8, 1, None),                # MoE TP >= 8: Triton, the table's kernel
    ((0, 16), 90, "fp8_block", 4, 1, "FlashInfer CUTLASS"),
    ((0, 15), 90, "fp8_block", 4, 1, "FlashInfer CUTLASS"),
    ((0, 16), 90, "fp8_block", 1, 8, None),                # FlashInfer CUTLASS at EP > 1: the table's kernel
    ((0, 17), 90, "fp8_block", 4, 1, None),                # from 0.17 the tables' own rule
    ((0, 11), 90, "fp8_block", 2, 1, None),                # not read: no claim
    ((0, 12), 100, "fp8_block", 2, 1, None),               # Blackwell
    ((0, 12), 90, "fp8", 2, 1, None),                      # per-tensor fp8
])
def test_moe_kernel_note_names_the_untimed_kernel(version, sm, method, moe_tp, ep, kernel):
    from simulator.vllm_version import moe_kernel_note
    note = moe_kernel_note(version, sm, method, moe_tp, ep)
    assert (note is None) == (kernel is None)
    if kernel:
        assert note.startswith(f"vLLM {version[0]}.{version[1]} runs these block-FP8 experts") and kernel in note


def test_a_run_notes_the_moe_kernel_it_does_not_time():
    """summary["pricing_notes"] (printed as "note: ..." by frontier simulate): Qwen3-235B-A22B-FP8 at TP 2
    under vLLM 0.12 runs DeepGEMM's padded grouped GEMM; under 0.18 the tables' Triton; a dense model none."""
    def notes(model, version, **engine):
        spec = SimulationSpec(engine=EngineArgs(model=model, gpu="H200", max_model_len=4096, vllm_version=version,
                                                **engine),
                              workload=WorkloadSpec(num_prompts=2, random_input_len=64, random_output_len=4, seed=0))
        return run_simulation(spec).summary["pricing_notes"]
    (deepgemm,) = notes("Qwen/Qwen3-235B-A22B-FP8", "0.12.0", tensor_parallel_size=2)
    assert "MoE TP 2 < 8" in deepgemm and "calibrated costs price vLLM 0.24's Triton kernel" in deepgemm
    assert notes("Qwen/Qwen3-235B-A22B-FP8", "0.18.0", tensor_parallel_size=2) == []
    assert notes("meta-llama/Llama-3.1-8B", "0.12.0") == []


def test_max_model_len_auto_fits_the_kv_cache():
    """--max-model-len auto / -1 (vLLM 0.14+): the longest request whose blocks fit besides the null
    block, at most the model's length; refused for earlier releases."""
    from simulator.simulation import SimulationSpec, build_memory, fit_max_model_len, resolve_engine, run_simulation
    from simulator.workload import WorkloadSpec

    args = EngineArgs(model="meta-llama/Llama-3.1-8B", max_model_len=-1, gpu_memory_utilization=0.3)
    resolved = resolve_engine(args)
    assert resolved.max_model_len == 131072                      # the model's, until the memory is known
    memory = build_memory(resolved)
    fitted = fit_max_model_len(resolved, memory)
    assert fitted.max_model_len == (memory.num_gpu_blocks - 1) * 16 == 55392
    assert memory.start_error(55392) is None and memory.start_error(55393) is not None
    roomy = resolve_engine(EngineArgs(model="meta-llama/Llama-3.1-8B", max_model_len=-1))
    assert fit_max_model_len(roomy, build_memory(roomy)).max_model_len == 131072     # the model's fits
    result = run_simulation(SimulationSpec(engine=args, workload=WorkloadSpec(num_prompts=4, random_input_len=100,
                                                                              random_output_len=4)))
    assert result.resolved.max_model_len == 55392
    with pytest.raises(ValueError, match=r"^--max-model-len auto \(-1\) came with vLLM 0.14; --vllm-version 0.12.0"):
        EngineArgs(max_model_len=-1, vllm_version="0.12.0")
    with pytest.raises(ValueError, match="--max-model-len must be a positive integer, got -2"):
        EngineArgs(max_model_len=-2)
