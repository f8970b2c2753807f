"""--kv-cache-dtype and --quantization, as vLLM 0.33 resolves them: "auto" keeps the checkpoint's
KV scheme and an explicit value wins; --quantization fp8 quantizes an unquantized checkpoint
online. And what follows (KV bytes per token, the KV budget, weights, attention ops, the CLI)."""

import json

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.cost_model import RooflineCostModel
from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from simulator.engine_args import KV_CACHE_DTYPES, EngineArgs
from simulator.simulation import build_memory, resolve_engine

BF16_MODEL = "meta-llama/Llama-3.1-8B"                     # no quantization_config: bf16 KV
FP8_KV_MODEL = "nvidia/Llama-3.3-70B-Instruct-FP8"         # modelopt, kv_cache_quant_algo FP8
runner = CliRunner()


def kv_bytes(model: str, dtype: str) -> float:
    return resolve_engine(EngineArgs(model=model, kv_cache_dtype=dtype, max_model_len=4096)).model.quant.kv_bytes_per_elem


def test_auto_keeps_the_checkpoint_scheme_and_an_explicit_value_wins():
    assert kv_bytes(BF16_MODEL, "auto") == 2.0
    assert kv_bytes(FP8_KV_MODEL, "auto") == 1.0
    for dtype, want in (("bfloat16", 2.0), ("float16", 2.0), ("fp8", 1.0), ("fp8_e4m3", 1.0), ("fp8_e5m2", 1.0)):
        assert kv_bytes(BF16_MODEL, dtype) == want, dtype
        assert kv_bytes(FP8_KV_MODEL, dtype) == want, dtype
    # only the KV cache changes: the weights stay as the checkpoint stores them
    a = resolve_engine(EngineArgs(model=FP8_KV_MODEL, max_model_len=4096)).model
    b = resolve_engine(EngineArgs(model=FP8_KV_MODEL, kv_cache_dtype="bfloat16", max_model_len=4096)).model
    assert (a.quant.method, a.quant.weight_bytes_per_param) == (b.quant.method, b.quant.weight_bytes_per_param)


def test_auto_is_the_model_dtype_before_vllm_0_14():
    """resolve_kv_cache_dtype_string comes in with 0.14: before, "auto" stores the model dtype
    (bf16) even for a modelopt FP8-KV checkpoint, and only an explicit fp8 stores FP8."""
    def kv(version, dtype="auto"):
        return resolve_engine(EngineArgs(model=FP8_KV_MODEL, kv_cache_dtype=dtype, max_model_len=4096,
                                         vllm_version=version)).model.quant.kv_bytes_per_elem
    assert [kv(v) for v in ("0.11.2", "0.12.0", "0.13.0", "0.14.0", "0.33.0")] == [2.0, 2.0, 2.0, 1.0, 1.0]
    assert (kv("0.12.0", "fp8"), kv("0.14.0", "bfloat16")) == (1.0, 2.0)
    assert resolve_engine(EngineArgs(model=BF16_MODEL, max_model_len=4096, vllm_version="0.12.0")
                          ).model.quant.kv_bytes_per_elem == 2.0


def test_fp8_kv_halves_the_page_and_doubles_the_blocks():
    args = dict(model=BF16_MODEL, gpu="H100", max_model_len=8192)
    b16 = build_memory(resolve_engine(EngineArgs(**args)))
    b8 = build_memory(resolve_engine(EngineArgs(**args, kv_cache_dtype="fp8")))
    assert b16.bytes_per_block == 32 * 2 * 16 * 8 * 128 * 2
    assert b8.bytes_per_block * 2 == b16.bytes_per_block
    assert b8.kv_bytes == b16.kv_bytes                      # same memory, half the bytes per token
    assert b8.num_gpu_blocks == b8.kv_bytes // b8.bytes_per_block
    assert b8.num_gpu_blocks in (2 * b16.num_gpu_blocks, 2 * b16.num_gpu_blocks + 1)


def test_attention_ops_carry_the_resolved_kv_bytes():
    for dtype, want in (("auto", 2.0), ("fp8", 1.0)):
        r = resolve_engine(EngineArgs(model=BF16_MODEL, kv_cache_dtype=dtype, max_model_len=4096))
        engine = BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu), r.cudagraph_config())
        (op, _), = engine.attention_ops(BatchShape((1, 1), (1000, 2000)))
        assert op.kv_bytes_per_elem == want


def test_bad_value_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"--kv-cache-dtype 'fp8_ds_mla' is not one of auto, float16, bfloat16, "
                                         r"fp8, fp8_e4m3, fp8_e5m2"):
        EngineArgs(kv_cache_dtype="fp8_ds_mla")
    assert KV_CACHE_DTYPES[0] == "auto"


def test_cli_flags():
    res = runner.invoke(app, ["memory", "--model", BF16_MODEL, "--kv-cache-dtype", "fp8", "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert (report["kv_cache_dtype"], report["kv_bytes_per_elem"], report["bytes_per_block"]) == ("fp8", 1.0, 1 << 20)
    res = runner.invoke(app, ["simulate", "--kv-cache-dtype", "int8"])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "--kv-cache-dtype 'int8' is not one of" in lines[0], res.output


def test_online_fp8_quantizes_every_linear_and_keeps_the_kv_dtype():
    r = resolve_engine(EngineArgs(model="Qwen/Qwen3-32B", quantization="fp8", max_model_len=4096))
    q = r.model.quant
    assert (q.method, q.weight_bytes_per_param, q.kv_bytes_per_elem) == ("fp8", 1.0, 2.0)
    assert q.quantized_parts == ("attention", "dense_mlp", "shared_experts", "routed_experts", "linear_attention")
    one = ParallelSpec()
    # the bytes of the catalogue config that stood for this flag before it existed
    # (Qwen/Qwen3-32B-FP8-online: quantization_config {"quant_method": "fp8", "activation_scheme": "dynamic"})
    assert r.model.weight_bytes_per_rank(one) == 34_318_592_000
    assert load_model_spec("Qwen/Qwen3-32B").weight_bytes_per_rank(one) == 65_524_213_760
    both = resolve_engine(EngineArgs(model="Qwen/Qwen3-32B", quantization="fp8", kv_cache_dtype="fp8",
                                     max_model_len=4096)).model.quant
    assert (both.method, both.kv_bytes_per_elem) == ("fp8", 1.0)


def test_quantization_is_refused_on_a_quantized_checkpoint_and_for_other_methods():
    with pytest.raises(ValueError, match=r"--quantization fp8 needs an unquantized checkpoint; "
                                         r"nvidia/Llama-3.3-70B-Instruct-FP8 is already quantized \(fp8\)"):
        resolve_engine(EngineArgs(model=FP8_KV_MODEL, quantization="fp8", max_model_len=4096))
    with pytest.raises(ValueError, match=r"--quantization 'awq' is not simulated; valid: fp8"):
        EngineArgs(quantization="awq")


def _gemm_and_moe(model: str, gpu: str, tp: int):
    r = resolve_engine(EngineArgs(model=model, gpu=gpu, tensor_parallel_size=tp, max_model_len=4096))
    eng = BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu), r.cudagraph_config())
    ops = [op for op, _ in eng.layer_ops(64)]
    qkv = next(op for op in ops if getattr(op, "name", "") == "qkv_proj")
    moe = next((op for op in ops if op.family == "moe"), None)
    return qkv, moe


def test_quantized_math_needs_the_gpus_tensor_cores():
    """vLLM runs FP8 weights with FP8 math from compute capability 8.9 and NVFP4 with FP4 math from
    10.0; below, a weight-only Marlin kernel (bf16 math on the same weight bytes), which no measured
    table holds (key fp8_wo: the roofline prices it at the bf16 rate)."""
    from calibration.features import gemm_dtype
    a100, l40s = _gemm_and_moe("nvidia/Llama-3.1-8B-Instruct-FP8", "A100-80GB", 1)[0], \
        _gemm_and_moe("nvidia/Llama-3.1-8B-Instruct-FP8", "L40S", 1)[0]
    assert (a100.compute_dtype, a100.weight_bytes_per_param, gemm_dtype(a100)) == ("bf16", 1.0, "fp8_wo")
    assert (l40s.compute_dtype, gemm_dtype(l40s)) == ("fp8", "fp8")
    for gpu, math in (("H100", "bf16"), ("B200", "fp4")):
        qkv, moe = _gemm_and_moe("nvidia/Qwen3-235B-A22B-NVFP4", gpu, 8)
        assert (qkv.compute_dtype, moe.compute_dtype, moe.weight_bytes_per_param) == (math, math, 0.5625), gpu
    # W8A16 on an A100 (roofline): the weight bytes of fp8, the FLOP rate of bf16, and no
    # activation-quantization kernel (W8A8's second kernel, 2.5 us)
    roof = RooflineCostModel(resolve_engine(EngineArgs(model=BF16_MODEL, gpu="A100-80GB")).gpu)
    t = {(wb, dt, m): roof.kernel_time_s(a100.__class__("x", m, 4096, 4096, wb, 2.0, dt))
         for wb, dt in ((1.0, "bf16"), (2.0, "bf16"), (1.0, "fp8")) for m in (1, 8192)}
    assert t[(1.0, "bf16", 1)] < 0.6 * t[(2.0, "bf16", 1)] and t[(1.0, "bf16", 8192)] == t[(2.0, "bf16", 8192)]
    assert t[(1.0, "fp8", 1)] - t[(1.0, "bf16", 1)] == pytest.approx(2.5e-6)


def test_mixed_precision_checkpoint_prices_each_part_in_its_format():
    """nvidia/Qwen3.6-35B-A3B-NVFP4 (modelopt MIXED_PRECISION): FP8 attention projections run FP8
    math (the fp8 GEMM table), the W4A16 NVFP4 experts and LM head bf16 math on 4-bit weights (FP4
    Marlin: the int4_wo tables, the measured weight-only 4-bit kernels), on Hopper and Blackwell."""
    from calibration.features import gemm_dtype, moe_canon_row
    from simulator.batch_engine import BatchShape
    for gpu in ("H100", "B200"):
        r = resolve_engine(EngineArgs(model="nvidia/Qwen3.6-35B-A3B-NVFP4", gpu=gpu, max_model_len=4096,
                                      enable_prefix_caching=False))
        eng = BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu), r.cudagraph_config())
        ops = {getattr(op, "name", op.family): op for op, _ in eng.layer_ops(64)}
        qkv, moe = ops["qkv_proj"], ops["moe"]
        assert (qkv.weight_bytes_per_param, qkv.compute_dtype, gemm_dtype(qkv)) == (1.0, "fp8", "fp8")
        assert (moe.weight_bytes_per_param, moe.compute_dtype, moe.quant_method) == (0.5625, "bf16", "nvfp4_w4a16")
        assert moe_canon_row(moe)["moe_dtype"] == "int4_wo"
        logits = []
        eng.cost_model.op_times_s = lambda o, mode, f=eng.cost_model.op_times_s: logits.extend(o) or f(o, mode)
        eng.step_cost(BatchShape((8,), (0,)))
        head = next(op for op in logits if getattr(op, "name", "") == "lm_head")
        assert (head.weight_bytes_per_param, head.compute_dtype, gemm_dtype(head)) == (0.5625, "bf16", "int4_wo")
