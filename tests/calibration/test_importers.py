"""Importers: exact row counts and values from the shared AIConfigurator and Vidur copies."""

from pathlib import Path

import pytest

from calibration.importers.aiconfigurator import import_aiconfigurator, import_aiconfigurator_report
from calibration.importers.vidur import import_vidur_report
from frontier.profile_schema import read_profiles

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
AIC = SHARED / "aiconfigurator"
VIDUR = SHARED / "vidur"
needs_aic = pytest.mark.skipif(not (AIC / "systems" / "data").is_dir(), reason=f"AIC data absent at {AIC}")
needs_vidur = pytest.mark.skipif(not (VIDUR / "data").is_dir(), reason=f"Vidur data absent at {VIDUR}")


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    out = tmp_path_factory.mktemp("aic_h200")
    return import_aiconfigurator_report(AIC, out, gpus=["h200_sxm"]), out


@needs_aic
def test_h200_row_counts(h200):
    report, out = h200
    # gemm 107225; attention = context 50830 + generation 62166 + MLA module 3886 + 5888;
    # moe 49896; comm = custom all-reduce 138 + DeepEP dispatch / combine 324 + nccl 2.26.2
    # (h200_sxm.yaml nccl_version) 1008 + SGLang's DeepEP 1554 (0.5.12: LL 176 + normal at 20 SMs
    # 414, 0.5.6.post2: 95 + 92; two phases each); gdn = FlashInfer's chunked scan 4144 + the
    # recurrent decode 405 + the causal conv1d's prefill 4144 and decode 407 kernels; encoder_attention
    # = the ViT flash attention's 7679 rows.
    assert report.rows == {"linear": 107225, "attention": 122770, "moe": 49896, "comm": 1470 + 1554,
                           "gdn": 4144 + 405 + 4144 + 407, "encoder_attention": 7679}
    assert report.rows_by_gpu == {"H200": report.rows}
    assert report.skipped == ()
    assert (out / "family=linear" / "gpu=H200" / "part-0.parquet").exists()


@needs_aic
def test_h200_deepep_rows(h200):
    """DeepEP dispatch / combine (vLLM 0.24.0, EP 8): AIC's latency is in microseconds; SGLang's
    wide-EP tables (1-8 nodes) come as rows of their own framework and release."""
    c = read_profiles(h200[1], "comm")
    sglang = c[c.framework == "sglang"]
    two_nodes = sglang[(sglang.num_gpus == 16) & (sglang.backend == "deepep_ll") & (sglang.op_name == "moe_dispatch")
                       & (sglang.num_tokens == 128) & (sglang.num_experts == 256)].iloc[0]
    assert two_nodes.latency_s_median == pytest.approx(102.1e-6, rel=1e-3)
    assert (two_nodes.link, two_nodes.framework_version, two_nodes.source_table) == (
        "network", "0.5.0", "data/h200_sxm/comm/sglang/0.5.6.post2/wideep_deepep_ll_perf.parquet")
    assert sorted(sglang.num_gpus.unique()) == [8, 16, 32, 64]
    moe = c[c.op_name.isin(["moe_dispatch", "moe_combine"]) & (c.framework == "vllm")]
    assert moe.groupby(["op_name", "backend"]).size().to_dict() == {
        ("moe_combine", "deepep_ht"): 78, ("moe_combine", "deepep_ll"): 84,
        ("moe_dispatch", "deepep_ht"): 78, ("moe_dispatch", "deepep_ll"): 84}
    r = moe[(moe.op_name == "moe_combine") & (moe.backend == "deepep_ht") & (moe.num_tokens == 1024)
            & (moe.hidden_size == 7168) & (moe.topk == 8) & (moe.num_experts == 256)].iloc[0]
    assert r.latency_s_median == pytest.approx(403.296003e-6, rel=1e-8)
    assert (r.num_gpus, r.message_bytes, r["dtype"], r.link, r.kernel_source, r.framework_version, r.timing_mode) == (
        8, 1024 * 7168 * 2, "bf16", "nvlink", "deepep", "0.24.0", "kernel")
    assert c[~c.op_name.isin(["moe_dispatch", "moe_combine"])].num_tokens.isna().all()
    assert len(sglang) == 1554


@needs_aic
def test_h200_gemm_row(h200):
    g = read_profiles(h200[1], "linear")
    row = g[(g.m == 4096) & (g.n == 4096) & (g.k == 4096) & (g.dtype == "bf16")]
    assert len(row) == 1
    r = row.iloc[0]
    assert r.latency_s_median == pytest.approx(0.16806933614942762e-3, rel=1e-12)
    assert (r.gpu, r.device_name, r.framework, r.framework_version, r.kernel_source, r.timing_mode, r.source) == (
        "H200", "NVIDIA H200", "vllm", "0.24.0", "torch.nn.functional.linear", "kernel", "aiconfigurator")
    assert r.source_table == "data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
    assert set(g.dtype) == {"bf16", "fp8", "fp8_block"}


@needs_aic
def test_h200_attention_rows(h200):
    a = read_profiles(h200[1], "attention")
    ctx = a[(a.op_name == "context") & ~a.is_mla & (a.batch_size == 2) & (a.prefill_len_max == 12288)
            & (a.num_heads == 64) & (a.head_dim == 64) & (a.kv_dtype == "bf16") & (a.window_size == 0)].iloc[0]
    assert ctx.latency_s_median == pytest.approx(5.523824055989583e-3, rel=1e-12)
    assert (ctx.num_prefill, ctx.num_decode, ctx.prefill_tokens, ctx.prefill_len_p50, ctx.prefill_ctx_max,
            ctx.decode_ctx_max, ctx.scope) == (2, 0, 24576, 12288, 0, 0, "kernel")
    gen = a[(a.op_name == "generation") & ~a.is_mla & (a.batch_size == 32) & (a.decode_ctx_max == 2)
            & (a.num_heads == 64) & (a.num_kv_heads == 1) & (a.head_dim == 64) & (a.kv_dtype == "bf16")].iloc[0]
    assert gen.latency_s_median == pytest.approx(0.011114666859308878e-3, rel=1e-12)  # step 1 -> KV length 2
    assert (gen.num_decode, gen.num_prefill, gen.decode_ctx_min, gen.decode_ctx_p90, gen.prefill_tokens) == (32, 0, 2, 2, 0)
    mla = a[a.is_mla & (a.op_name == "generation")].iloc[0]
    assert (mla.scope, mla.num_heads, mla.decode_ctx_max, mla.kv_lora_rank, mla.head_dim, mla.mla_gemm_dtype) == (
        "module", 128, 4, 512, 576, "bf16")
    assert mla.latency_s_median == pytest.approx(0.1637e-3)
    assert a.is_mla.sum() == 3886 + 5888


@needs_aic
def test_h200_moe_and_comm_rows(h200):
    m = read_profiles(h200[1], "moe")
    assert m.distribution.value_counts().to_dict() == {"power_law_1.01": 16632, "balanced": 16632, "power_law_1.2": 16632}
    assert m.max_tokens_per_expert.isna().all()  # AIC's token-drawing collector is not shipped
    c = read_profiles(h200[1], "comm")
    ar = c[(c.backend == "vllm_graph") & (c.num_gpus == 2) & (c.message_bytes == 256)].iloc[0]
    assert (ar.timing_mode, ar["dtype"], ar.link, ar.op_name) == ("kernel", "bf16", "nvlink", "all_reduce")
    assert ar.latency_s_median == pytest.approx(0.004377920031547546e-3)
    assert set(c[c.backend == "vllm_eager"].timing_mode) == {"launch"}
    a2a = c[(c.op_name == "all_to_all") & (c.num_gpus == 2) & (c.dtype == "fp16")].sort_values("message_bytes").iloc[0]
    assert (a2a.message_bytes, a2a.backend, a2a.latency_s_median) == (512, "nccl", pytest.approx(0.00649e-3))
    assert a2a.source_table == "data/h200_sxm/comm/nccl/2.26.2/nccl_perf.parquet"


@needs_aic
def test_h100_counts_and_filters(tmp_path):
    rows = import_aiconfigurator(AIC / "systems", tmp_path, gpus=["H100-SXM"], families=["linear", "comm"])
    assert rows == {"linear": 107188, "comm": 1146 + 648 + 1554}    # + DeepEP in vLLM (HT / LL / v2), in SGLang
    g = read_profiles(tmp_path, "linear", gpu="H100-SXM")
    r = g[(g.m == 4096) & (g.n == 4096) & (g.k == 4096) & (g.dtype == "fp8")].iloc[0]
    assert (r.latency_s_median, r.device_name) == (pytest.approx(0.1537511083814833e-3), "NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match="already holds \\['aiconfigurator'\\] rows"):
        import_aiconfigurator(AIC, tmp_path, gpus=["h100_sxm"], families=["comm"])
    # a catalogue alias names the same system ("H100" is how `frontier simulate --gpu` spells it)
    assert import_aiconfigurator(AIC, tmp_path / "alias", gpus=["H100"], families=["comm"]) == {"comm": 1146 + 648 + 1554}


@needs_aic
def test_aic_errors_and_skips(tmp_path):
    with pytest.raises(ValueError, match="unknown AIC families \\['gemm'\\]"):
        import_aiconfigurator(AIC, tmp_path, families=["gemm"])
    with pytest.raises(ValueError, match="no AIC vllm data for GPUs \\['h20'\\]; valid: a100_sxm \\(A100-80GB\\), "):
        import_aiconfigurator(AIC, tmp_path, gpus=["h20"])
    with pytest.raises(ValueError, match="no AIC systems/data folder"):
        import_aiconfigurator(tmp_path, tmp_path)
    # nothing to import (every chosen GPU skipped) is an error naming why, not a report of 0 rows
    with pytest.raises(ValueError, match=r"^nothing to import from the AIC data under .*: b60: no frontier "
                                         r"catalogue GPU for this AIC system$"):
        import_aiconfigurator_report(AIC, tmp_path / "none", gpus=["b60"], families=["comm"])
    assert not (tmp_path / "none").exists()
    rep = import_aiconfigurator_report(AIC, tmp_path, gpus=["b60", "l40s"], families=["comm"])
    assert "b60: no frontier catalogue GPU for this AIC system" in rep.skipped   # Intel Arc Pro B60
    assert rep.rows == {"comm": 138 + 504}  # custom all-reduce backfilled from vllm 0.22.0 + nccl 2.27.3
    c = read_profiles(tmp_path, "comm", gpu="L40S")
    vllm = c[c.framework == "vllm"]  # rows keep their own version: the 0.22.0 folder's rows say 0.14.0
    assert set(vllm.source_table) == {"data/l40s/comm/vllm/0.22.0/custom_allreduce_perf.parquet"}
    assert set(vllm.framework_version) == {"0.14.0"} and set(c.link) == {"pcie"}


@needs_aic
def test_every_nvidia_gpu_with_vllm_tables_imports(tmp_path):
    """GB300 and the RTX PRO 6000 Server joined the catalogue (2026-12-01): their vLLM tables import;
    the RTX PRO 6000 has no NVLink, so its collective rows are PCIe ones."""
    rep = import_aiconfigurator_report(AIC, tmp_path, gpus=["gb300", "rtx_pro_6000_server"], families=["comm"])
    assert rep.rows_by_gpu == {"GB300": {"comm": 1436 + 324}, "RTX-PRO-6000-Server": {"comm": 642}}
    assert set(read_profiles(tmp_path, "comm", gpu="RTX-PRO-6000-Server").link) == {"pcie"}
    assert set(read_profiles(tmp_path, "comm", gpu="GB300").link) == {"nvlink"}


@needs_vidur
def test_vidur_mapping(tmp_path):
    rep = import_vidur_report(VIDUR, tmp_path)
    # elementwise: 4 ops (2 norms, rope, act) x the 14,088 rows of the gated models' A100 / H100 files
    assert rep.rows == {"attention": 14658, "comm": 22388, "elementwise": 56352, "linear": 58440}
    g = read_profiles(tmp_path, "linear", gpu="H100-SXM")
    src = "data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"
    r = g[(g.source_table == src) & (g.op_name == "attn_pre_proj") & (g.m == 4096) & (g.n == 12288)].iloc[0]
    assert (r.k, r["dtype"], r.source, r.device_name) == (4096, "fp16", "vidur", "h100")
    up = g[(g.source_table == src) & (g.op_name == "mlp_up_proj")]
    assert set(zip(up.n, up.k)) == {(22016, 4096), (11008, 4096), (5504, 4096), (2752, 4096)}  # gated, TP 1/2/4/8
    a = read_profiles(tmp_path, "attention")
    d = a[a.op_name == "generation"].iloc[0]
    assert (d.batch_size, d.decode_ctx_max, d.num_heads, d.num_kv_heads, d.head_dim, d.timing_mode) == (
        1, 33, 32, 4, 128, "kernel")
    assert d.latency_s_median == pytest.approx(0.015e-3)
    assert len(a[a.op_name == "context"]) == 4418
    c = read_profiles(tmp_path, "comm", gpu="A100-80GB")
    first = c[(c.device_name == "a100_dgx") & (c.op_name == "all_reduce")].iloc[0]
    assert (first.message_bytes, first.num_gpus, first.link, first.timing_mode) == (4096, 2, "network", "launch")
    e = read_profiles(tmp_path, "elementwise", gpu="H100-SXM")
    at64 = e[(e.source_table == src) & (e.num_tokens == 64)]
    widths = {k: sorted(v.hidden_size) for k, v in at64.groupby("op_name")}   # TP 1/2/4/8
    assert widths == {"rms_norm": [4096] * 8, "rotary_embedding": [1024, 2048, 4096, 8192],
                      "silu_and_mul": [1376, 2752, 5504, 11008]}
    act = at64[(at64.op_name == "silu_and_mul") & (at64.hidden_size == 11008)].iloc[0]
    assert (act["dtype"], act.timing_mode, act.latency_s_median) == ("fp16", "kernel", pytest.approx(0.007e-3))
    assert any("phi-2/mlp.csv: elementwise ops of a non-gated MLP model" in s for s in rep.skipped)
    assert any(s.startswith("mlp.csv ops emb, add: no profiled kernel") for s in rep.skipped)
    assert any("h100_pairwise_nvlink/send_recv.csv: byte-identical" in s for s in rep.skipped)
    assert any("a40" in s for s in rep.skipped)


@needs_vidur
def test_cli_calibrate_from_vidur(tmp_path):
    from typer.testing import CliRunner

    from frontier.cli import app
    out = tmp_path / "vidur.joblib"
    args = ["calibrate", "--source", "vidur", "--gpu", "H100", "--family", "linear", "--out", str(out)]
    bad = CliRunner().invoke(app, args)
    assert bad.exit_code == 2 and "--source vidur needs --source-path" in bad.output
    res = CliRunner().invoke(app, args + ["--source-path", str(VIDUR)])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("H100-SXM sarathi-serve: held-out APE % (split 0.2 by rows, seed 0)")
    assert "  linear          4385 " in res.output and out.is_file()
    # a GPU the data lacks: named with the data folder, not the temporary folder it was imported into
    res = CliRunner().invoke(app, ["calibrate", "--source", "vidur", "--source-path", str(VIDUR), "--gpu", "B200",
                                   "--family", "linear", "--out", str(tmp_path / "b200.joblib")])
    assert res.exit_code == 2 and res.output == (f"error: no profiles for gpu 'B200' in the Vidur data under {VIDUR}; "
                                                 "found gpus: A100-80GB, H100-SXM\n"), res.output


def test_vidur_folder_without_profiling_csvs_is_refused(tmp_path):
    """A folder holding no Vidur CSV was imported as 0 rows (`import-profiles` printed "total: 0
    rows") and `calibrate --source vidur` then named its temporary import folder."""
    from typer.testing import CliRunner

    from frontier.cli import app
    (tmp_path / "data" / "profiling").mkdir(parents=True)
    (tmp_path / "data" / "notes.csv").write_text("a,b\n1,2\n")
    want = (f"error: no Vidur profiling CSVs under {tmp_path} (data/profiling/compute/<gpu>/<model>/mlp.csv, "
            "attention.csv, network/<gpu>_<link>/all_reduce.csv); pass the vidur dataset folder\n")
    with pytest.raises(ValueError, match="no Vidur profiling CSVs under "):
        import_vidur_report(tmp_path, tmp_path / "out")
    res = CliRunner().invoke(app, ["import-profiles", "--source", "vidur", "--path", str(tmp_path),
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and res.output == want, res.output
    res = CliRunner().invoke(app, ["calibrate", "--source", "vidur", "--source-path", str(tmp_path), "--gpu", "H100",
                                   "--out", str(tmp_path / "b.joblib")])
    assert res.exit_code == 2 and res.output == want, res.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "b.joblib").exists()


@needs_aic
def test_cli_import_profiles(tmp_path):
    from typer.testing import CliRunner

    from frontier.cli import app
    args = ["import-profiles", "--source", "aiconfigurator", "--path", str(AIC), "--out", str(tmp_path),
            "--gpu", "h200_sxm", "--family", "comm"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "H200         comm 3,024" in res.output
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "already holds ['aiconfigurator'] rows" in again.output
    bad = CliRunner().invoke(app, ["import-profiles", "--source", "vidur", "--out", str(tmp_path)])
    assert bad.exit_code == 2 and "--source vidur needs --path" in bad.output
    # a version the data lacks: one line with the versions it has (was "total: 0 rows", exit 0; and
    # `calibrate --source aiconfigurator` named its temporary import folder, "found gpus: none")
    want = (f"error: nothing to import from the AIC data under {AIC / 'systems'}: h200_sxm: no vllm 9.9 data "
            "(have 0.1.dev19262, 0.14.0, 0.18.0, 0.19.0, 0.24.0)\n")
    res = CliRunner().invoke(app, [*args[:-4], "--gpu", "h200_sxm", "--version", "9.9"])
    assert res.exit_code == 2 and res.output == want, res.output
    res = CliRunner().invoke(app, ["calibrate", "--source", "aiconfigurator", "--source-path", str(AIC), "--gpu",
                                   "h200_sxm", "--framework-version", "9.9", "--out", str(tmp_path / "b.joblib")])
    assert res.exit_code == 2 and res.output == want, res.output
    assert not (tmp_path / "b.joblib").exists()


@needs_aic
def test_an_older_version_reads_its_tables_and_forward_fills_the_rest(tmp_path):
    """H200: MoE tables of 0.19.0 and 0.24.0, GEMM of 0.24.0 only: `frontier import --version
    0.19.0` takes 0.19's MoE rows and the oldest newer GEMM rows, and says so."""
    rep = import_aiconfigurator_report(AIC, tmp_path, gpus=["H200"], families=["linear", "moe"], version="0.19.0")
    assert rep.rows == {"linear": 107225, "moe": 48195}
    assert rep.skipped == ("h200_sxm: gemm/vllm/0.19.0/gemm_perf.parquet absent, forward-filled from "
                           "gemm/vllm/0.24.0/gemm_perf.parquet",)
    moe = read_profiles(tmp_path, "moe", "H200")
    assert set(moe.source_table) == {"data/h200_sxm/moe/vllm/0.19.0/moe_perf.parquet"}
    assert set(moe.framework_version) == {"0.19.0", "0.19.1"}


@needs_aic
def test_h200_gdn_rows(h200):
    """The gated delta rule's kernels (vLLM 0.24.0): AIC's 4 x 2,048-token chunked scan at 16 key /
    32 value heads per rank, timed 0.111555 ms for Qwen3.5-4B's layer (three models share it)."""
    _, out = h200
    df = read_profiles(out, "gdn", "H200")
    assert df.groupby("op_name").size().to_dict() == {"chunked": 4144, "conv1d": 4144, "conv1d_update": 407,
                                                      "recurrent": 405}
    row = df[(df.op_name == "chunked") & (df.batch_size == 4) & (df.seq_len == 2048) & (df.num_k_heads == 16)
             & (df.num_v_heads == 32)].sort_values("latency_s_median").iloc[0]
    assert (row.num_tokens, row.head_k_dim, row.head_v_dim, row.state_dtype, row.d_conv, row.timing_mode) == \
        (8192, 128, 128, "fp32", 4, "kernel")
    assert row.latency_s_median == pytest.approx(0.111555e-3, rel=1e-5)
    assert (row.kernel_source, row.framework_version, row.source_table) == \
        ("chunk_gated_delta_rule_flashinfer", "0.24.0", "data/h200_sxm/linear_attention/vllm/0.24.0/gdn_perf.parquet")
    assert set(df[df.op_name == "recurrent"].seq_len) == {1}
    assert set(df[df.op_name.str.startswith("conv1d")].state_dtype) == {"bf16"}


@needs_aic
def test_h200_encoder_attention_rows(h200):
    """A vision tower's attention (vLLM 0.24.0's ViT flash attention): 1-64 images of 1-65,536
    patches, 1-32 heads of 64 / 72 / 80 dims; one image of 4,096 patches at Qwen3-VL's 16 heads of 72."""
    _, out = h200
    df = read_profiles(out, "encoder_attention", "H200")
    assert (len(df), set(df.op_name), set(df["dtype"]), set(df.timing_mode)) == (7679, {"vit"}, {"bf16"}, {"kernel"})
    assert sorted(df.head_dim.unique()) == [64, 72, 80] and (df.num_tokens == df.batch_size * df.seq_len).all()
    row = df[(df.batch_size == 1) & (df.seq_len == 4096) & (df.num_heads == 16) & (df.head_dim == 72)].iloc[0]
    assert (row.kernel_source, row.framework_version, row.source_table) == (
        "vllm_vit_flash_attn_fa3", "0.24.0", "data/h200_sxm/encoder_attention/vllm/0.24.0/encoder_attention_perf.parquet")
    assert 0.1e-3 < row.latency_s_median < 0.3e-3
