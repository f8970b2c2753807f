"""Import NVIDIA AIConfigurator's (AIC) perf database into the profile schema.

Layout read: ``systems/data/<gpu>/<op_family>/<framework>/<version>/<table>.parquet``
(README: ../shared/datasets/aiconfigurator). For every AIC GPU that has ``vllm`` tables
and a frontier catalogue entry:

* linear    <- ``gemm/vllm/<v>/gemm_perf``: every gemm_dtype and kernel_source row.
* attention <- ``context_attention_perf`` (b prompts of isl tokens, no cached prefix),
  ``generation_attention_perf`` (b decodes, KV length step+1 each), both scope "kernel"
  (vLLM backend ``impl.forward`` incl. the KV-cache write); and the MLA module tables
  ``mla_{context,generation}_module_perf`` as ``is_mla`` rows of scope "module": the whole
  vLLM ``DeepseekV2MLAAttention`` layer (q/kv projections, RoPE, MLA kernel, output
  projection). For MLA generation ``step`` is taken as the KV length (AIC README).
  MLA rows carry num_kv_heads=1 and head_dim=kv_lora_rank+qk_rope_head_dim (the latent
  cache width).
* moe       <- ``moe_perf``: every dtype and distribution. Per-expert load stats are null:
  the collector that draws tokens per expert is not shipped in aiconfigurator-core.
* comm      <- ``comm/vllm/<v>/custom_allreduce_perf`` and ``comm/{nccl,oneccl}/<v>``.
  message_bytes = message_size (elements) x dtype bytes. And ``comm/vllm/<v>/moe_a2a_perf``
  (vLLM 0.24.0's DeepEP dispatch / combine, one node of 8 GPUs, 4 on GB200 / GB300) as
  ``moe_dispatch`` / ``moe_combine`` rows: backend deepep_ht / deepep_ll (H100 also
  deepep_v2_context / _generation), num_tokens per rank, hidden_size, topk, num_experts;
  AIC's latency is in microseconds there. Plus SGLang's wide-EP DeepEP tables
  (``comm/sglang/<v>/wideep_deepep_{ll,normal}_perf``; 1-8 nodes on H100 / H200) as rows of
  framework "sglang", which scale the vLLM tables across nodes (``simulator.comm.moe_a2a``).
* gdn       <- ``linear_attention/vllm/<v>/gdn_perf``: the batch-shaped kernels of Qwen3.5's
  Gated DeltaNet layers, the gated delta rule (FlashInfer's chunked prefill scan
  ``chunk_gated_delta_rule_flashinfer``: op "chunked"; the packed recurrent decode: "recurrent";
  state_dtype fp32, Qwen3.5's ``mamba_ssm_dtype``) and the causal conv1d before it
  (``causal_conv1d_fn``: "conv1d"; ``causal_conv1d_update``: "conv1d_update"; a bf16 conv state),
  batch_size sequences of seq_len tokens, heads per rank, the conv window d_conv.
* encoder_attention <- ``encoder_attention/vllm/<v>/encoder_attention_perf``: a vision tower's
  non-causal attention (vLLM's ViT flash attention, ``vllm_vit_flash_attn_fa3`` on Hopper):
  batch_size images of isl patches each (seq_len), heads per rank of head_dim 64 / 72 / 80.

Timings: AIC replays CUDA graphs and records the mean of the replays (ms); it is stored
as ``latency_s_median`` (seconds), p10/p90/num_samples null, timing_mode "kernel". The
custom all-reduce ``vllm_eager`` backend rows run eagerly -> "launch". nccl-tests rows
(back-to-back kernel loops) -> "kernel".
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pandas as pd
import yaml

from calibration.importers.rows import DTYPE_BYTES, ImportReport, add, finish, write_rows
from frontier import profile_schema as ps
from frontier.gpu import get_gpu, intra_node_link

FAMILIES = ("linear", "attention", "moe", "comm", "gdn", "encoder_attention")
_COMM_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather",
             "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all"}
# Latent dims of the models in the MLA module tables (from their HF config.json).
_MLA_DIMS = {"deepseek-ai/DeepSeek-V3": dict(kv_lora_rank=512, q_lora_rank=1536, qk_nope_head_dim=128,
                                             qk_rope_head_dim=64, v_head_dim=128)}


def import_aiconfigurator(data_root: Path | None, out_root: Path, gpus=None, families=None,
                          version: str | None = None) -> dict[str, int]:
    """Import AIC tables under ``data_root`` (None: the installed aiconfigurator_core) into
    ``out_root``; returns rows written per family. See :func:`import_aiconfigurator_report`."""
    return import_aiconfigurator_report(data_root, out_root, gpus, families, version).rows


def import_aiconfigurator_report(data_root: Path | None, out_root: Path, gpus=None, families=None,
                                 version: str | None = None) -> ImportReport:
    """Like :func:`import_aiconfigurator`, returning rows per (gpu, family) and what was skipped.

    ``gpus``: AIC names ("h200_sxm") or catalogue names ("H200"); None = all with vllm tables.
    ``version``: vLLM version folder; None = query_versions.yaml "current" (else newest).
    ValueError when nothing was imported (every selected GPU skipped: the reasons, one line).
    """
    systems = _systems_dir(data_root)
    families = tuple(families) if families else FAMILIES
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise ValueError(f"unknown AIC families {bad}; valid: {', '.join(FAMILIES)}")
    rows: dict[str, int] = {}
    by_gpu: dict[str, dict[str, int]] = {}
    skipped: list[str] = []
    for aic_gpu in _select_gpus(systems, gpus, skipped):
        gpu = get_gpu(aic_gpu).name
        vdir = _vllm_version_dir(systems, aic_gpu, version, skipped)
        if vdir is None:
            continue
        for family in families:
            frames = _FAMILY_READERS[family](systems, aic_gpu, gpu, vdir, skipped)
            add(rows, by_gpu, gpu, family, write_rows(frames, out_root, family, gpu))
    if not any(rows.values()):
        raise ValueError(f"nothing to import from the AIC data under {systems}: {'; '.join(skipped) or 'no rows'}")
    return ImportReport(rows=rows, rows_by_gpu=by_gpu, skipped=tuple(skipped))


def _systems_dir(data_root: Path | None) -> Path:
    if data_root is None:
        spec = importlib.util.find_spec("aiconfigurator_core")
        if spec is None or not spec.submodule_search_locations:
            raise ValueError("aiconfigurator_core is not installed; pass a path to the AIC systems/ folder")
        data_root = Path(list(spec.submodule_search_locations)[0])
    root = Path(data_root)
    for cand in (root, root / "systems"):
        if (cand / "data").is_dir():
            return cand
    raise ValueError(f"no AIC systems/data folder under {root}; pass the aiconfigurator systems/ folder or its parent")


def vllm_gpus(data_root: Path | None = None) -> list[str]:
    """Catalogue names of the GPUs AIConfigurator's data (``data_root`` or the installed package)
    holds vLLM tables for; a folder listing, no table read."""
    return [name for name in map(_catalogue_name, _vllm_systems(_systems_dir(data_root))) if name is not None]


def _vllm_systems(systems: Path) -> list[str]:
    """AIC system folders (e.g. "h100_sxm") with any vLLM table."""
    return sorted(p.name for p in (systems / "data").iterdir() if any(p.glob("*/vllm")))


def _select_gpus(systems: Path, wanted, skipped: list[str]) -> list[str]:
    have = _vllm_systems(systems)
    if wanted:
        keys = {_key(w) for w in wanted} | {k for k in map(_catalogue_key, wanted) if k}   # aliases: "H100"
        chosen = [g for g in have if _key(g) in keys or _catalogue_key(g) in keys]
        if not chosen:
            names = [f"{g} ({_catalogue_name(g) or 'no catalogue GPU'})" for g in have]
            raise ValueError(f"no AIC vllm data for GPUs {list(wanted)}; valid: {', '.join(names)}")
        have = chosen
    out = []
    for g in have:
        try:
            get_gpu(g)
            out.append(g)
        except ValueError:
            skipped.append(f"{g}: no frontier catalogue GPU for this AIC system")
    return out


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", str(name).lower())


def _catalogue_name(name: str) -> str | None:
    try:
        return get_gpu(name).name
    except ValueError:
        return None


def _catalogue_key(name: str) -> str | None:
    found = _catalogue_name(name)
    return None if found is None else _key(found)


def _version_key(v: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _vllm_version_dir(systems: Path, aic_gpu: str, version: str | None, skipped: list[str]) -> str | None:
    found = sorted({p.name for p in (systems / "data" / aic_gpu).glob("*/vllm/*") if p.is_dir()}, key=_version_key)
    if version is not None:
        if version not in found:
            skipped.append(f"{aic_gpu}: no vllm {version} data (have {', '.join(found)})")
            return None
        return version
    current = _query_current(systems, aic_gpu, "vllm")
    return current if current in found else found[-1]


def _query_current(systems: Path, aic_gpu: str, framework: str) -> str | None:
    path = systems / "query_versions.yaml"
    if not path.exists():
        return None
    q = yaml.safe_load(path.read_text()) or {}
    slot = (q.get("overrides") or {}).get(aic_gpu, {}).get(framework) or (q.get("defaults") or {}).get(framework) or {}
    return slot.get("current")


def _read(systems: Path, aic_gpu: str, rel: str, skipped: list[str]) -> tuple[pd.DataFrame, str] | None:
    """Table ``rel`` (``<op>/vllm/<v>/<table>.parquet``); if the vllm version lacks it, the newest
    older vllm version that has it (AIC's backward fill; rows keep their own version), else the
    oldest newer one (only an explicitly asked, older version can lack every older table: the H200
    has MoE tables of 0.19.0 but GEMM tables of 0.24.0 alone)."""
    path = systems / "data" / aic_gpu / rel
    if not path.exists() and "/vllm/" in rel:
        op, _, want, table = rel.split("/")
        have = sorted((systems / "data" / aic_gpu / op / "vllm").glob(f"*/{table}"),
                      key=lambda p: _version_key(p.parent.name))
        older = [p for p in have if _version_key(p.parent.name) < _version_key(want)]
        if have:
            path, how = (older[-1], "backfilled") if older else (have[0], "forward-filled")
            rel = f"{op}/vllm/{path.parent.name}/{table}"
            skipped.append(f"{aic_gpu}: {op}/vllm/{want}/{table} absent, {how} from {rel}")
    if not path.exists():
        skipped.append(f"{aic_gpu}: {rel} absent")
        return None
    return pd.read_parquet(path), f"data/{aic_gpu}/{rel}"


def _provenance(df: pd.DataFrame, gpu: str, table: str, framework: str, folder_version: str) -> dict:
    version = df["version"].astype(str) if "version" in df else folder_version
    device = df["device"].astype(str) if "device" in df else None
    return dict(gpu=gpu, device_name=device, framework=framework, framework_version=version,
                kernel_source=df["kernel_source"].astype(str), source="aiconfigurator", source_table=table)


def _ms_to_s(df: pd.DataFrame) -> pd.Series:
    return df["latency"].astype(float) / 1e3


def _linear(systems, aic_gpu, gpu, vdir, skipped):
    got = _read(systems, aic_gpu, f"gemm/vllm/{vdir}/gemm_perf.parquet", skipped)
    if got is None:
        return []
    d, table = got
    out = pd.DataFrame({"op_name": "gemm", "m": d["m"], "n": d["n"], "k": d["k"],
                        "dtype": d["gemm_dtype"].map(ps.normalize_dtype), "latency_s_median": _ms_to_s(d)})
    return [finish(out, "linear", timing_mode="kernel", backend="vllm",
                   **_provenance(d, gpu, table, "vllm", vdir))]


def _attention(systems, aic_gpu, gpu, vdir, skipped):
    frames = []
    for table, op in (("context_attention_perf", "context"), ("generation_attention_perf", "generation")):
        got = _read(systems, aic_gpu, f"attention/vllm/{vdir}/{table}.parquet", skipped)
        if got is not None:
            d, rel = got
            cols = dict(num_heads=d["num_heads"], num_kv_heads=d["num_key_value_heads"], head_dim=d["head_dim"],
                        window_size=d["window_size"] if "window_size" in d else 0, attn_dtype=d["attn_dtype"].map(ps.normalize_dtype),
                        kv_dtype=d["kv_cache_dtype"].map(ps.normalize_dtype), is_mla=False)
            frames.append(_uniform_batch(d, op, "kernel", gpu, rel, vdir, cols, ctx_offset=1))
    dims_skipped = set()
    for table, op in (("mla_context_module_perf", "context"), ("mla_generation_module_perf", "generation")):
        got = _read(systems, aic_gpu, f"mla/vllm/{vdir}/{table}.parquet", skipped)
        if got is not None:
            d, rel = got
            dims = pd.DataFrame([_MLA_DIMS.get(m, {}) for m in d["model"]], index=d.index)
            dims_skipped |= {m for m in d["model"].unique() if m not in _MLA_DIMS}
            for c in ("kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                dims[c] = dims[c] if c in dims else None
            cols = dict(num_heads=d["num_heads"], num_kv_heads=1, window_size=0,
                        head_dim=(dims["kv_lora_rank"] + dims["qk_rope_head_dim"]).astype("Int64"),
                        attn_dtype=d["mla_dtype"].map(ps.normalize_dtype),
                        kv_dtype=d["kv_cache_dtype"].map(ps.normalize_dtype), is_mla=True,
                        mla_gemm_dtype=d["gemm_type"].map(ps.normalize_dtype), **{c: dims[c] for c in dims})
            frames.append(_uniform_batch(d, op, "module", gpu, rel, vdir, cols, ctx_offset=0))
    for m in sorted(dims_skipped):
        skipped.append(f"{aic_gpu}: MLA dims unknown for {m} (kv_lora_rank etc. left null)")
    return frames


def _uniform_batch(d, op, scope, gpu, table, vdir, cols, ctx_offset):
    """Distribution columns of a batch of ``batch_size`` identical requests.

    context: each request prefills ``isl`` new tokens, no cached prefix.
    generation: each request decodes one token over ``step + ctx_offset`` KV tokens.
    """
    b = d["batch_size"].astype("int64")
    zero = pd.Series(0, index=d.index, dtype="int64")
    if op == "context":
        plen, dctx, n_pre, n_dec = d["isl"].astype("int64"), zero, b, zero
    else:
        plen, dctx, n_pre, n_dec = zero, d["step"].astype("int64") + ctx_offset, zero, b
    out = pd.DataFrame({"op_name": op, "scope": scope, "batch_size": b, "num_prefill": n_pre, "num_decode": n_dec,
                        "prefill_tokens": n_pre * plen, "prefill_ctx_max": zero,
                        "latency_s_median": _ms_to_s(d), **cols})
    for stat in ("min", "max", "mean", "p50", "p90"):
        out[f"prefill_len_{stat}"] = plen
        out[f"decode_ctx_{stat}"] = dctx
    return finish(out, "attention", timing_mode="kernel", backend="vllm", **_provenance(d, gpu, table, "vllm", vdir))


def _moe(systems, aic_gpu, gpu, vdir, skipped):
    got = _read(systems, aic_gpu, f"moe/vllm/{vdir}/moe_perf.parquet", skipped)
    if got is None:
        return []
    d, table = got
    cols = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution"]
    out = d[cols].copy()
    out["op_name"] = "moe"
    out["moe_dtype"] = d["moe_dtype"].map(ps.normalize_dtype)
    out["latency_s_median"] = _ms_to_s(d)
    return [finish(out, "moe", timing_mode="kernel", backend="vllm", **_provenance(d, gpu, table, "vllm", vdir))]


def _comm(systems, aic_gpu, gpu, vdir, skipped):
    link = intra_node_link(get_gpu(gpu))   # no NVLink (L40S, RTX PRO 6000): intra-node comm over PCIe
    frames = []
    got = _read(systems, aic_gpu, f"comm/vllm/{vdir}/custom_allreduce_perf.parquet", skipped)
    if got is not None:
        d, table = got
        frames.append(_comm_frame(d, d["allreduce_dtype"], d["backend"].astype(str), link, gpu, table, "vllm", vdir))
    if any((systems / "data" / aic_gpu / "comm" / "vllm").glob("*/moe_a2a_perf.parquet")):
        got = _read(systems, aic_gpu, f"comm/vllm/{vdir}/moe_a2a_perf.parquet", skipped)
        if got is not None:
            frames.append(_moe_a2a_frame(got[0], link, gpu, got[1], vdir))
    frames += _sglang_deepep_frames(systems, aic_gpu, gpu, link)
    for fw in ("nccl", "oneccl"):
        versions = sorted((p.name for p in (systems / "data" / aic_gpu / "comm" / fw).glob("*") if p.is_dir()),
                          key=_version_key)
        if not versions:
            continue
        want = str((_system_yaml(systems, aic_gpu).get("misc") or {}).get("nccl_version"))
        v = want if want in versions else versions[-1]
        got = _read(systems, aic_gpu, f"comm/{fw}/{v}/{fw}_perf.parquet", skipped)
        if got is not None:
            d, table = got
            frames.append(_comm_frame(d, d["nccl_dtype"], fw, link, gpu, table, fw, v))
    return frames


def _comm_frame(d, dtype_col, backend, link, gpu, table, framework, version):
    dtype = dtype_col.map(ps.normalize_dtype)
    op = d["op_name"].map(_COMM_OPS)
    out = pd.DataFrame({"op_name": op, "message_bytes": d["message_size"].astype("int64") * dtype.map(DTYPE_BYTES),
                        "num_gpus": d["num_gpus"], "dtype": dtype, "link": link, "backend": backend,
                        "latency_s_median": _ms_to_s(d)})
    out["timing_mode"] = (out["backend"] == "vllm_eager").map({True: "launch", False: "kernel"})
    return finish(out, "comm", **_provenance(d, gpu, table, framework, version))


def _moe_a2a_rows(op_name, num_gpus, num_tokens, hidden_size, topk, num_experts, link, backend,
                  latency_us) -> pd.DataFrame:
    """Comm rows of an MoE dispatch or combine kernel (the family columns; the caller adds
    provenance): message_bytes = the bf16 hidden states of the tokens each rank dispatches."""
    out = pd.DataFrame({"op_name": op_name, "num_gpus": num_gpus, "num_tokens": num_tokens,
                        "hidden_size": hidden_size, "topk": topk, "num_experts": num_experts, "dtype": "bf16",
                        "link": link, "backend": backend, "latency_s_median": latency_us.astype(float) / 1e6})
    out["message_bytes"] = out["num_tokens"].astype("int64") * out["hidden_size"] * DTYPE_BYTES["bf16"]
    return out


def _moe_a2a_frame(d, link, gpu, table, vdir):
    """DeepEP dispatch / combine rows (``moe_a2a_perf``: one node, latency in us) as comm rows
    ``moe_<phase>``: backend = AIC's comm_backend (deepep_ht, deepep_ll, ...), num_tokens = the
    tokens each rank dispatches."""
    d = d[d["node_num"] == 1]
    out = _moe_a2a_rows("moe_" + d["phase"].astype(str), d["ep_size"], d["num_tokens"], d["hidden_size"], d["topk"],
                        d["num_experts"], link, d["comm_backend"].astype(str), d["latency"])
    return finish(out, "comm", timing_mode="kernel", **_provenance(d, gpu, table, "vllm", vdir))


def _sglang_deepep_frames(systems: Path, aic_gpu: str, gpu: str, link: str) -> list[pd.DataFrame]:
    """SGLang's wide-EP DeepEP tables (``comm/sglang/<v>/wideep_deepep_{ll,normal}_perf``), the only
    ones AIC has across nodes (1, 2, 4, 8 nodes of 8 GPUs, DeepEP inside SGLang 0.5.0) as comm rows
    ``moe_<phase>`` of framework "sglang": backend deepep_ll / deepep_ht (SGLang's "normal" mode),
    num_gpus = 8 x node_num, link the intra-node one in one node, else "network". Normal-mode rows
    only at DeepEP's default 20 SMs per phase (what vLLM runs); latency = transmit + notify (us)."""
    frames = []
    for path in sorted((systems / "data" / aic_gpu / "comm" / "sglang").glob("*/wideep_deepep_*_perf.parquet")):
        d = pd.read_parquet(path)
        table = str(path.relative_to(systems))
        ll = path.name == "wideep_deepep_ll_perf.parquet"
        if not ll:
            d = d[(d["dispatch_sms"] == 20) & (d["combine_sms"] == 20)]
        for phase in ("dispatch", "combine"):
            lat = d[f"{phase}_avg_t_us"] if ll else d[f"{phase}_transmit_us"] + d[f"{phase}_notify_us"]
            out = _moe_a2a_rows(f"moe_{phase}", 8 * d["node_num"], d["num_token"], d["hidden_size"], d["num_topk"],
                                d["num_experts"], d["node_num"].map(lambda n: link if n == 1 else "network"),
                                "deepep_ll" if ll else "deepep_ht", lat)
            frames.append(finish(out, "comm", timing_mode="kernel",
                                 **_provenance(d, gpu, table, "sglang", path.parent.name)))
    return frames


# AIC GDN kernel -> the gdn family's op_name
_GDN_KERNELS = {"chunk_gated_delta_rule_flashinfer": "chunked",
                "fused_recurrent_gated_delta_rule_packed_decode": "recurrent",
                "causal_conv1d_fn": "conv1d", "causal_conv1d_update": "conv1d_update"}
_GDN_STATE_DTYPE = {"chunked": "fp32", "recurrent": "fp32", "conv1d": "bf16", "conv1d_update": "bf16"}


def _read_optional(systems, aic_gpu, op_dir: str, table: str, vdir: str, skipped) -> tuple[pd.DataFrame, str] | None:
    """``_read`` of a table only some GPUs have (``<op_dir>/vllm/<v>/<table>.parquet``): None, and a
    line in ``skipped``, for a GPU with no version of it."""
    if not any((systems / "data" / aic_gpu / op_dir / "vllm").glob(f"*/{table}.parquet")):
        skipped.append(f"{aic_gpu}: no {op_dir}/vllm/*/{table} table")
        return None
    return _read(systems, aic_gpu, f"{op_dir}/vllm/{vdir}/{table}.parquet", skipped)


def _gdn(systems, aic_gpu, gpu, vdir, skipped):
    got = _read_optional(systems, aic_gpu, "linear_attention", "gdn_perf", vdir, skipped)
    if got is None:
        return []
    d, table = got
    d = d[d["kernel_source"].isin(list(_GDN_KERNELS))]
    op = d["kernel_source"].map(_GDN_KERNELS)
    out = pd.DataFrame({"op_name": op, "batch_size": d["batch_size"],
                        "seq_len": d["seq_len"], "num_tokens": d["num_tokens"], "num_k_heads": d["num_k_heads"],
                        "num_v_heads": d["num_v_heads"], "head_k_dim": d["head_k_dim"],
                        "head_v_dim": d["head_v_dim"], "state_dtype": op.map(_GDN_STATE_DTYPE),
                        "d_conv": d["d_conv"], "latency_s_median": _ms_to_s(d)})
    return [finish(out, "gdn", timing_mode="kernel", backend="vllm", **_provenance(d, gpu, table, "vllm", vdir))]


def _encoder_attention(systems, aic_gpu, gpu, vdir, skipped):
    got = _read_optional(systems, aic_gpu, "encoder_attention", "encoder_attention_perf", vdir, skipped)
    if got is None:
        return []
    d, table = got
    out = pd.DataFrame({"op_name": "vit", "batch_size": d["batch_size"], "seq_len": d["isl"],
                        "num_tokens": d["batch_size"] * d["isl"], "num_heads": d["num_heads"],
                        "head_dim": d["head_dim"], "dtype": d["attn_dtype"].map(ps.normalize_dtype),
                        "latency_s_median": _ms_to_s(d)})
    return [finish(out, "encoder_attention", timing_mode="kernel", backend="vllm",
                   **_provenance(d, gpu, table, "vllm", vdir))]


def _system_yaml(systems: Path, aic_gpu: str) -> dict:
    path = systems / f"{aic_gpu}.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}


_FAMILY_READERS = {"linear": _linear, "attention": _attention, "moe": _moe, "comm": _comm, "gdn": _gdn,
                   "encoder_attention": _encoder_attention}
