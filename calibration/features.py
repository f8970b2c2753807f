"""Feature functions per operator family, shared by training rows and simulator op specs.

Both inputs go through one *canonical table* per family (a dict of equal-length numpy
arrays named like the profile-schema columns), and one featurizer turns a canonical
table into the model matrix:

    profile rows (DataFrame) --canon_from_rows--\\
                                                 >-- canonical table --featurize--> X
    op specs (GemmOp, ...)   --canon_from_ops---/

so the simulator's queries see exactly the features the models were fitted on.
Features are log2 of physical quantities (FLOPs, bytes, tile counts) next to the raw
shape, which lets small forests interpolate between measured shapes. Targets are log(latency_s)
or log(latency_s / reference_s) per family (see ``calibration.predictors.base``).

Mapping of op specs onto the schema (the rules the simulator relies on):
- GemmOp: dtype from the quantization: compute "fp8" -> "fp8_block" when the weights carry
  block scales (weight_bytes_per_param > 1.0), else "fp8"; compute "fp4" -> "nvfp4";
  compute "bf16" with sub-byte weights -> "int4_wo"; else "bf16".
- AttentionOp: decode_ctx in the schema counts the KV tokens incl. the new one, the op
  counts the context before it, so schema decode_ctx = op decode_ctx + 1.
- MoeOp: the row of the kernel AIC profiled for the whole layer's sharding, as its moe_perf
  rows are written: num_experts = the global count, moe_tp_size = op.moe_tp, moe_ep_size =
  op.moe_ep (None: num_experts / num_local_experts), inter_size = the unsharded width
  (op.inter x moe_tp; features divide by moe_tp again). moe_dtype from op.quant_method
  (MOE_DTYPES: mxfp4 -> w4a16_mxfp4, the weight-only kernel gpt-oss runs; nvfp4_w4a16, vLLM's
  FP4 Marlin, which no table times -> int4_wo, the measured 4-bit Marlin kernel); without one, from
  the compute dtype as for GEMMs (fp8 -> fp8_block with block scales, fp4 -> nvfp4, else
  bf16). Routed pairs and the load statistics come from the op (tokens_per_expert when
  given). An op the batch engine builds for a profiled balanced shape therefore features
  exactly as that AIC row (tested).
- CommOp: kind -> op_name, bytes -> message_bytes, group_size -> num_gpus.
- GdnOp of one kernel (``GdnOp.kernel_parts`` splits a mixed one): prefills -> op_name "chunked"
  (the delta rule) or "conv1d", batch_size = sequences, seq_len = the longest one's new tokens
  (the chunked scan's sequential depth; a uniform row's only length), num_tokens = their sum;
  decodes -> "recurrent" or "conv1d_update", batch_size = decodes, num_tokens = decodes + a
  verify's drafts, seq_len = ceil(num_tokens / batch_size) (1 for plain decodes, as every
  measured row); heads and head dims per rank; state_dtype: the delta rule's state from its
  bytes per element (4 -> fp32, 2 -> bf16), the conv state's from the activations'; d_conv =
  the conv window.
- ElementwiseOp: the name picks the profiled kernel (ELEMENTWISE_KINDS: input/post norm ->
  fused_add_rms_norm, final/MLA norms -> rms_norm, rotary -> rotary_embedding, *_act ->
  silu_and_mul; other names, e.g. embedding and sampler, keep their name and so have no
  sub-model: NaN, roofline). dtype "bf16" (2-byte activations, as GemmOp compute "bf16"), and
  hidden_size = bytes_per_token / (ELEMENTWISE_PASSES[kind] x 2): the width the profiler
  records (e.g. (H + KV)/tp * d for RoPE, whose op carries the model's hidden size instead).
"""

from __future__ import annotations

import functools
from typing import Sequence

import numpy as np
import pandas as pd

from frontier.ops import (GDN_CHUNK_TOKENS, AttentionOp, CommOp, ElementwiseOp, EncoderAttentionOp, GdnOp, GemmOp,
                          MoeOp)
from frontier.power_law_routing import power_law_loads

Canon = dict[str, np.ndarray]

# Bump when any canonical column, feature or reference formula changes: bundles record it,
# cached auto bundles of another version are refitted and load_bundle refuses them.
FEATURES_VERSION = 12      # 3: MLA module keys; 4: GEMM 16/32-row tile features and roofline target fitted
                           # per dtype; 5: MoE power-law load statistics; 6: 20-tree GEMM forest;
                           # 7: MoE ratio target on a roofline fitted per MoE dtype (moe_roofline);
                           # 8: attention ratio target on a fitted roofline; 9: attention back on the
                           # nominal reference (v8's fitted one worsened the end-to-end bench; attention.py);
                           # 10: the gdn family (Gated DeltaNet's gated delta rule); 11: its conv1d kernels;
                           # 12: the encoder_attention family (vision towers' ViT attention)
SMS = 132.0                 # streaming multiprocessors of an H100/H200 SXM (shapes the wave features)
RIDGE_FLOP_PER_BYTE = 300.0  # nominal H100/H200 ridge point; only shapes the roofline feature
_DTYPE_BYTES = {"fp32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int8": 1.0,
                "int4_wo": 0.5, "nvfp4": 0.5, "mxfp4": 0.5, "w4a16_mxfp4": 0.5, "w4a8_mxfp4_mxfp8": 0.5}
# MoeOp.quant_method (frontier.quant.METHODS) -> the moe_dtype of AIC's vLLM moe_perf rows
MOE_DTYPES = {"none": "bf16", "fp8": "fp8", "fp8_block": "fp8_block", "mxfp4": "w4a16_mxfp4",
              "nvfp4": "nvfp4", "int4_wo": "int4_wo", "nvfp4_w4a16": "int4_wo"}
COMM_OP_CODES = {"all_reduce": 0, "all_gather": 1, "reduce_scatter": 2, "all_to_all": 3, "p2p": 4}
LINK_CODES = {"nvlink": 0, "pcie": 1, "network": 2}

CANON_COLUMNS: dict[str, tuple[str, ...]] = {
    "linear": ("m", "n", "k", "dtype"),
    "attention": ("op_name", "batch_size", "num_prefill", "num_decode", "prefill_tokens",
                  "prefill_len_min", "prefill_len_max", "prefill_len_mean", "prefill_len_p50",
                  "prefill_len_p90", "prefill_ctx_max", "prefill_pairs",
                  "decode_ctx_min", "decode_ctx_max", "decode_ctx_mean", "decode_ctx_p50",
                  "decode_ctx_p90", "num_heads", "num_kv_heads", "head_dim", "window_size",
                  "kv_dtype", "is_mla"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
            "moe_ep_size", "moe_dtype", "routed_pairs", "max_tokens_per_expert",
            "var_tokens_per_expert"),
    "comm": ("op_name", "message_bytes", "num_gpus", "link"),
    "elementwise": ("op_name", "num_tokens", "hidden_size", "dtype"),
    "gdn": ("op_name", "batch_size", "seq_len", "num_tokens", "num_k_heads", "num_v_heads", "head_k_dim",
            "head_v_dim", "state_dtype", "d_conv"),
    "encoder_attention": ("op_name", "batch_size", "seq_len", "num_tokens", "num_heads", "head_dim", "dtype"),
}
# The columns that name a sub-model (the kernel family changes with them).
SUBMODEL_KEY = {"linear": "dtype", "attention": "kv_dtype", "moe": "moe_dtype", "comm": "op_name",
                "elementwise": "op_name", "gdn": "op_name", "encoder_attention": "op_name"}
# The token axis of each family (what the token-count-only baseline regresses on).
TOKENS = {"linear": "m", "attention": "num_tokens", "moe": "num_tokens", "comm": "message_bytes",
          "elementwise": "num_tokens", "gdn": "num_tokens", "encoder_attention": "num_tokens"}
# Elementwise kernels: tensor passes over the [tokens, width] rows (reads + writes), and the
# profiled kernel a simulator ElementwiseOp name stands for (names ending "_act": silu_and_mul).
ELEMENTWISE_PASSES = {"rms_norm": 2, "fused_add_rms_norm": 4, "rotary_embedding": 2, "silu_and_mul": 3,
                      "kv_cache_write": 2}
ELEMENTWISE_KINDS = {"input_norm": "fused_add_rms_norm", "post_norm": "fused_add_rms_norm",
                     "final_norm": "rms_norm", "mla_norms": "rms_norm", "sandwich_norm": "rms_norm",
                     "rotary": "rotary_embedding"}


def _lg(x) -> np.ndarray:
    return np.log2(1.0 + np.asarray(x, dtype=float))


# ---------------------------------------------------------------- rows -> canonical

def canon_from_rows(df: pd.DataFrame, family: str) -> Canon:
    """Canonical table of profile rows (schema columns; see frontier.profile_schema)."""
    if family == "attention":
        return _attention_rows(df)
    if family == "moe":
        return _moe_rows(df)
    out = {c: df[c].to_numpy() for c in CANON_COLUMNS[family]}
    return out


def _col(df: pd.DataFrame, name: str, default) -> pd.Series:
    """Column `name` with nulls (or the whole column, when absent) set to `default`."""
    if name not in df.columns:
        return pd.Series([default] * len(df), index=df.index)
    return df[name].where(df[name].notna(), default)


def _attention_rows(df: pd.DataFrame) -> Canon:
    out = {c: df[c].to_numpy() for c in CANON_COLUMNS["attention"]
           if c in df.columns and c != "prefill_pairs"}
    out["prefill_ctx_max"] = _col(df, "prefill_ctx_max", 0).to_numpy(float)
    out["window_size"] = _col(df, "window_size", 0).to_numpy(float)
    out["is_mla"] = _col(df, "is_mla", False).to_numpy(bool)
    if "op_name" not in df.columns:
        npre, ndec = df["num_prefill"].to_numpy(), df["num_decode"].to_numpy()
        out["op_name"] = np.where((npre > 0) & (ndec > 0), "mixed", np.where(npre > 0, "context", "generation"))
    mean = df["prefill_len_mean"].to_numpy(float)
    # exact for uniform rows (every measured row): n*ctx + n(n+1)/2 per request
    out["prefill_pairs"] = df["num_prefill"].to_numpy(float) * (mean * out["prefill_ctx_max"] + mean * (mean + 1) / 2)
    return out


def _moe_rows(df: pd.DataFrame) -> Canon:
    out = {c: df[c].to_numpy() for c in CANON_COLUMNS["moe"] if c in df.columns and c != "routed_pairs"}
    tok, k = df["num_tokens"].to_numpy(float), df["topk"].to_numpy(float)
    e, ep = df["num_experts"].to_numpy(float), df["moe_ep_size"].to_numpy(float)
    out["routed_pairs"] = mean_rank_pairs(tok, k, ep)
    mx, var = _load_stats_from_distribution(_col(df, "distribution", "balanced").to_numpy(), tok, k, e, ep)
    given_mx = _col(df, "max_tokens_per_expert", np.nan).to_numpy(float)
    given_var = _col(df, "var_tokens_per_expert", np.nan).to_numpy(float)
    out["max_tokens_per_expert"] = np.where(np.isnan(given_mx), mx, given_mx)
    out["var_tokens_per_expert"] = np.where(np.isnan(given_var), var, given_var)
    return out


def mean_rank_pairs(tokens, topk, ep):
    """The ``routed_pairs`` of a canonical MoE row: the mean EP rank's share T k / ep of the
    (token, expert) pairs, on training rows and queries alike (``moe_canon_row``; numbers or
    numpy arrays)."""
    return tokens * topk / ep


def _load_stats_from_distribution(dist: np.ndarray, tokens: np.ndarray, topk: np.ndarray, experts: np.ndarray,
                                  ep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Max / variance of tokens per local expert for AIC's named router skews.

    balanced: pairs spread evenly (max ceil(pairs / E), variance 0). power_law_<a>: the
    mean over POWER_LAW_DRAWS draws of ``power_law_rank_stats`` (the busiest EP rank of
    AIC's sampler as reconstructed there).
    """
    mx, var = np.empty(len(dist)), np.empty(len(dist))
    for i, (d, t, k, e, r) in enumerate(zip(dist, tokens, topk, experts, ep)):
        if not str(d).startswith("power_law_"):
            mx[i], var[i] = np.ceil(t * k / e), 0.0
            continue
        mx[i], var[i] = power_law_rank_stats(int(t), int(e), int(k), int(r), float(str(d)[len("power_law_"):]))
    return mx, var


POWER_LAW_DRAWS = 16


@functools.lru_cache(maxsize=None)
def power_law_rank_stats(tokens: int, experts: int, topk: int, ep: int, alpha: float) -> tuple[float, float]:
    """(max, variance) of tokens per local expert on the busiest EP rank of AIC's power-law rows,
    averaged over POWER_LAW_DRAWS seeded draws (deterministic).

    One draw is ``frontier.power_law_routing.power_law_loads``, our reconstruction of AIC's
    sampler (the simulator's ``--moe-routing power_law:ALPHA`` draws with it too); the EP rank
    with the most pairs is the one measured. Chosen by held-out error, not by its provenance:
    against the former proxy (Zipf shares, the hottest E/ep experts local) the MoE p95
    (``frontier calibrate`` split, 20 %, seed 0) goes 13.4 -> 12.5 % (H200) and 12.9 -> 12.3 %
    (H100) by rows, 15.2 -> 14.7 % and 14.7 -> 14.7 % by token points; in a scratch comparison on
    H200 rows (unquantized forests) the proxy gave 13.04 %, this sampler 12.10 %, the simulator
    router's former reading (weights on [1, T], water-filled) 12.90 %.
    routed_pairs stays the mean rank's share T k / ep (the busiest rank's sum measured worse).
    """
    rng = np.random.default_rng([tokens, experts, topk, ep, round(alpha * 1000)])
    got = np.empty((POWER_LAW_DRAWS, 2))
    for j in range(POWER_LAW_DRAWS):
        load = power_law_loads(rng, tokens, experts, topk, alpha)
        ranks = load.reshape(ep, experts // ep)
        busiest = ranks[int(np.argmax(ranks.sum(axis=1)))]
        got[j] = busiest.max(), busiest.var()
    mean = got.mean(axis=0)
    return float(mean[0]), float(mean[1])


# ---------------------------------------------------------------- ops -> canonical

def gemm_dtype(op: GemmOp) -> str:
    """The GEMM table (sub-model key) of an op: its compute dtype and weight format. bf16 math on
    quantized weights is weight-only: 4-bit ("int4_wo") or 8-bit ("fp8_wo": vLLM's FP8 Marlin on a
    GPU without FP8 tensor cores, which no measured table holds, so the roofline prices it)."""
    if op.compute_dtype == "fp32":
        return "fp32"
    if op.compute_dtype == "fp8":
        return "fp8_block" if op.weight_bytes_per_param > 1.0 else "fp8"
    if op.compute_dtype == "fp4":
        return "nvfp4"
    if op.weight_bytes_per_param < 1.0:
        return "int4_wo"
    return "fp8_wo" if op.weight_bytes_per_param < 2.0 else "bf16"


def _stats(xs: Sequence[int]) -> tuple[float, float, float, float, float]:
    if not xs:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    a = np.asarray(xs, dtype=float)
    return float(a.min()), float(a.max()), float(a.mean()), float(np.percentile(a, 50)), float(np.percentile(a, 90))


def _kv_dtype(kv_bytes: float) -> str:
    return "fp8" if kv_bytes <= 1.0 else "bf16"


def attention_canon_row(op: AttentionOp, stats=_stats) -> dict[str, object]:
    """One canonical attention row of an op: the batch's length distribution + head shape.
    `stats`: (min, max, mean, p50, p90) of a length list (the query path passes a pure-Python twin)."""
    pmin, pmax, pmean, p50, p90 = stats(op.prefill_new)
    dec = [c + 1 for c in op.decode_ctx]             # schema counts the new token's KV too
    dmin, dmax, dmean, d50, d90 = stats(dec)
    pairs = float(sum(n * c + n * (n + 1) / 2 for n, c in zip(op.prefill_new, op.prefill_ctx)))
    kind = "mixed" if op.prefill_new and op.decode_ctx else ("context" if op.prefill_new else "generation")
    return {"op_name": kind, "batch_size": op.num_reqs, "num_prefill": len(op.prefill_new),
            "num_decode": len(op.decode_ctx), "prefill_tokens": sum(op.prefill_new),
            "prefill_len_min": pmin, "prefill_len_max": pmax, "prefill_len_mean": pmean,
            "prefill_len_p50": p50, "prefill_len_p90": p90,
            "prefill_ctx_max": float(max(op.prefill_ctx, default=0)), "prefill_pairs": pairs,
            "decode_ctx_min": dmin, "decode_ctx_max": dmax, "decode_ctx_mean": dmean,
            "decode_ctx_p50": d50, "decode_ctx_p90": d90, "num_heads": op.num_heads,
            "num_kv_heads": op.num_kv_heads, "head_dim": op.head_dim, "window_size": 0.0,
            "kv_dtype": _kv_dtype(op.kv_bytes_per_elem), "is_mla": op.is_mla}


def _load_stats(op: MoeOp) -> tuple[float, float]:
    """(max, variance) of a MoE op's tokens per local expert (balanced: ceil(pairs / local), 0)."""
    loads = op.tokens_per_expert
    if loads is None:
        return float(np.ceil(op.routed_pairs / op.num_local_experts)), 0.0
    return float(max(loads)), float(np.var(loads))


def moe_canon_row(op: MoeOp, load_stats=_load_stats) -> dict[str, object]:
    """One canonical MoE row of an op (see the module docstring for the mapping). `load_stats`:
    (max, variance) of its per-expert loads (the query path passes a pure-Python twin).

    ``routed_pairs`` is the mean EP rank's share T k / ep, as on every training row
    (``_moe_rows``), not the op's own ``routed_pairs`` (the pairs its rank receives, which the
    roofline prices): a skewed router's rank differs from the mean in its load statistics,
    which the rows describe by the busiest rank's max and variance. Before 2026-11-30 (seventh
    stop) queries passed the rank's own sum, so a skewed EP rank looked like a larger step than
    any row of its size (Kimi-K2.5 NVFP4, B200, tp4 x ep4, 4 decode tokens: 32 pairs on one
    rank under power-law routing read as 32 pairs per rank: 135 us instead of ~35 us)."""
    mx, var = load_stats(op)
    if op.quant_method is not None:
        dtype = MOE_DTYPES[op.quant_method]
    else:
        dtype = {"bf16": "bf16", "fp8": "fp8_block" if op.weight_bytes_per_param > 1.0 else "fp8",
                 "fp4": "nvfp4"}[op.compute_dtype]
    ep = op.moe_ep if op.moe_ep is not None else max(1, round(op.num_experts / op.num_local_experts))
    return {"num_tokens": op.tokens, "hidden_size": op.hidden, "inter_size": op.inter * op.moe_tp,
            "topk": op.topk, "num_experts": op.num_experts, "moe_tp_size": op.moe_tp,
            "moe_ep_size": ep, "moe_dtype": dtype, "routed_pairs": mean_rank_pairs(op.tokens, op.topk, ep),
            "max_tokens_per_expert": mx, "var_tokens_per_expert": var}


def canon_row_from_op(op) -> tuple[str, dict[str, object]]:
    """(family, canonical row) of one op spec; ValueError for families without a predictor."""
    if isinstance(op, GemmOp):
        return "linear", {"m": op.m, "n": op.n, "k": op.k, "dtype": gemm_dtype(op)}
    if isinstance(op, AttentionOp):
        return "attention", attention_canon_row(op)
    if isinstance(op, MoeOp):
        return "moe", moe_canon_row(op)
    if isinstance(op, CommOp):
        return "comm", {"op_name": op.kind, "message_bytes": op.bytes, "num_gpus": op.group_size,
                        "link": op.link}
    if isinstance(op, GdnOp):
        return "gdn", gdn_canon_row(op)
    if isinstance(op, EncoderAttentionOp):
        return "encoder_attention", encoder_attention_canon_row(op)
    if isinstance(op, ElementwiseOp):
        kind = "silu_and_mul" if op.name.endswith("_act") else ELEMENTWISE_KINDS.get(op.name, op.name)
        width = max(1, round(op.bytes_per_token / (ELEMENTWISE_PASSES.get(kind, 2) * 2.0)))
        return "elementwise", {"op_name": kind, "num_tokens": op.tokens, "hidden_size": width, "dtype": "bf16"}
    raise ValueError(f"no learned predictor family for {type(op).__name__}; price it with the roofline")


def gdn_canon_row(op: GdnOp) -> dict[str, object]:
    """One canonical gdn row of a one-kernel GdnOp (module docstring; ValueError for a mixed one)."""
    if op.prefill_new and op.num_decodes:
        raise ValueError("a GdnOp with prefills and decodes runs two kernels; price its kernel_parts()")
    conv = op.kernel == "conv1d"
    state = "fp32" if (op.act_bytes if conv else op.state_bytes_per_elem) >= 4 else "bf16"
    heads = {"num_k_heads": op.num_key_heads, "num_v_heads": op.num_value_heads, "head_k_dim": op.key_head_dim,
             "head_v_dim": op.value_head_dim, "state_dtype": state, "d_conv": op.conv_kernel}
    ssd = "ssd_" if op.kernel == "ssd" else ""      # Mamba2's kernels: no table, unknown keys (the roofline)
    if op.prefill_new:
        return {"op_name": "conv1d" if conv else ssd + "chunked", "batch_size": len(op.prefill_new),
                "seq_len": max(op.prefill_new), "num_tokens": sum(op.prefill_new), **heads}
    tokens = op.num_decodes + op.spec_tokens
    return {"op_name": "conv1d_update" if conv else ssd + "recurrent", "batch_size": op.num_decodes,
            "seq_len": -(-tokens // op.num_decodes), "num_tokens": tokens, **heads}


def encoder_attention_canon_row(op: EncoderAttentionOp) -> dict[str, object]:
    """One canonical encoder_attention row of an op of equal images (the measured rows are uniform;
    ``EncoderAttentionOp.uniform_parts`` splits another; ValueError for one)."""
    b, p = len(op.seq_lens), op.seq_lens[0]
    if op.seq_lens.count(p) != b:
        raise ValueError("an EncoderAttentionOp of unequal images: price its uniform_parts()")
    return {"op_name": "vit", "batch_size": b, "seq_len": p, "num_tokens": op.num_tokens,
            "num_heads": op.num_heads, "head_dim": op.head_dim, "dtype": "bf16" if op.act_bytes == 2 else "fp32"}


def canon_from_records(records: Sequence[dict], family: str) -> Canon:
    """Canonical table from canonical rows (dicts)."""
    return {c: np.asarray([r[c] for r in records]) for c in CANON_COLUMNS[family]}


def canon_from_ops(ops: Sequence, family: str) -> Canon:
    """Canonical table of op specs that all belong to `family`."""
    rows = []
    for op in ops:
        fam, row = canon_row_from_op(op)
        if fam != family:
            raise ValueError(f"{type(op).__name__} is family {fam!r}, not {family!r}")
        rows.append(row)
    return canon_from_records(rows, family)


# ---------------------------------------------------------------- canonical -> features

FEATURE_NAMES: dict[str, tuple[str, ...]] = {
    "linear": ("lg_m", "lg_n", "lg_k", "lg_flops", "lg_bytes", "lg_roof",
               "lg_mt16", "lg_tiles16", "lg_padflops16", "lg_mt32", "lg_tiles32", "lg_padflops32",
               "lg_mt64", "lg_tiles64", "lg_padflops64", "lg_mt128", "lg_tiles128", "lg_padflops128",
               "lg_mt256", "lg_tiles256", "lg_padflops256", "lg_waves128", "lg_waves256",
               "k_div128", "n_div128", "m_frac128"),
    "attention": ("lg_batch", "lg_num_prefill", "lg_num_decode", "lg_prefill_tokens", "lg_tokens",
                  "lg_pl_min", "lg_pl_max", "lg_pl_mean", "lg_pl_p50", "lg_pl_p90", "lg_pctx_max",
                  "lg_dc_min", "lg_dc_max", "lg_dc_mean", "lg_dc_p50", "lg_dc_p90",
                  "lg_heads", "lg_kv_heads", "lg_head_dim", "lg_window", "kv_bytes", "is_mla",
                  "lg_prefill_flops", "lg_decode_kv_bytes", "lg_flops", "lg_q_tiles",
                  "lg_req_pairs", "lg_q_waves", "lg_req_kv_tiles", "lg_dec_ctas", "lg_gqa"),
    "moe": ("lg_tokens", "lg_hidden", "lg_inter_rank", "lg_topk", "lg_experts", "lg_local_experts",
            "lg_pairs", "lg_max_load", "lg_std_load", "skew", "lg_active_experts", "lg_flops",
            "lg_weight_bytes", "lg_max_expert_flops", "lg_tp", "lg_ep", "lg_mean_load",
            "lg_blocks16", "lg_blocks64", "lg_blocks128", "lg_max_blocks64"),
    "comm": ("lg_bytes", "num_gpus", "op_code", "link_code", "lg_bus_bytes"),
    "gdn": ("lg_batch", "lg_seq_len", "lg_tokens", "lg_k_heads", "lg_v_heads", "lg_head_k", "lg_head_v",
            "state_bytes", "lg_chunks", "lg_flops", "lg_state_bytes", "lg_act_bytes", "lg_ctas", "d_conv"),
    "elementwise": ("lg_tokens", "lg_width", "lg_bytes", "dtype_bytes"),
    "encoder_attention": ("lg_batch", "lg_seq_len", "lg_tokens", "lg_heads", "lg_head_dim", "lg_flops", "lg_bytes",
                          "lg_ctas", "lg_waves128", "tile_fill128", "lg_path128x128", "lg_path128x176",
                          "lg_waves192", "tile_fill192", "lg_path192x128", "lg_path192x176"),
}


def featurize(canon: Canon, family: str) -> np.ndarray:
    """Model matrix (rows x FEATURE_NAMES[family]) of a canonical table."""
    return {"linear": _linear, "attention": _attention, "moe": _moe, "comm": _comm,
            "elementwise": _elementwise, "gdn": _gdn, "encoder_attention": _encoder_attention}[family](canon)


def _f(canon: Canon, name: str) -> np.ndarray:
    return np.asarray(canon[name], dtype=float)


def dtype_bytes(dtypes) -> np.ndarray:
    """Bytes per element of each row's dtype name (2.0 for an unknown name); one lookup when
    every row has the same dtype (a GEMM token table: 128 rows of one shape)."""
    names = np.asarray(dtypes).astype(str)
    if len(names) and (names == names[0]).all():
        return np.full(len(names), _DTYPE_BYTES.get(str(names[0]), 2.0))
    return np.array([_DTYPE_BYTES.get(str(d), 2.0) for d in names])


def _linear(c: Canon) -> np.ndarray:
    m, n, k = _f(c, "m"), _f(c, "n"), _f(c, "k")
    wbytes = dtype_bytes(c["dtype"])
    flops = 2 * m * n * k
    nbytes = n * k * wbytes + 2 * (m * k + m * n)
    n_tiles = np.ceil(n / 128)
    raw = [m, n, k, flops, nbytes, np.maximum(flops / RIDGE_FLOP_PER_BYTE, nbytes)]   # -> log2(1 + x), one call
    for tile in (16, 32, 64, 128, 256):   # each column grows with m (token tables walk monotone)
        mt = np.ceil(m / tile)
        raw += [mt, mt * n_tiles, 2 * mt * tile * n * k]
    for tile in (128, 256):   # output tiles per wave of the 132 SMs (H100/H200)
        raw.append(np.ceil(np.ceil(m / tile) * n_tiles / SMS))
    # kernel selection (vLLM fp8 block-scaled: DeepGEMM/FlashInfer need k % 128 == 0) and
    # the fill of the last 128-row tile
    plain = [(k % 128 == 0).astype(float), (n % 128 == 0).astype(float), (m - 128 * np.floor((m - 1) / 128)) / 128]
    return np.column_stack([_lg(np.column_stack(raw)), *plain])


def _attention(c: Canon) -> np.ndarray:
    heads, kvh, hd = _f(c, "num_heads"), _f(c, "num_kv_heads"), _f(c, "head_dim")
    window = _f(c, "window_size")
    kvb = dtype_bytes(c["kv_dtype"])
    nd, dmean = _f(c, "num_decode"), _f(c, "decode_ctx_mean")
    eff_dmean = np.where(window > 0, np.minimum(dmean, window), dmean)
    pairs = _f(c, "prefill_pairs")
    pmean, npre = _f(c, "prefill_len_mean"), _f(c, "num_prefill")
    # sliding window caps each query's keys at `window`
    pairs = np.where(window > 0, np.minimum(pairs, npre * pmean * window), pairs)
    prefill_flops = 4 * heads * hd * pairs
    decode_kv_bytes = nd * eff_dmean * 2 * kvh * hd * kvb
    decode_flops = 4 * heads * hd * nd * eff_dmean
    tokens = _f(c, "prefill_tokens") + nd
    q_tiles = npre * np.ceil(pmean / 128) * heads + nd * kvh
    cols = [_lg(c["batch_size"]), _lg(npre), _lg(nd), _lg(c["prefill_tokens"]), _lg(tokens)]
    cols += [_lg(c[k]) for k in ("prefill_len_min", "prefill_len_max", "prefill_len_mean",
                                 "prefill_len_p50", "prefill_len_p90", "prefill_ctx_max",
                                 "decode_ctx_min", "decode_ctx_max", "decode_ctx_mean",
                                 "decode_ctx_p50", "decode_ctx_p90")]
    cols += [_lg(heads), _lg(kvh), _lg(hd), _lg(window), kvb, np.asarray(c["is_mla"], dtype=float),
             _lg(prefill_flops), _lg(decode_kv_bytes), _lg(prefill_flops + decode_flops), _lg(q_tiles)]
    # per-request work: causal (query, key) pairs of one prefill, 128-query tiles per SM wave,
    # 128-key tiles one decode streams, decode CTAs (request x KV head)
    cols += [_lg(pairs / np.maximum(npre, 1)), _lg(np.ceil(q_tiles / SMS)),
             _lg(np.ceil(eff_dmean / 128)), _lg(nd * kvh), _lg(heads / np.maximum(kvh, 1))]
    return np.column_stack(cols)


def _moe(c: Canon) -> np.ndarray:
    tok, hid, k = _f(c, "num_tokens"), _f(c, "hidden_size"), _f(c, "topk")
    inter_rank = _f(c, "inter_size") / _f(c, "moe_tp_size")
    experts, local = _f(c, "num_experts"), np.maximum(1.0, _f(c, "num_experts") / _f(c, "moe_ep_size"))
    pairs, mx = _f(c, "routed_pairs"), _f(c, "max_tokens_per_expert")
    std = np.sqrt(np.maximum(_f(c, "var_tokens_per_expert"), 0.0))
    mean_load = np.maximum(pairs / local, 1e-9)
    active = np.minimum(local, np.maximum(pairs, 1.0))
    wbytes = dtype_bytes(c["moe_dtype"])
    cols = [_lg(tok), _lg(hid), _lg(inter_rank), _lg(k), _lg(experts), _lg(local), _lg(pairs),
            _lg(mx), _lg(std), mx / mean_load, _lg(active), _lg(6 * hid * inter_rank * pairs),
            _lg(3 * hid * inter_rank * active * wbytes), _lg(6 * hid * inter_rank * mx),
            _lg(_f(c, "moe_tp_size")), _lg(_f(c, "moe_ep_size")), _lg(pairs / local)]
    # grouped-GEMM row blocks: each active expert's tokens padded to the kernel's block size
    cols += [_lg(active * np.ceil(pairs / active / b)) for b in (16, 64, 128)]
    cols.append(_lg(np.ceil(mx / 64)))
    return np.column_stack(cols)


def _comm(c: Canon) -> np.ndarray:
    nbytes, g = _f(c, "message_bytes"), _f(c, "num_gpus")
    ops = np.array([COMM_OP_CODES.get(str(o), -1) for o in c["op_name"]], dtype=float)
    links = np.array([LINK_CODES.get(str(x), -1) for x in c["link"]], dtype=float)
    bus = np.where(ops == 0, 2 * (g - 1) / g, (g - 1) / g) * nbytes   # nccl-tests bus-bytes factor
    return np.column_stack([_lg(nbytes), g, ops, links, _lg(bus)])


def _elementwise_bytes(c: Canon) -> tuple[np.ndarray, np.ndarray]:
    """(element bytes, bytes moved) of elementwise rows: passes x tokens x width x element bytes."""
    eb = dtype_bytes(c["dtype"])
    passes = np.array([ELEMENTWISE_PASSES.get(str(o), 2) for o in c["op_name"]], dtype=float)
    return eb, passes * _f(c, "num_tokens") * _f(c, "hidden_size") * eb


def _elementwise(c: Canon) -> np.ndarray:
    eb, nbytes = _elementwise_bytes(c)
    return np.column_stack([_lg(c["num_tokens"]), _lg(c["hidden_size"]), _lg(nbytes), eb])


def gdn_work(c: Canon) -> tuple[np.ndarray, ...]:
    """(FLOPs, state bytes, activation bytes, chunks of the longest sequence) of gdn rows, as
    ``GdnOp`` counts them (activations at 2 bytes): the chunked kernel reads and writes each
    sequence's state once; the recurrent one reads it once and writes it after every token (a
    plain decode: once); the conv1d kernels read and write each token's conv_dim channels and
    each sequence's d_conv - 1 state rows (``GdnOp.conv_work``; 2 x d_conv FLOPs a channel)."""
    b, tok, nk, nv = _f(c, "batch_size"), _f(c, "num_tokens"), _f(c, "num_k_heads"), _f(c, "num_v_heads")
    dk, dv, k = _f(c, "head_k_dim"), _f(c, "head_v_dim"), _f(c, "d_conv")
    op = np.asarray(c["op_name"]).astype(str)
    chunked, conv = op == "chunked", (op == "conv1d") | (op == "conv1d_update")
    conv_dim = 2 * nk * dk + nv * dv
    flops = np.where(conv, 2 * k * conv_dim * tok,
                     nv * tok * (4 * dk * dv + np.where(chunked, 2.0 * GDN_CHUNK_TOKENS * (dk + dv), 0.0)))
    state = np.where(conv, (k - 1) * conv_dim, nv * dk * dv) * dtype_bytes(c["state_dtype"])
    state_bytes = np.where(chunked | conv, 2 * b, b + tok) * state
    act_bytes = tok * np.where(conv, 2 * conv_dim, 2 * nk * dk + 2 * nv * dv + 2 * nv) * 2.0
    chunks = np.where(chunked, np.ceil(_f(c, "seq_len") / GDN_CHUNK_TOKENS), 1.0)
    return flops, state_bytes, act_bytes, chunks


def _gdn(c: Canon) -> np.ndarray:
    flops, state_bytes, act_bytes, chunks = gdn_work(c)
    b, nv = _f(c, "batch_size"), _f(c, "num_v_heads")
    return np.column_stack([_lg(b), _lg(c["seq_len"]), _lg(c["num_tokens"]), _lg(c["num_k_heads"]), _lg(nv),
                            _lg(c["head_k_dim"]), _lg(c["head_v_dim"]), dtype_bytes(c["state_dtype"]), _lg(chunks),
                            _lg(flops), _lg(state_bytes), _lg(act_bytes), _lg(b * nv), _f(c, "d_conv")])


def encoder_attention_work(c: Canon) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes) of encoder_attention rows, as ``frontier.ops.EncoderAttentionOp`` counts them:
    4 x heads x head_dim x batch x seq_len^2, and q, k, v in and the output out over the tokens."""
    b, s, h, d = _f(c, "batch_size"), _f(c, "seq_len"), _f(c, "num_heads"), _f(c, "head_dim")
    return 4 * h * d * b * s * s, 4 * _f(c, "num_tokens") * h * d * dtype_bytes(c["dtype"])


def _encoder_attention(c: Canon) -> np.ndarray:
    """The sizes and work, and the flash-attention grid: for query tiles of 128 and 192 rows (FA3's
    for these head dims), the waves of (image x head x tile) blocks over SMS multiprocessors, the
    last tile's fill, and waves x key tiles of 128 and 176 (each block's sequential loop) -
    the critical path when few blocks run (held-out p95 on the H100 rows 14.7 -> 11.4 %)."""
    flops, nbytes = encoder_attention_work(c)
    b, s, h = _f(c, "batch_size"), _f(c, "seq_len"), _f(c, "num_heads")
    cols = [_lg(b), _lg(s), _lg(c["num_tokens"]), _lg(h), _lg(c["head_dim"]), _lg(flops), _lg(nbytes),
            _lg(b * h * np.ceil(s / 128))]
    for rows in (128, 192):
        waves = np.ceil(b * h * np.ceil(s / rows) / SMS)
        cols += [_lg(waves), (s % rows) / rows, _lg(waves * np.ceil(s / 128)), _lg(waves * np.ceil(s / 176))]
    return np.column_stack(cols)


def tokens_of(canon: Canon, family: str) -> np.ndarray:
    """The token-count axis of a family (m, tokens in the batch, tokens into MoE, message bytes)."""
    if family == "attention":
        return _f(canon, "prefill_tokens") + _f(canon, "num_decode")
    return _f(canon, TOKENS[family])


def split_mixed(canon: Canon) -> tuple[Canon, Canon]:
    """(prefill-only part, decode-only part) of an attention canonical table."""
    pre, dec = dict(canon), dict(canon)
    zero = np.zeros(len(canon["batch_size"]))
    for k in ("decode_ctx_min", "decode_ctx_max", "decode_ctx_mean", "decode_ctx_p50", "decode_ctx_p90"):
        pre[k] = zero
    pre["num_decode"] = zero
    pre["batch_size"] = canon["num_prefill"]
    pre["op_name"] = np.full(len(zero), "context", dtype=object)
    for k in ("prefill_len_min", "prefill_len_max", "prefill_len_mean", "prefill_len_p50",
              "prefill_len_p90", "prefill_ctx_max", "prefill_pairs", "prefill_tokens", "num_prefill"):
        dec[k] = zero
    dec["batch_size"] = canon["num_decode"]
    dec["op_name"] = np.full(len(zero), "generation", dtype=object)
    return pre, dec


# Nominal H100-class rates: only the *shape* of the reference matters (a per-GPU constant
# factor is absorbed by the fitted ratio), so one set serves every GPU.
_REF_FLOPS, _REF_BW, _REF_LINK_BW, _REF_FIXED_S = 989e12, 3.35e12, 150e9, 2e-6


def reference_s(canon: Canon, family: str) -> np.ndarray:
    """Smooth roofline-style reference time (s): FLOPs / rate + bytes / bandwidth + fixed.

    Predictors that fit log(latency / reference) ("ratio" target) learn only the
    efficiency surface, which is flatter along the token axis than the latency itself.
    """
    if family == "linear":
        m, n, k = _f(canon, "m"), _f(canon, "n"), _f(canon, "k")
        wbytes = dtype_bytes(canon["dtype"])
        return 2 * m * n * k / _REF_FLOPS + (n * k * wbytes + 2 * (m * k + m * n)) / _REF_BW + _REF_FIXED_S
    if family == "attention":
        heads, kvh, hd = _f(canon, "num_heads"), _f(canon, "num_kv_heads"), _f(canon, "head_dim")
        window = _f(canon, "window_size")
        kvb = dtype_bytes(canon["kv_dtype"])
        nd, dmean = _f(canon, "num_decode"), _f(canon, "decode_ctx_mean")
        dmean = np.where(window > 0, np.minimum(dmean, window), dmean)
        npre, pmean = _f(canon, "num_prefill"), _f(canon, "prefill_len_mean")
        pairs = _f(canon, "prefill_pairs")
        pairs = np.where(window > 0, np.minimum(pairs, npre * pmean * window), pairs)
        flops = 4 * heads * hd * (pairs + nd * dmean)
        kv_bytes = (nd * dmean + _f(canon, "prefill_tokens") * 2) * 2 * kvh * hd * kvb
        qo_bytes = (_f(canon, "prefill_tokens") + nd) * heads * hd * 4
        return flops / _REF_FLOPS + (kv_bytes + qo_bytes) / _REF_BW + _REF_FIXED_S
    if family == "moe":
        hid, pairs = _f(canon, "hidden_size"), _f(canon, "routed_pairs")
        inter = _f(canon, "inter_size") / _f(canon, "moe_tp_size")
        local = np.maximum(1.0, _f(canon, "num_experts") / _f(canon, "moe_ep_size"))
        active = np.minimum(local, np.maximum(pairs, 1.0))
        wbytes = dtype_bytes(canon["moe_dtype"])
        return (6 * hid * inter * pairs / _REF_FLOPS
                + (3 * hid * inter * active * wbytes + pairs * (2 * hid + 3 * inter) * 2) / _REF_BW + _REF_FIXED_S)
    if family == "elementwise":
        return _elementwise_bytes(canon)[1] / _REF_BW + _REF_FIXED_S
    if family == "gdn":
        flops, state_bytes, act_bytes, chunks = gdn_work(canon)
        return flops / _REF_FLOPS + (state_bytes + act_bytes) / _REF_BW + chunks * _REF_FIXED_S
    if family == "encoder_attention":
        flops, nbytes = encoder_attention_work(canon)
        return flops / _REF_FLOPS + nbytes / _REF_BW + _REF_FIXED_S
    nbytes, g = _f(canon, "message_bytes"), _f(canon, "num_gpus")
    ops = np.array([str(o) for o in canon["op_name"]])
    bus = np.where(ops == "all_reduce", 2 * (g - 1) / g, (g - 1) / g) * nbytes
    return bus / _REF_LINK_BW + 3 * _REF_FIXED_S
