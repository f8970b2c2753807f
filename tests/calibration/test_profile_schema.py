"""Profile schema: columns, round trip, validation and schema-version refusal."""

import pandas as pd
import pyarrow.parquet as pq
import pytest

from frontier import profile_schema as ps


def _row(family="linear", **over):
    row = {c: None for c in ps.columns_for(family)}
    row.update(family=family, timing_mode="kernel", latency_s_median=1.5e-4, gpu="H200", source="frontier-profiler",
               schema_version=ps.SCHEMA_VERSION)
    if family == "linear":
        row.update(op_name="gemm", m=16, n=4096, k=4096, dtype="bf16")
    row.update(over)
    return row


def test_columns_common_then_family():
    assert ps.columns_for("linear")[:len(ps.COMMON)] == ps.COMMON.names
    assert ps.columns_for("linear")[len(ps.COMMON):] == ["op_name", "m", "n", "k", "dtype"]
    assert "decode_ctx_p90" in ps.columns_for("attention")
    assert "var_tokens_per_expert" in ps.columns_for("moe")
    assert "message_bytes" in ps.columns_for("comm")
    assert "cuda_graph_bytes" in ps.columns_for("memory")
    with pytest.raises(ValueError, match="unknown profile family 'gemm'; valid: linear"):
        ps.columns_for("gemm")


def test_round_trip_hive_layout(tmp_path):
    df = pd.DataFrame([_row(m=1), _row(m=2, latency_s_p10=1e-4, latency_s_p90=2e-4, num_samples=50)])
    path = ps.write_profile(df, tmp_path, "linear", "H200")
    assert path == tmp_path / "family=linear" / "gpu=H200" / "part-0.parquet"
    assert ps.write_profile(df, tmp_path, "linear", "H200").name == "part-1.parquet"
    assert not list(tmp_path.rglob(".tmp-*"))
    back = ps.read_profiles(tmp_path, "linear")
    assert len(back) == 4 and list(back.columns) == ps.columns_for("linear")
    assert back["m"].tolist() == [1, 2, 1, 2]
    assert back.loc[1, "num_samples"] == 50 and pd.isna(back.loc[0, "latency_s_p10"])
    assert len(ps.read_profiles(tmp_path, "linear", gpu="H100-SXM")) == 0
    assert pq.read_schema(path).field("m").type == ps.schema_for("linear").field("m").type


def test_write_refuses_bad_rows(tmp_path):
    with pytest.raises(ValueError, match=r"column 'dtype' has values \['bfloat16'\]; valid: fp32"):
        ps.write_profile(pd.DataFrame([_row(dtype="bfloat16")]), tmp_path, "linear", "H200")
    with pytest.raises(ValueError, match="column 'timing_mode' has values \\['graph'\\]"):
        ps.write_profile(pd.DataFrame([_row(timing_mode="graph")]), tmp_path, "linear", "H200")
    with pytest.raises(ValueError, match="partition gpu is 'H100-SXM'"):
        ps.write_profile(pd.DataFrame([_row()]), tmp_path, "linear", "H100-SXM")
    with pytest.raises(ValueError, match="lacks columns \\['dtype'\\]"):
        ps.write_profile(pd.DataFrame([_row()]).drop(columns="dtype"), tmp_path, "linear", "H200")


def test_memory_rows_have_no_timing(tmp_path):
    row = _row("memory", timing_mode=None, latency_s_median=None, model="meta-llama/Llama-3.1-8B", tp=1, pp=1, ep=1,
               max_num_batched_tokens=8192, weights_bytes=16_060_522_496, torch_peak_increase_bytes=1 << 30,
               non_torch_bytes=1 << 29, cuda_graph_bytes=1 << 28)
    ps.write_profile(pd.DataFrame([row]), tmp_path, "memory", "H200")
    assert ps.read_profiles(tmp_path)["weights_bytes"].tolist() == [16_060_522_496]


def test_refuses_other_schema_version(tmp_path):
    ps.write_profile(pd.DataFrame([_row()]), tmp_path, "linear", "H200")
    (tmp_path / "_schema_version").write_text("2\n")
    with pytest.raises(ValueError, match="holds schema_version 2; this code writes 1"):
        ps.write_profile(pd.DataFrame([_row()]), tmp_path, "linear", "H200")
    with pytest.raises(ValueError, match="holds schema_version 2"):
        ps.read_profiles(tmp_path, "linear")


def test_refuses_rows_of_other_version(tmp_path):
    with pytest.raises(ValueError, match=r"schema_version \[2\] unsupported; valid: 1"):
        ps.write_profile(pd.DataFrame([_row(schema_version=2)]), tmp_path, "linear", "H200")


def test_read_needs_family_when_several(tmp_path):
    ps.write_profile(pd.DataFrame([_row()]), tmp_path, "linear", "H200")
    ps.write_profile(pd.DataFrame([_row("comm", op_name="all_reduce", message_bytes=256, num_gpus=2, dtype="bf16",
                                        link="nvlink")]), tmp_path, "comm", "H200")
    with pytest.raises(ValueError, match=r"holds families \['comm', 'linear'\]; pass family="):
        ps.read_profiles(tmp_path)
    with pytest.raises(ValueError, match="is not a directory"):
        ps.read_profiles(tmp_path / "nope")


def test_normalize_dtype():
    assert [ps.normalize_dtype(x) for x in ("bfloat16", "half", "FP8", "nvfp4")] == ["bf16", "fp16", "fp8", "nvfp4"]
    with pytest.raises(ValueError, match="unknown dtype 'int3'; valid:"):
        ps.normalize_dtype("int3")


def test_elementwise_family_round_trip_and_enums(tmp_path):
    """Elementwise rows are a family of their own in schema version 1: a root written before the
    family existed (linear only) stays readable and takes elementwise parts next to it."""
    assert ps.SCHEMA_VERSION == 1
    ps.write_profile(pd.DataFrame([_row()]), tmp_path, "linear", "H200")
    row = _row("elementwise", op_name="rms_norm", num_tokens=64, hidden_size=4096, dtype="bf16")
    path = ps.write_profile(pd.DataFrame([row]), tmp_path, "elementwise", "H200")
    assert path == tmp_path / "family=elementwise" / "gpu=H200" / "part-0.parquet"
    back = ps.read_profiles(tmp_path, "elementwise")
    assert back[["op_name", "num_tokens", "hidden_size", "dtype"]].values.tolist() == [["rms_norm", 64, 4096, "bf16"]]
    assert ps.read_profiles(tmp_path, "linear")["m"].tolist() == [16]
    with pytest.raises(ValueError, match=r"column 'op_name' has values \['layer_norm'\]; valid: rms_norm, "
                                         r"fused_add_rms_norm, rotary_embedding, silu_and_mul, kv_cache_write"):
        ps.write_profile(pd.DataFrame([dict(row, op_name="layer_norm")]), tmp_path, "elementwise", "H200")


def test_empty_marker_left_by_a_killed_writer_falls_back_to_the_parts(tmp_path):
    """A sweep killed while the marker was rewritten in place left it empty (the CLI then refused
    the folder: "holds profile schema_version ;"); the parts still say which version they are."""
    ps.write_profile(pd.DataFrame([_row()]), tmp_path, "linear", "H200")
    (tmp_path / "_schema_version").write_text("")
    assert ps.root_schema_version(tmp_path) == "1"
    assert len(ps.read_profiles(tmp_path, "linear")) == 1
    ps.write_profile(pd.DataFrame([_row()]), tmp_path, "linear", "H200")     # and the marker is whole again
    assert (tmp_path / "_schema_version").read_text() == "1\n"
    assert not list(tmp_path.rglob(".tmp-*"))
    assert ps.root_schema_version(tmp_path / "nothing-here") is None


def test_check_operator_rows_names_the_row_column_and_what_is_valid():
    ok = pd.DataFrame({"m": [1, 4096], "n": [4096, 1], "k": [4096, 14336], "dtype": ["bf16", "fp8_block"]},
                      index=[2, 3])
    ps.check_operator_rows(ok, "linear")                 # valid rows pass
    cases = [({"m": 0}, "row 3: linear column m=0; valid: a whole number >= 1"),
             ({"m": -5}, "row 3: linear column m=-5; valid: a whole number >= 1"),
             ({"m": 16.5}, "row 3: linear column m=16.5; valid: a whole number >= 1"),
             ({"m": "abc"}, "row 3: linear column m='abc'; valid: a whole number >= 1"),
             ({"m": float("inf")}, "row 3: linear column m=inf; valid: a whole number >= 1"),
             ({"k": None}, "row 3: linear column 'k' is empty; give a number >= 1"),
             ({"dtype": "int3"}, "row 3: linear column dtype='int3'; valid: fp32, fp16, bf16, fp8, fp8_block, ")]
    for change, message in cases:
        bad = ok.astype(object).copy()
        for col, value in change.items():
            bad.loc[3, col] = value
        with pytest.raises(ValueError) as err:
            ps.check_operator_rows(bad, "linear")
        assert str(err.value).startswith(message), str(err.value)
    # attention: composition may be 0, shapes may not; optional columns may be empty, not negative
    attn = pd.DataFrame({"batch_size": [32], "num_prefill": [0], "num_decode": [32], "prefill_tokens": [0],
                         "prefill_len_min": [0], "prefill_len_max": [0], "prefill_len_mean": [0.0],
                         "prefill_len_p50": [0.0], "prefill_len_p90": [0.0], "decode_ctx_min": [100],
                         "decode_ctx_max": [2000], "decode_ctx_mean": [1000.5], "decode_ctx_p50": [1000.0],
                         "decode_ctx_p90": [1800.0], "num_heads": [32], "num_kv_heads": [8], "head_dim": [128],
                         "kv_dtype": ["bf16"], "window_size": [None]})
    ps.check_operator_rows(attn, "attention", where="line")
    with pytest.raises(ValueError, match=r"^line 0: attention column num_kv_heads=0; valid: a whole number >= 1$"):
        ps.check_operator_rows(attn.assign(num_kv_heads=0), "attention", where="line")
    with pytest.raises(ValueError, match=r"^row 0: attention column window_size=-1; valid: a whole number >= 0$"):
        ps.check_operator_rows(attn.assign(window_size=-1), "attention")
    with pytest.raises(ValueError, match=r"^row 0: attention column decode_ctx_mean=-1.5; valid: a finite number >= 0$"):
        ps.check_operator_rows(attn.assign(decode_ctx_mean=-1.5), "attention")
    with pytest.raises(ValueError, match=r"^row 0: attention column 'decode_ctx_p90' is empty; give a number >= 0$"):
        ps.check_operator_rows(attn.assign(decode_ctx_p90=float("nan")), "attention")
    comm = pd.DataFrame({"op_name": ["all_gather"], "message_bytes": [1 << 20], "num_gpus": [8], "link": ["nvl"]})
    with pytest.raises(ValueError, match=r"column link='nvl'; valid: nvlink, network, pcie$"):
        ps.check_operator_rows(comm, "comm")


def test_check_operator_rows_refuses_self_contradicting_rows():
    attn = pd.DataFrame({"batch_size": [3], "num_prefill": [1], "num_decode": [2], "prefill_tokens": [512],
                         "prefill_len_min": [512], "prefill_len_max": [512], "prefill_len_mean": [512.0],
                         "prefill_len_p50": [512.0], "prefill_len_p90": [512.0], "decode_ctx_min": [100],
                         "decode_ctx_max": [300], "decode_ctx_mean": [200.0], "decode_ctx_p50": [200.0],
                         "decode_ctx_p90": [280.0], "num_heads": [32], "num_kv_heads": [8], "head_dim": [128],
                         "kv_dtype": ["bf16"]}, index=[7])
    ps.check_operator_rows(attn, "attention")
    cases = [({"batch_size": 4}, "batch_size=4 != num_prefill + num_decode = 3"),
             ({"decode_ctx_p90": 400.0}, "decode_ctx_min <= p50 <= p90 <= max and min <= mean <= max violated "
                                         "(100, 200.0, 400.0, 300; mean 200.0)"),
             ({"decode_ctx_mean": 50.0}, "decode_ctx_min <= p50 <= p90 <= max and min <= mean <= max violated"),
             ({"prefill_tokens": 500}, "prefill_tokens=500 != num_prefill x prefill_len_mean = 512"),
             ({"num_prefill": 0, "batch_size": 2, "prefill_tokens": 0},
              "no prefill requests but prefill_len_* statistics other than 0")]
    for change, message in cases:
        with pytest.raises(ValueError) as err:
            ps.check_operator_rows(attn.assign(**change), "attention")
        assert str(err.value).startswith(f"row 7: attention row has {message}"), str(err.value)
    moe = pd.DataFrame({"num_tokens": [64], "hidden_size": [4096], "inter_size": [1536], "topk": [8],
                        "num_experts": [128], "moe_tp_size": [1], "moe_ep_size": [8], "moe_dtype": ["fp8_block"]})
    ps.check_operator_rows(moe, "moe")
    with pytest.raises(ValueError, match=r"^row 0: moe row has topk=8 > num_experts=4$"):
        ps.check_operator_rows(moe.assign(num_experts=4, moe_ep_size=1), "moe")
    with pytest.raises(ValueError, match=r"^row 0: moe row has moe_ep_size=256 > num_experts=128$"):
        ps.check_operator_rows(moe.assign(moe_ep_size=256), "moe")
