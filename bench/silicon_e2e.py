"""End-to-end check against measured vLLM deployments (AIConfigurator's silicon_sample.csv).

Selects the rows of ``silicon_sample.csv`` with backend == vllm, mode in ``--modes`` (agg and
disagg: ``MODES``) and system in ``SYSTEM_TO_GPU`` (h100_sxm, h200_sxm, b200_sxm, b300_sxm, gb200:
every system with vLLM rows whose GPU the catalogue has; ``--systems`` picks some), maps each row
to a Frontier deployment + workload, simulates it and reports the absolute percentage error (APE)
of mean TTFT and mean TPOT per row, and the MAPE over the simulated rows (in all, per harness, per
system, per version, per mode, per model) next to AIConfigurator 0.12's own MAPE on the same rows
where it has one (``derived/aic0.12_estimate_vs_silicon_vllm_h100_h200_agg.csv``: H100 and H200
agg rows only). The issue's aim (10 %) is stated for the H100 / H200 aggregated rows; the
Blackwell rows and the 17 disaggregated ones (GB200 14, H100 3: ``map_disagg_row``, simulated
with ``--architecture pdd``) were added after.

Row -> deployment (see ``map_row``; bench/README.md has the full rationale):

* model: ``model_path`` + ``precision`` (+ system) -> how it was served (``MODEL_VARIANTS``: a
  catalogue model and the ``--quantization`` / ``--kv-cache-dtype`` flags). When the row's
  precision differs from the checkpoint named by ``model_path``, the row maps to the checkpoint
  that was served: ``meta-llama/Llama-3.1-70B`` fp8 (all InferenceMAX rows) ->
  ``nvidia/Llama-3.3-70B-Instruct-FP8``, the modelopt FP8 checkpoint InferenceMAX serves (same
  architecture, FP8 weights). Its KV cache differs by GPU, as the queueing onsets show (KV
  capacity brackets; bench/README.md): on one H200, 1k/8k at concurrency 32 measures no
  queueing, which a bf16 KV cache of 193k tokens could not hold, while concurrency 64 queues ->
  FP8 KV (the checkpoint's scheme, ``auto``); on two H100s, 8k/1k at concurrency 32 queues
  (6.5 s TTFT against 1.3 s at 16), which an FP8 KV cache of 473k tokens would hold without a
  wait while a bf16 one of 236k cannot -> ``--kv-cache-dtype bfloat16`` (what vLLM <= 0.11 does
  with that checkpoint unless told ``--kv-cache-dtype fp8``). ``Qwen/Qwen3-32B`` fp8
  (3 rows) -> ``--quantization fp8`` (online per-tensor FP8 weights, dynamic activation scales,
  KV cache bf16). A row with no precision runs the checkpoint as stored. Then the model's
  ``QuantSpec.method`` must belong to the row's precision family (fp8 -> fp8/fp8_block,
  fp4 -> mxfp4/nvfp4, int4 -> int4_wo), else the row is skipped. AIC's ``*_quant_mode`` labels
  name its own kernel tables (gpt-oss is labelled nvfp4 though the checkpoint is MXFP4; the
  Qwen3-235B FP8 checkpoint is 128x128 block-scaled, labelled fp8), so only the family is checked.
  fp4 rows of MiniMax-M2.5, Kimi-K2.5 and Llama-3.1-70B (B200 / B300) -> NVIDIA's modelopt NVFP4
  checkpoints ``nvidia/MiniMax-M2.5-NVFP4``, ``nvidia/Kimi-K2.5-NVFP4`` (aiconfigurator-core's
  configs) and ``nvidia/Llama-3.3-70B-Instruct-FP4`` (catalogue config written from knowledge of
  the hub repo, as the FP8 one); gpt-oss-120b fp4 runs its MXFP4 checkpoint. Llama-3.1-70B fp8 on
  B200 -> the FP8 checkpoint with its FP8 KV cache (``auto``), as on the H200 (no queueing
  evidence either way on 180 GB). MiniMax-M2.5 fp8 on B200 / B300 -> ``--kv-cache-dtype fp8``:
  with the checkpoint's bf16 KV cache 17 of its 250 rows queue in the simulation where the
  measured runs do not (B300 tp2 8k/1k c256: 40.4 s simulated, 2.2 s measured; B200 tp2 1k/1k
  c512: 17.1 s, 1.3 s); with an FP8 one they fall in line with the rest (2.1 s, 0.55 s)
  (bench/README.md, Blackwell rows).
* GPU: h100_sxm -> "H100", h200_sxm -> "H200", b200_sxm -> "B200", b300_sxm -> "B300".
* Parallelism: ``tensor_parallel_size = tp_size``, ``pipeline_parallel_size = pp_size``,
  ``data_parallel_size = attention_dp_size`` (empty -> 1). MoE: vLLM builds exactly two layouts
  over the tp*dp GPUs: experts tensor-parallel (``moe_tp = tp*dp, moe_ep = 1``, no flag) or
  expert-parallel (``moe_tp = 1, moe_ep = tp*dp``, ``--enable-expert-parallel``). Any other
  (moe_tp, moe_ep) is skipped: a mixed moe_tp x moe_ep grid is not a vLLM layout, and a row with
  moe_tp * moe_ep != tp * dp is inconsistent (AIC rejects those rows too). Dense models ignore
  the moe_* columns (the data carries 1/1, 0/0 or tp/1 there). A row whose experts-TP layout
  vLLM cannot start runs expert-parallel (``ep_inferred``): block-quantized experts must split
  into whole 128x128 blocks (``validate_fp8_block_shape_moe``), which MiniMax-M2.5's 1536-wide
  experts over 8 ranks (192) do not, so its tp8 rows (stated moe_tp 8, moe_ep 1) were served
  with ``--enable-expert-parallel``, the only other layout vLLM builds over those GPUs.
* InferenceMAX's attention-DP rows (``attention_dp_size`` > 1: MiniMax-M2.5 on H100 / B200 / B300,
  Kimi-K2.5 on B200; tp 4 x adp 4 and tp 2 x adp 2) run on ``tp_size`` GPUs, not tp x adp: their own
  InferenceMAX labels say so (``..._tp4_ep4_1323``: EP 4, where the CSV's moe_ep says 16), and
  InferenceMAX's agg runs are single-node (16 GPUs would be two 8-GPU nodes). On the H100 and the
  B200 (``IMAX_DP_AS_TP_EP``) they run as the plain expert-parallel deployment,
  ``--tensor-parallel-size tp_size --enable-expert-parallel`` at ``max_concurrency = batch_size *
  adp`` (``dp_label_only``), because they are measurements of it: the data holds that deployment's
  own non-DP rows at the same precision, lengths and concurrency for 40 distinct DP measurements
  (H100 MiniMax-M2.5 tp 4: 15; B200 MiniMax-M2.5 fp8 tp 2 and tp 4: 10; B200 Kimi-K2.5 tp 4: 15;
  the B200's others, NVFP4 and the highest concurrencies, have no twin and run as their GPU's
  twinned rows do), and 28 of the 40 agree to TPOT 1.5 % and TTFT 13 %, the data's run-to-run
  noise (the other 12: ten of Kimi's, TPOT 1.3-10.5 % apart either way, and the H100's 8k / 1k c4
  and c16, off both ways). Attention DP would not give that: on the H100, each DP rank of TP 1
  holds every KV head and the attention weights, 25 % fewer KV tokens in all (4 x 45,296 against
  242,512, ``frontier memory``), yet the KV-bound points queue alike (1k / 8k c64 20.07 s with the
  DP label, 20.03 s without; 8k / 1k c64 32.5 / 30.6 s; c32 3.01 / 2.90 s); on the B200,
  Kimi-K2.5's DP rows match the TP rows' TPOT at c4-c8 (8.4 / 10.5 ms) where attention DP
  simulates 19-24 % slower (replicated attention weights).
  (``test_attention_dp_rows_are_measurements_of_the_tp_ep_deployment`` recomputes the pairs.)
  The B300 rows have no such twins and one of them needs more than one engine's default 1,024
  sequences in flight (NVFP4 tp 2 x adp 2, 1k / 1k c2048: 3.7 s TTFT measured; as one engine,
  32 s simulated), so they keep the DP label: ``--tensor-parallel-size tp/adp
  --data-parallel-size adp --enable-expert-parallel`` (``dp_in_tp``), as every DP row did from the
  seventh stop to 2026-12-01 (before that on tp x adp GPUs).
* Workload (``vllm bench serve`` random dataset): ``random_input_len = isl``,
  ``random_output_len = osl``, range ratio 0 (fixed lengths, as the rows state), request rate inf,
  ``max_concurrency = batch_size * attention_dp_size``: the README defines batch_size as
  concurrency per worker, and the ``silicon_concurrency=`` in ``silicon_data_source`` equals
  batch_size * attention_dp_size on every attention-DP row (MiniMax tp4/adp4: batch 16 <-> c64).
* ``num_prompts``: the source column gives only the concurrency, not the prompt count. Assumed
  benchmark: ``N = max(PROMPTS_PER_SLOT * concurrency, MIN_PROMPTS)`` (10 x concurrency, the usual
  ``vllm bench serve`` sweep convention; an assumption). Simulated: N capped so that
  ``num_prompts * osl <= MAX_OUTPUT_TOKENS``, but never below ``2 * concurrency`` (a wave after
  the cold start) unless that exceeds ``FLOOR_OUTPUT_TOKENS`` output tokens, and never below one
  wave. Frontier costs ~8 us of CPU per output token: rows take < ~20 s except the three
  512-concurrency x 8192-osl rows (one wave, 35-55 s). The primary ("bench") estimate re-weights
  the simulated first wave and later waves to N prompts (``score``); "raw" and "steady" (first
  wave dropped) are reported too. The aic rows (below) use aiperf's N = 20 x concurrency.
* Lengths per harness (``--lengths harness``, the default). The rows come from two harnesses,
  told apart by ``silicon_data_source``. InferenceMAX rows (``workflow_run_id=`` of its GitHub
  workflow, or its dated result files ``source_file=2026-04-06.csv; model=...``: gpt-oss-120b,
  Llama-3.1-70B, MiniMax-M2.5, Kimi-K2.5 on InferenceMAX's 1k/1k, 1k/8k and 8k/1k grid) run its fork of vLLM's old
  ``benchmark_serving.py`` with ``--random-range-ratio 0.8``, whose semantics are those of that
  script's ``sample_random_requests``: lengths uniform integers in [int(0.8 L), L] (mean 0.9 L),
  input and output; simulated as a trace with those lengths (``imax_lengths``). This setting is
  taken from InferenceMAX's public harness as we know it, not from this data, which does not
  state it. Rows named otherwise whose deployment and measured means equal an InferenceMAX row's
  are that measurement copied (``imax_copies``: the 15 rows of ``kimi-k2.5-gap-analysis.csv`` are
  the 2026-04-06 InferenceMAX Kimi-K2.5 rows rounded to 0.01 ms) and run as InferenceMAX rows.
  The other rows ("aic": AIC's own gap-analysis runs of vLLM 0.12.0, Qwen3-32B, Qwen3-235B and
  Llama-3.1-8B, e.g. ``source_file=.../aic-auto-gap-analysis/data/h100_sxm/vllm/0.12.0/
  Qwen_Qwen3-32B.csv``) name no harness; they keep the fixed lengths the rows state.
  ``--lengths fixed`` runs every row at fixed lengths (the former default).
* Launch flags and request count of the aic rows (``--aic-runs benchmark``, the default). The data
  README calls the silicon rows measured deployments (Dynamo plus the framework) that NVIDIA uses
  to calibrate and track AIC; AIConfigurator 0.12.0's own generator has a "benchmark" rule set
  for exactly that (``generator/rule_plugin/benchmark/vllm.rule``, agg): ``--max-num-seqs
  batch_size``, ``--max-num-batched-tokens batch_size + isl + 1500``, ``--max-model-len isl + osl +
  1500``, ``--cudagraph-capture-sizes 1 .. batch_size``, and its benchmark script
  (``generator/config/backend_templates/benchmark/bench_run.sh.j2``) runs aiperf with fixed
  lengths (``--isl-stddev 0``), ``ignore_eos``, ``--concurrency c``, ``--num-requests 20 c``
  after ``2 c`` warm-up requests. These rows are simulated so (AIC_* constants); it is an
  assumption about runs the data does not describe. The measured TTFTs agree with it: vLLM's
  default 8192-token budget admits a whole wave of c x isl <= 8192 tokens in one step, and the
  simulated batch stays locked in such waves (Qwen3-32B tp2 c8 1024/1024: 436 ms simulated, 154
  ms measured); with the rule's 2,532-token budget the wave splits into steps and the requests
  stay staggered (208 ms). Each request carries a prompt of its own: aiperf's default pool of 100
  prompts re-sent with vLLM's prefix caching on would fit the Llama-3.1-8B file's TPOT and
  contradict the Qwen3-32B file's (bench/README.md, 2026-12-01 12:30), so it is not modelled.
  ``--aic-runs vllm-defaults`` runs them with vLLM's default flags and 10 x concurrency prompts
  (the former run).
* MoE routing (``--moe-routing``, default ``power_law:1.01``, not the simulator's ``balanced``):
  AIConfigurator's own assumption about real routing (its estimator prices MoE layers from its
  ``power_law_1.01`` rows: ``workload_distribution = "power_law"``, alpha 1.01), drawn with the
  sampler calibration featurizes those rows with (``frontier.power_law_routing``). Routing
  matters twice: a decode step touches fewer experts than balanced's min(E, T k) (the weights
  read follow), and a prefill's experts are unevenly loaded (AIC's H200 gpt-oss table at 1,024
  tokens, tp1: 0.84 ms balanced, 1.34 ms power_law_1.01). Until 2026-11-30 (seventh stop) the
  default was ``random`` (each token's top-k experts uniformly at random), chosen on the
  measured TPOT: with ``balanced`` the simulated / measured TPOT of gpt-oss-120b (InferenceMAX
  rows, mean per concurrency) is 0.94 / 0.97 / 1.09 / 1.24 / 0.99 at 4 / 8 / 16 / 32 / 64, a bump
  where balanced routing first touches every expert (32 x 4 = 128) and random routing about 82
  of them; with ``random`` 0.95 / 0.96 / 1.02 / 1.00 / 0.87. bench/README.md has both runs.
* ``--range-ratio`` (default 0) applies to the fixed-length rows: with identical lengths the
  simulated batch stays phase-locked (a wave of requests finishes in one step and the next wave's
  prefills queue behind each other in one or a few steps); a small spread (0.1) dissolves the
  lock. ``--step-jitter`` does not (every request of a batch shares the step's time).

Usage::

    .venv/bin/python bench/silicon_e2e.py --jobs 2 [--limit N] [--models SUBSTR,...]
        [--systems h100_sxm,h200_sxm,b200_sxm,b300_sxm,gb200] [--modes agg,disagg] [--step-jitter 0.05]
        [--both-jitter] [--range-ratio R]
        [--progress] [--json] [--out FILE] [--plan-only] [--rescore FILE]

Cost model: ``--predictor-bundle none`` (default, the roofline model), ``auto`` (the cached
calibrated bundle of each row's GPU, fitted on first use: ``calibration.auto_bundle``) or a bundle
path (used for every row; rows of another GPU then fail with the simulator's mismatch error).
``--comm-model calibrated|analytical`` passes through to ``SimulationSpec.comm_model``; the
default here is ``calibrated`` (all-reduces priced from AIC's measured vLLM custom all-reduce
and NCCL tables of the row's GPU, ``simulator/comm/calibrated.py``): the analytical ring
model's 80 %-of-NVLink bus bandwidth is about twice what vLLM's custom all-reduce reaches on
the 1-32 MB messages of TP prefill (H200 TP8, 32 MB: 323 us measured).

Engine loop: each row runs its release's scheduling (``--vllm-version``: synchronous before
0.14, as vLLM defaulted then: the 0.11.2 and 0.12.0 rows), with the engine core's CPU time per
step priced (``--engine-cpu-overhead``, on by default here: ``simulator/engine_cpu.py``, in
series with the forwards when synchronous, overlapped otherwise) and ``--frontend-latency-ms``
(default ``FRONTEND_LATENCY_MS``) between a send and the engines, so that a request sent when
another finishes does not join the step that starts at that very instant.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

DATA_ROOT = Path(os.environ.get("FRONTIER_AIC_DATA", "/work/shared/datasets/aiconfigurator"))
SILICON_CSV = DATA_ROOT / "systems" / "silicon_sample.csv"
AIC_CSV = DATA_ROOT / "derived" / "aic0.12_estimate_vs_silicon_vllm_h100_h200_agg.csv"

SYSTEM_TO_GPU = {"h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200", "b300_sxm": "B300", "gb200": "GB200"}
# the systems the aim (TTFT and TPOT MAPE under 10 %) is stated for, aggregated rows: the
# totals name their rows apart
AIM_SYSTEMS = ("h100_sxm", "h200_sxm")
# serving modes of the CSV that run: "agg" (co-located) and "disagg" (prefill / decode workers,
# simulated with --architecture pdd)
MODES = ("agg", "disagg")


@dataclass(frozen=True)
class Served:
    """How a row's model was served: the checkpoint and the vllm serve flags that change it."""

    model: str                          # catalogue name given to EngineArgs.model
    quantization: str | None = None     # --quantization (online quantization of a bf16 checkpoint)
    kv_cache_dtype: str = "auto"        # --kv-cache-dtype


# (model_path, precision, system) -> Served; system "" = any. precision "" = not stated in the
# row. Rows not listed serve model_path as stored. Evidence for each: the module docstring.
MODEL_VARIANTS = {
    ("meta-llama/Llama-3.1-70B", "fp8", "h200_sxm"): Served("nvidia/Llama-3.3-70B-Instruct-FP8"),
    ("meta-llama/Llama-3.1-70B", "fp8", "h100_sxm"): Served("nvidia/Llama-3.3-70B-Instruct-FP8",
                                                            kv_cache_dtype="bfloat16"),
    ("Qwen/Qwen3-32B", "fp8", ""): Served("Qwen/Qwen3-32B", quantization="fp8"),
    ("meta-llama/Llama-3.1-70B", "fp8", "b200_sxm"): Served("nvidia/Llama-3.3-70B-Instruct-FP8"),
    ("meta-llama/Llama-3.1-70B", "fp4", ""): Served("nvidia/Llama-3.3-70B-Instruct-FP4"),
    ("MiniMaxAI/MiniMax-M2.5", "fp4", ""): Served("nvidia/MiniMax-M2.5-NVFP4"),
    ("MiniMaxAI/MiniMax-M2.5", "fp8", "b200_sxm"): Served("MiniMaxAI/MiniMax-M2.5", kv_cache_dtype="fp8"),
    ("MiniMaxAI/MiniMax-M2.5", "fp8", "b300_sxm"): Served("MiniMaxAI/MiniMax-M2.5", kv_cache_dtype="fp8"),
    ("moonshotai/Kimi-K2.5", "fp4", ""): Served("nvidia/Kimi-K2.5-NVFP4"),
}
PRECISION_FAMILY = {
    "fp8": ("fp8", "fp8_block"),
    "fp4": ("mxfp4", "nvfp4"),
    "int4": ("int4_wo",),
    "bf16": ("none",),
    "fp16": ("none",),
}

# silicon_data_source of InferenceMAX's runs: its database dump (GitHub workflow ids), or its
# dated result files ("source_file=2026-04-06.csv; model=GPT-OSS-120B; ...; wip=False").
INFERENCEMAX_SOURCE = re.compile(r"workflow_run_id=|^source_file=\d{4}-\d{2}-\d{2}\.csv; model=")
IMAX_RANGE_RATIO = 0.8   # InferenceMAX's --random-range-ratio: lengths in [int(0.8 L), L]
LENGTH_POLICIES = ("harness", "fixed")
# InferenceMAX's 2025 runs served at most ~100 requests at once whatever the concurrency: on its
# nine concurrency-512 rows (gpt-oss-120b H100, measured 2025-12) Little's law on the measured
# means (512 in the system, each for TTFT + 0.9 OSL x TPOT, of which 0.9 OSL x TPOT in service)
# gives 88-98 in service on every row, while its 2026 concurrency-128 rows (MiniMax) give
# 124-128. aiohttp's default connection pool (100 connections) in that client is the likely
# cause; a FIFO wait for a connection counts in TTFT exactly as a server-side queue does, so the
# cap is simulated as max_num_seqs.
IMAX_2025_IN_SERVICE_CAP = 100
# Systems whose InferenceMAX attention-DP rows are measurements of the plain TP x EP deployment on
# tp_size GPUs (the module doc: they reproduce that deployment's own rows; B300 has none to compare)
IMAX_DP_AS_TP_EP = frozenset({"h100_sxm", "b200_sxm"})
# AIC's own gap-analysis runs (harness "aic"; assumed, see the module doc): launched as
# AIConfigurator 0.12.0's generator launches vLLM for a benchmark (generator/rule_plugin/benchmark/
# vllm.rule, agg): --max-num-seqs batch_size, --max-num-batched-tokens batch_size + isl + 1500,
# --max-model-len isl + osl + 1500, --cudagraph-capture-sizes 1..batch_size; measured by its
# bench_run.sh.j2: aiperf, fixed isl / osl (stddev 0), ignore_eos, --concurrency c,
# --num-requests 20 c after 2 c warm-up requests.
AIC_EXTRA_TOKENS = 1500
AIC_REQUESTS_PER_SLOT = 20
AIC_RUN_POLICIES = ("benchmark", "vllm-defaults")
# MoE routing of the real deployments: AIConfigurator's default assumption, power law 1.01 (module doc)
MOE_ROUTING = "power_law:1.01"
# Send -> engines, ms: the simulator's default (simulator.simulation.FRONTEND_LATENCY_S), pinned
# here so that the bench's published figures do not move if that default does; the Qwen3-32B
# rows (vLLM 0.12, sync) give TTFT / TPOT MAPE 26.0 / 8.5, 25.9 / 8.5 and 25.8 / 8.5 % at 0.5, 2
# and 5 ms (bench/README.md)
FRONTEND_LATENCY_MS = 1.0

PROMPTS_PER_SLOT = 10
MIN_PROMPTS = 100
MAX_OUTPUT_TOKENS = 150_000      # num_prompts * osl cap for the 10 x concurrency target
FLOOR_OUTPUT_TOKENS = 2_000_000  # the 2 x concurrency floor applies up to this many output tokens
DEFAULT_SEED = 0


@dataclass(frozen=True)
class RolePlan:
    """One role of a disaggregated row: its engines and the vllm serve batch limits known for them
    (None: vLLM's defaults)."""

    tp: int
    dp: int
    replicas: int                      # the row's {prefill,decode}_num_workers
    batch_size: int                    # the row's {prefill,decode}_batch_size (per worker)
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None


@dataclass(frozen=True)
class Deployment:
    """One silicon row as a Frontier run."""

    row_id: str
    model_path: str
    model: str              # catalogue name given to EngineArgs.model
    system: str
    gpu: str
    tp: int
    pp: int
    dp: int
    enable_expert_parallel: bool
    isl: int
    osl: int
    batch_size: int          # per worker, as in the CSV (x adp where dp_label_only)
    concurrency: int         # client max_concurrency = batch_size * dp
    num_prompts: int
    quant_method: str
    ttft_meas_ms: float
    tpot_meas_ms: float
    harness: str = "aic"      # "inferencemax" (lengths in [int(0.8 L), L]) or "aic" (fixed; AIC's own runs)
    in_service_cap: int | None = None  # requests served at once where the run capped them
                                       # (IMAX_2025_IN_SERVICE_CAP), simulated as max_num_seqs
    bench_prompts: int | None = None   # the measured benchmark's request count (None: target_prompts)
    max_num_seqs: int | None = None    # vllm serve flags of the run where known (aic rows: AIC's
    max_num_batched_tokens: int | None = None   # benchmark launch); None: vLLM's defaults
    max_model_len: int | None = None
    cudagraph_capture_sizes: tuple[int, ...] | None = None
    quantization: str | None = None    # --quantization of the served model (Served)
    kv_cache_dtype: str = "auto"       # --kv-cache-dtype of the served model (Served)
    ep_inferred: bool = False          # the row says moe_tp = tp*dp, which vLLM refuses for this checkpoint
                                       # (block-quantized experts split mid-block): run as EP
    dp_in_tp: bool = False             # InferenceMAX attention-DP row: its dp ranks split the row's tp_size
                                       # GPUs (tp = tp_size / adp per rank), experts EP over them
    dp_label_only: bool = False        # InferenceMAX attention-DP row of IMAX_DP_AS_TP_EP, run as the TP x EP
                                       # deployment on tp_size GPUs it measured: batch_size = the CSV's x adp
    vllm_version: str = ""             # the CSV's backend_version: the vLLM the run used ("" = not stated)
    mode: str = "agg"                  # "agg" or "disagg" (MODES); disagg rows: tp / dp / batch_size are
    prefill: RolePlan | None = None    # the decode role's, and both roles here
    decode: RolePlan | None = None


@dataclass(frozen=True)
class Skip:
    row_id: str
    model_path: str
    system: str
    reason: str              # grouping key (short)
    detail: str              # the specific numbers


def _num(value: str) -> float | None:
    value = (value or "").strip()
    if value == "":
        return None
    v = float(value)
    return None if math.isnan(v) else v


def _int(value: str, default: int | None = None) -> int | None:
    v = _num(value)
    if v is None:
        return default
    if v != int(v):
        raise ValueError(f"non-integer {value!r}")
    return int(v)


def load_rows(path: Path = SILICON_CSV, systems: tuple[str, ...] = tuple(SYSTEM_TO_GPU),
              modes: tuple[str, ...] = ("agg",)) -> list[dict[str, str]]:
    """The vllm rows of ``systems`` in ``modes`` (MODES), in file order."""
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f)
                if r["backend"] == "vllm" and r["mode"] in modes and r["system"] in systems]


def harness_of(row: dict[str, str]) -> str:
    """Which benchmark harness measured the row: "inferencemax" (its source names InferenceMAX's
    workflow or result files) or "aic" (every other row: AIC's own runs, assumed). ``imax_copies``
    finds the "aic" rows that are InferenceMAX measurements copied."""
    source = row.get("silicon_data_source") or ""
    return "inferencemax" if INFERENCEMAX_SOURCE.search(source) else "aic"


def _measurement_key(row: dict[str, str]) -> tuple | None:
    """(model, system, isl, osl, batch size, tp, TTFT and TPOT to 0.01 ms), or None (a non-number)."""
    try:
        nums = [_num(row[c]) for c in ("isl", "osl", "batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms")]
    except ValueError:
        return None
    if None in nums:
        return None
    return (row["model_path"], row["system"], *nums[:4], round(nums[4], 2), round(nums[5], 2))


def imax_copies(rows: list[dict[str, str]]) -> set[str]:
    """Ids of the rows not named InferenceMAX's whose deployment and measured TTFT / TPOT (to
    0.01 ms) equal an InferenceMAX row's: the same measurement copied into another file (the 15
    rows of ``kimi-k2.5-gap-analysis.csv`` are the 2026-04-06 InferenceMAX Kimi-K2.5 rows rounded
    to two decimals). They are simulated as InferenceMAX runs."""
    imax = {_measurement_key(r) for r in rows if harness_of(r) == "inferencemax"} - {None}
    return {r["id"] for r in rows if harness_of(r) != "inferencemax" and _measurement_key(r) in imax}


# the columns that name one deployment of the CSV (``deployment_key``, what ``repeat_runs`` groups runs by)
DEPLOYMENT_COLUMNS = ("system", "model_path", "precision", "tp_size", "pp_size", "attention_dp_size",
                      "moe_tp_size", "moe_ep_size", "isl", "osl", "batch_size")
# a disaggregated row's columns per role: {prefill,decode}_<column>
ROLE_COLUMNS = ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")


def _source_concurrency(row: dict[str, str]) -> int | None:
    """The client concurrency ``silicon_data_source`` states (``silicon_concurrency=N``), or None."""
    found = re.search(r"silicon_concurrency=(\d+)", row.get("silicon_data_source") or "")
    return int(found.group(1)) if found else None


def _dp_label_only(system: str, harness: str, adp: float | None) -> bool:
    """Whether an attention-DP row (``adp`` > 1) measured the plain TP x EP deployment on tp_size
    GPUs: an InferenceMAX row of IMAX_DP_AS_TP_EP (``map_row`` runs it so, ``deployment_key`` groups it so)."""
    return harness == "inferencemax" and adp is not None and adp > 1 and system in IMAX_DP_AS_TP_EP


def deployment_key(row: dict[str, str]) -> tuple:
    """The deployment a row measured, what ``repeat_runs`` groups runs by: its DEPLOYMENT_COLUMNS,
    the numeric ones as numbers (None when empty), and an InferenceMAX attention-DP row of
    ``IMAX_DP_AS_TP_EP`` as the TP x EP deployment it measured (attention DP 1, MoE TP 1, MoE EP
    tp_size, batch_size x adp; the module doc), so that it and its twins count as runs of one
    deployment. ValueError for a non-number."""
    if row.get("mode") == "disagg":
        return ("disagg", row["system"], row["model_path"], row["precision"], _num(row["isl"]), _num(row["osl"]),
                _source_concurrency(row)) + tuple(_num(row[f"{role}_{c}"]) for role in ("prefill", "decode")
                                                  for c in ROLE_COLUMNS)
    system, model, precision, *numbers = (row[c] for c in DEPLOYMENT_COLUMNS)
    tp, pp, adp, moe_tp, moe_ep, isl, osl, bs = (_num(v) for v in numbers)
    if _dp_label_only(system, harness_of(row), adp):
        adp, moe_tp, moe_ep, bs = 1.0, 1.0, tp, None if bs is None else bs * adp
    return system, model, precision, tp, pp, adp, moe_tp, moe_ep, isl, osl, bs


def repeat_runs(rows: list[dict[str, str]]) -> dict[str, tuple[float, float]]:
    """The data's own repeatability, per row id: for a deployment measured more than once (the
    same ``deployment_key``, distinct TTFT / TPOT to 0.01 ms: a copied measurement counts once,
    as its first row), each run's absolute percentage error of TTFT and TPOT when the mean of the
    deployment's other runs stands for it (``_ape(mean of the others, this run)``). A simulator
    that predicted every deployment's mean run exactly would miss these rows by about this much.
    Rows whose measured TTFT or TPOT is missing or zero are left out."""
    groups: dict[tuple, dict[tuple, tuple[str, float, float]]] = {}
    for r in rows:
        try:
            ttft, tpot = _num(r["silicon_ttft_ms"]), _num(r["silicon_tpot_ms"])
        except ValueError:
            continue
        if not ttft or not tpot:
            continue
        try:
            key = deployment_key(r)
        except ValueError:
            continue
        runs = groups.setdefault(key, {})
        runs.setdefault((round(ttft, 2), round(tpot, 2)), (r["id"], ttft, tpot))
    out: dict[str, tuple[float, float]] = {}
    for runs in groups.values():
        found = list(runs.values())
        if len(found) < 2:
            continue
        for i, (row_id, ttft, tpot) in enumerate(found):
            others = found[:i] + found[i + 1:]
            out[row_id] = (_ape(sum(o[1] for o in others) / len(others), ttft),
                           _ape(sum(o[2] for o in others) / len(others), tpot))
    return out


def imax_lengths(isl: int, osl: int, num_prompts: int, seed: int) -> tuple[list[int], list[int]]:
    """(input, output) lengths as InferenceMAX's benchmark_serving draws them with range ratio 0.8.

    That script's ``sample_random_requests`` (vLLM's pre-0.8 semantics, not 0.33's [L(1-r), L(1+r)]):
    ``np.random.randint(int(L * r), L + 1)`` for every input, then every output, after seeding
    numpy's global generator with ``--seed`` (default 0).
    """
    import numpy as np
    rng = np.random.RandomState(seed)
    ins = rng.randint(int(isl * IMAX_RANGE_RATIO), isl + 1, size=num_prompts)
    outs = rng.randint(int(osl * IMAX_RANGE_RATIO), osl + 1, size=num_prompts)
    return [int(x) for x in ins], [max(int(x), 1) for x in outs]


def num_prompts_for(concurrency: int, osl: int, target: int | None = None) -> int:
    """Prompts to simulate: ``target`` (default ``target_prompts``) capped by the output-token
    budget, with the floors of the module doc."""
    n = target_prompts(concurrency) if target is None else target
    n = min(n, max(MAX_OUTPUT_TOKENS // osl, 1))
    floor = min(2 * concurrency, max(concurrency, FLOOR_OUTPUT_TOKENS // osl))
    return max(n, floor)


_SPEC_CACHE: dict[str, Any] = {}


def _model_spec(name: str) -> Any:
    from frontier.model_spec import load_model_spec
    if name not in _SPEC_CACHE:
        try:
            _SPEC_CACHE[name] = load_model_spec(name)
        except ValueError as exc:
            _SPEC_CACHE[name] = exc
    return _SPEC_CACHE[name]


def _block_split_refused(spec: Any, tp: int, pp: int, dp: int) -> bool:
    """Whether vLLM refuses the experts-tensor-parallel layout because a rank's share of a
    block-quantized expert would not hold whole blocks (``ParallelSpec.block_split_error``), while
    the expert-parallel layout of the same GPUs splits none."""
    from frontier.parallel import ParallelSpec
    return (ParallelSpec.from_vllm(tp=tp, pp=pp, dp=dp).block_split_error(spec) is not None
            and ParallelSpec.from_vllm(tp=tp, pp=pp, dp=dp, enable_expert_parallel=True).block_split_error(spec) is None)


def served_as(model_path: str, precision: str, system: str) -> Served:
    """The MODEL_VARIANTS entry of a row (its system's, else any system's), else model_path as stored."""
    return (MODEL_VARIANTS.get((model_path, precision, system)) or MODEL_VARIANTS.get((model_path, precision, ""))
            or Served(model_path))


def map_row(row: dict[str, str], aic_runs: str = "benchmark", harness: str | None = None) -> Deployment | Skip:
    """Row of silicon_sample.csv -> Deployment, or Skip with the reason. ``aic_runs``: how the
    "aic" rows were launched and measured (AIC_RUN_POLICIES; the module doc). ``harness``: the
    row's harness when known otherwise (``imax_copies``), else ``harness_of(row)``."""
    if aic_runs not in AIC_RUN_POLICIES:
        raise ValueError(f"aic_runs={aic_runs!r}; valid: {', '.join(AIC_RUN_POLICIES)}")
    rid, model_path, system = row["id"], row["model_path"], row["system"]

    def skip(reason: str, detail: str) -> Skip:
        return Skip(rid, model_path, system, reason, detail)

    if system not in SYSTEM_TO_GPU:
        return skip("system not mapped", system)
    served = _served_model(row, skip)
    if isinstance(served, Skip):
        return served
    served, model, spec, method = served
    harness = harness or harness_of(row)
    if row.get("mode") == "disagg":
        return map_disagg_row(row, aic_runs, harness, served, spec, method, skip)
    try:
        tp = _int(row["tp_size"], 1)
        pp = _int(row["pp_size"], 1)
        dp = _int(row["attention_dp_size"], 1)
        moe_tp = _int(row["moe_tp_size"], None)
        moe_ep = _int(row["moe_ep_size"], None)
        isl, osl, bs = _int(row["isl"]), _int(row["osl"]), _int(row["batch_size"])
    except ValueError as exc:
        return skip("non-integer field", str(exc))
    if not (tp and pp and dp and isl and osl and bs):
        return skip("missing field", f"tp={tp} pp={pp} dp={dp} isl={isl} osl={osl} bs={bs}")
    dp_label_only = _dp_label_only(system, harness, dp)
    if dp_label_only:   # a measurement of the TP x EP deployment on tp_size GPUs (module doc)
        bs, dp = bs * dp, 1
        if spec.is_moe:
            moe_tp, moe_ep = 1, tp             # its label's ep (the CSV's moe_ep counts tp_size x adp GPUs)
    dp_in_tp = harness == "inferencemax" and dp > 1
    if dp_in_tp:   # InferenceMAX's attention DP: dp ranks over the tp_size GPUs of one node (module doc)
        if tp % dp:
            return skip("attention DP does not divide tp_size", f"tp={tp} adp={dp}")
        tp = tp // dp
        if spec.is_moe:
            moe_tp, moe_ep = 1, tp * dp        # its label's ep (the CSV's moe_ep counts tp_size x adp GPUs)
    width = tp * dp
    ep_flag = ep_inferred = False
    if spec.is_moe:
        if moe_tp is None or moe_ep is None:
            moe_tp, moe_ep = width, 1   # vLLM default without --enable-expert-parallel
        if moe_tp * moe_ep != width:
            return skip("parallel width mismatch: tp*attention_dp != moe_tp*moe_ep (inconsistent row)",
                        f"tp={tp} adp={dp} moe_tp={moe_tp} moe_ep={moe_ep}")
        if moe_ep == 1:
            ep_flag = False           # experts tensor-parallel over tp*dp GPUs (includes width 1)
        elif moe_tp == 1:
            ep_flag = True
        else:
            return skip("mixed MoE TPxEP grid not expressible in vLLM/Frontier",
                        f"tp={tp} adp={dp} moe_tp={moe_tp} moe_ep={moe_ep}")
        if not ep_flag and width > 1 and _block_split_refused(spec, tp, pp, dp):
            ep_flag, ep_inferred = True, True    # vLLM cannot start the row's moe_tp layout
    if dp > 1 and not spec.is_moe:
        pass  # dense attention-DP = independent engines; same as Frontier's DP model
    ttft, tpot = _num(row["silicon_ttft_ms"]), _num(row["silicon_tpot_ms"])
    if ttft is None or tpot is None:
        return skip("no measured TTFT/TPOT", "")
    concurrency = bs * dp
    measured = re.search(r"measured=(\d{4})", row.get("silicon_data_source") or "")
    cap = (IMAX_2025_IN_SERVICE_CAP if harness == "inferencemax" and measured and measured.group(1) == "2025"
           and concurrency > IMAX_2025_IN_SERVICE_CAP else None)
    launch: dict[str, Any] = {}
    if harness == "aic" and aic_runs == "benchmark":
        launch = dict(bench_prompts=AIC_REQUESTS_PER_SLOT * concurrency, max_num_seqs=bs,
                      max_num_batched_tokens=bs + isl + AIC_EXTRA_TOKENS,
                      max_model_len=isl + osl + AIC_EXTRA_TOKENS, cudagraph_capture_sizes=tuple(range(1, bs + 1)))
    return Deployment(
        row_id=rid, model_path=model_path, model=model, system=system, gpu=SYSTEM_TO_GPU[system],
        tp=tp, pp=pp, dp=dp, enable_expert_parallel=ep_flag, isl=isl, osl=osl, batch_size=bs,
        concurrency=concurrency, num_prompts=num_prompts_for(concurrency, osl, launch.get("bench_prompts")),
        quant_method=method, ttft_meas_ms=ttft, tpot_meas_ms=tpot, harness=harness, in_service_cap=cap,
        quantization=served.quantization, kv_cache_dtype=served.kv_cache_dtype, ep_inferred=ep_inferred,
        dp_in_tp=dp_in_tp, dp_label_only=dp_label_only, vllm_version=(row.get("backend_version") or "").strip(),
        **launch)


def _served_model(row: dict[str, str], skip: Callable[[str, str], Skip]) -> tuple | Skip:
    """(Served, catalogue name, ModelSpec, quantization method) of a row's model, or Skip: the
    model must load and its checkpoint's quantization belong to the row's precision."""
    precision = (row.get("precision") or "").strip().lower()
    served = served_as(row["model_path"], precision, row["system"])
    model = served.model
    spec = _model_spec(model)
    if isinstance(spec, Exception):
        msg = str(spec)
        if "unsupported model_type" in msg:
            mt = msg.split("unsupported model_type ", 1)[1].split(";")[0]
            return skip(f"model_type {mt} not supported by frontier.model_spec", msg[:160])
        if "unknown model" in msg:
            return skip("model not in the catalogue", msg[:160])
        return skip("model config not loadable", msg[:160])
    from simulator.engine_args import served_model
    try:
        method = served_model(spec, served.quantization).quant.method
    except ValueError as exc:
        return skip("served flags refused by the simulator", str(exc)[:160])
    if precision:
        family = PRECISION_FAMILY.get(precision)
        if family is None:
            return skip(f"precision {precision} not mapped", precision)
        if method not in family:
            return skip("checkpoint quantization disagrees with the row's precision",
                        f"precision={precision} gemm={row.get('gemm_quant_mode')} moe={row.get('moe_quant_mode')} "
                        f"but {model} is {method}")
    return served, model, spec, method


def map_disagg_row(row: dict[str, str], aic_runs: str, harness: str, served: Served, spec: Any, method: str,
                   skip: Callable[[str, str], Skip]) -> Deployment | Skip:
    """A disaggregated row -> a Deployment of a prefill and a decode role (``--architecture pdd``),
    or Skip. A role's worker is {role}_tp_size x {role}_attention_dp_size GPUs, and
    {role}_num_workers workers run (replicas). MoE experts run expert-parallel where a role's
    moe_ep_size > 1 (moe_tp_size 1), tensor-parallel where it is 1 or not stated (0 or empty:
    vLLM's default) unless vLLM cannot start that layout (block-quantized experts split mid-block,
    as in ``map_row``: then expert-parallel, ``ep_inferred``); both roles alike, as
    --enable-expert-parallel is one flag here. Concurrency: the source's silicon_concurrency, else
    the decode workers' batch sizes summed (AIC's benchmark rule: estimated_concurrency = decode
    workers x decode max_batch_size). Under the benchmark
    policy an aic row gets AIC's disaggregated launch (generator/rule_plugin/benchmark/vllm.rule):
    prefill --max-num-seqs prefill_batch_size and --max-num-batched-tokens isl + 1500, decode
    --max-num-seqs and --max-num-batched-tokens decode_batch_size, --max-model-len isl + osl + 1500,
    CUDA-graph sizes 1 .. decode_batch_size, 20 x concurrency requests."""
    try:
        isl, osl = _int(row["isl"]), _int(row["osl"])
        roles = {r: {c: _int(row[f"{r}_{c}"], None) for c in ROLE_COLUMNS} for r in ("prefill", "decode")}
    except ValueError as exc:
        return skip("non-integer field", str(exc))
    ep: set[bool] = set()
    for name, r in roles.items():
        if not (r["batch_size"] and r["num_workers"] and r["tp_size"] and isl and osl):
            return skip("missing field", f"{name}: {r} isl={isl} osl={osl}")
        if (r["pp_size"] or 1) != 1:
            return skip("pipeline parallel role", f"{name}_pp_size={r['pp_size']}")
        width = r["tp_size"] * (r["attention_dp_size"] or 1)
        moe_tp, moe_ep = r["moe_tp_size"] or None, r["moe_ep_size"] or None
        if spec.is_moe and moe_ep is not None and moe_ep > 1:
            if (moe_tp or 1) != 1 or moe_ep != width:
                return skip("parallel width mismatch: tp*attention_dp != moe_tp*moe_ep (inconsistent row)",
                            f"{name}: tp={r['tp_size']} adp={r['attention_dp_size']} moe_tp={moe_tp} moe_ep={moe_ep}")
            ep.add(True)
        else:
            ep.add(False)
    if spec.is_moe and len(ep) > 1:
        return skip("roles differ in expert parallelism", f"{roles}")
    ep_inferred = spec.is_moe and ep == {False} and any(   # as map_row: vLLM cannot start the TP layout
        _block_split_refused(spec, r["tp_size"], 1, r["attention_dp_size"] or 1) for r in roles.values())
    ttft, tpot = _num(row["silicon_ttft_ms"]), _num(row["silicon_tpot_ms"])
    if ttft is None or tpot is None:
        return skip("no measured TTFT/TPOT", "")
    pre, dec = roles["prefill"], roles["decode"]
    concurrency = (_source_concurrency(row)
                   or dec["batch_size"] * dec["num_workers"] * (dec["attention_dp_size"] or 1))
    aic_launch = harness == "aic" and aic_runs == "benchmark"

    def plan(r: dict[str, int | None], seqs: int, tokens: int) -> RolePlan:
        return RolePlan(r["tp_size"], r["attention_dp_size"] or 1, r["num_workers"], r["batch_size"],
                        seqs if aic_launch else None, tokens if aic_launch else None)

    launch: dict[str, Any] = {}
    if aic_launch:
        launch = dict(bench_prompts=AIC_REQUESTS_PER_SLOT * concurrency, max_model_len=isl + osl + AIC_EXTRA_TOKENS,
                      cudagraph_capture_sizes=tuple(range(1, dec["batch_size"] + 1)))
    return Deployment(
        row_id=row["id"], model_path=row["model_path"], model=served.model, system=row["system"],
        gpu=SYSTEM_TO_GPU[row["system"]], tp=dec["tp_size"], pp=1, dp=dec["attention_dp_size"] or 1,
        enable_expert_parallel=bool(spec.is_moe and (True in ep or ep_inferred)), ep_inferred=bool(ep_inferred),
        isl=isl, osl=osl, batch_size=dec["batch_size"],
        concurrency=concurrency, num_prompts=num_prompts_for(concurrency, osl, launch.get("bench_prompts")),
        quant_method=method, ttft_meas_ms=ttft, tpot_meas_ms=tpot, harness=harness,
        quantization=served.quantization, kv_cache_dtype=served.kv_cache_dtype,
        vllm_version=(row.get("backend_version") or "").strip(), mode="disagg",
        prefill=plan(pre, pre["batch_size"], isl + AIC_EXTRA_TOKENS),
        decode=plan(dec, dec["batch_size"], dec["batch_size"]), **launch)


def _pdd(dep: Deployment) -> Any:
    """The ``PddSpec`` of a disaggregated deployment (None for a co-located one)."""
    if dep.mode != "disagg":
        return None
    from simulator.control_plane import PddSpec, RoleLayout
    return PddSpec(*(RoleLayout(name, tp=r.tp, dp=r.dp, replicas=r.replicas, max_num_seqs=r.max_num_seqs,
                                max_num_batched_tokens=r.max_num_batched_tokens)
                     for name, r in (("prefill", dep.prefill), ("decode", dep.decode))))


def check_deployment(dep: Deployment) -> str | None:
    """Why the simulator refuses this deployment (sharding, memory), or None."""
    from frontier.gpu import get_gpu
    from simulator.engine_args import EngineArgs
    from simulator.simulation import build_memory
    main = _engine_args(dep)
    pdd = _pdd(dep)
    roles = [("", main)] if pdd is None else [(f"{r.name} role: ", r.engine_args(main)) for r in (pdd.prefill, pdd.decode)]
    for role, args in roles:
        try:
            resolved = args.resolve(_model_spec(dep.model), get_gpu(dep.gpu))
            resolved.parallel.check_model(resolved.model)
            mem = build_memory(resolved)
        except ValueError as exc:
            return f"simulator refuses the layout: {role}{exc}"
        usable = (mem.num_gpu_blocks - 1) * resolved.block_size
        if usable < dep.isl + dep.osl:
            return f"KV cache too small for one request: {role}{usable} tokens"
    del EngineArgs
    return None


# The data's one nightly image (69 MiniMax-M2.5 rows, measured 2026-04-03) was built after vLLM
# 0.19.0 (its wheel's _version.py is dated 2026-04-03) and before 0.20.0 (2026-04-27): it runs
# 0.19's model kernels (simulator/vllm_version.py).
NIGHTLY_RELEASE = {"nightly-5b8c30d62b754b57": "0.19.0"}


def engine_vllm_version(stated: str) -> str:
    """``--vllm-version`` of a run from its CSV ``backend_version``: the release it names, a
    known nightly's release, or the simulator's default where the run states none."""
    from simulator.vllm_version import DEFAULT
    if not stated:
        return DEFAULT
    if stated.startswith("nightly"):
        if stated not in NIGHTLY_RELEASE:
            raise ValueError(f"backend_version {stated!r}: unknown nightly; add it to NIGHTLY_RELEASE")
        return NIGHTLY_RELEASE[stated]
    return stated


def _engine_args(dep: Deployment) -> Any:
    from simulator.engine_args import EngineArgs
    # max_model_len: vLLM's default is the model's max_position_embeddings; the KV check in
    # run_simulation needs a whole max_model_len sequence to fit, which the tightest rows
    # (70B fp8 on one H100) do not meet with the 128k default, so use isl + osl rounded up.
    # The run's own flags where known (aic rows: AIC's benchmark launch).
    spec = _model_spec(dep.model)
    need = dep.isl + dep.osl
    max_len = dep.max_model_len or min(spec.max_position_embeddings, max(need, 8192))
    return EngineArgs(model=dep.model, gpu=dep.gpu, tensor_parallel_size=dep.tp,
                      pipeline_parallel_size=dep.pp, data_parallel_size=dep.dp,
                      enable_expert_parallel=dep.enable_expert_parallel, max_model_len=max_len,
                      max_num_seqs=dep.max_num_seqs or dep.in_service_cap,
                      max_num_batched_tokens=dep.max_num_batched_tokens,
                      cudagraph_capture_sizes=dep.cudagraph_capture_sizes, quantization=dep.quantization,
                      kv_cache_dtype=dep.kv_cache_dtype, vllm_version=engine_vllm_version(dep.vllm_version))


def resolve_bundles(value: str | None, gpus: set[str]) -> dict[str, str | None]:
    """``--predictor-bundle`` -> bundle path per GPU name (None = roofline)."""
    if value is None or value == "none":
        return {g: None for g in gpus}
    if value != "auto":
        if not Path(value).is_file():
            raise SystemExit(f"--predictor-bundle {value!r} is not a file; give a bundle path, auto or none")
        return {g: value for g in gpus}
    from calibration.auto_bundle import ensure_bundle
    return {g: str(ensure_bundle(g, log=lambda m: print(m, file=sys.stderr))) for g in sorted(gpus)}


def simulate_row(dep: Deployment, step_jitter: float, seed: int = DEFAULT_SEED,
                 range_ratio: float = 0.0, predictor_bundle: str | None = None,
                 comm_model: str = "analytical", lengths: str = "harness",
                 moe_routing: str = MOE_ROUTING, engine_cpu_overhead: bool = False,
                 frontend_latency_s: float = 0.0) -> dict[str, Any]:
    """Simulate one deployment; mean TTFT / TPOT in ms as vllm bench serve reports them.

    ``ttft_ms``/``tpot_ms``: means over every request (what the benchmark reports).
    ``*_steady``: means over the requests after the first wave (the first ``concurrency`` sends,
    which all arrive at t=0 and queue behind each other's prefills), a diagnostic of how much
    the cold start weighs in the mean.
    """
    from simulator.simulation import SimulationSpec, run_simulation
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="silicon_e2e_") as tmp:
        workload = row_workload(dep, Path(tmp), seed, range_ratio, lengths)
        try:
            res = run_simulation(SimulationSpec(engine=_engine_args(dep), workload=workload,
                                                architecture="pdd" if dep.mode == "disagg" else "colocated",
                                                pdd=_pdd(dep),
                                                max_concurrency=dep.concurrency, step_jitter=step_jitter,
                                                predictor_bundle=predictor_bundle, comm_model=comm_model,
                                                moe_routing=moe_routing, engine_cpu_overhead=engine_cpu_overhead,
                                                frontend_latency_s=frontend_latency_s))
        except ValueError as exc:
            return {"error": str(exc), "wall_s": time.perf_counter() - t0}
    return row_result(res, dep, t0, num_gpu_blocks=res.memory.num_gpu_blocks)


def row_workload(dep: Deployment, tmp: Path, seed: int = DEFAULT_SEED, range_ratio: float = 0.0,
                 lengths: str = "harness") -> Any:
    """The ``WorkloadSpec`` of a row: InferenceMAX's [0.8 L, L] lengths as a trace written in ``tmp``
    (``lengths == "harness"``), else the random dataset at the row's lengths; all sent at once."""
    from simulator.workload import WorkloadSpec
    if lengths == "harness" and dep.harness == "inferencemax":
        trace = tmp / "requests.csv"
        with open(trace, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["request_id", "arrival_time_s", "prompt_len", "output_len"])
            ins, outs = imax_lengths(dep.isl, dep.osl, dep.num_prompts, seed)
            w.writerows((i, 0, a, b) for i, (a, b) in enumerate(zip(ins, outs)))
        return WorkloadSpec(dataset_name="trace", num_prompts=dep.num_prompts, dataset_path=str(trace))
    return WorkloadSpec(dataset_name="random", num_prompts=dep.num_prompts, request_rate=math.inf, seed=seed,
                        random_input_len=dep.isl, random_output_len=dep.osl, random_range_ratio=range_ratio)


def row_result(res: Any, dep: Deployment, t0: float, **extra: Any) -> dict[str, Any]:
    """A simulated row's means (every request, and ``*_steady``: after the first wave), counts and
    wall time since ``t0``; ``extra`` keys added."""
    recs = res.records
    if not recs:
        return {"error": f"no request completed ({len(res.failed)} failed)", "wall_s": time.perf_counter() - t0}
    ttft, tpot = _means(recs)
    steady = sorted(recs, key=lambda r: (r.send_s, r.request_id))[dep.concurrency:]
    ttft_s, tpot_s = _means(steady) if steady else (float("nan"), float("nan"))
    return {"ttft_ms": ttft, "tpot_ms": tpot, "ttft_ms_steady": ttft_s, "tpot_ms_steady": tpot_s,
            "cost_model": res.summary.get("cost_model", "roofline"),
            "pricing_notes": res.summary.get("pricing_notes", []),    # a kernel of the release no table times
            "completed": len(recs), "failed": len(res.failed),
            "preemptions": sum(r.num_preemptions for r in recs), **extra, "wall_s": time.perf_counter() - t0}


def _means(recs: list[Any]) -> tuple[float, float]:
    ttft = sum(r.first_token_s - r.send_s for r in recs) / len(recs) * 1e3
    tpots = [(r.finish_s - r.first_token_s) / (r.output_len - 1) for r in recs if r.output_len > 1]
    return ttft, (sum(tpots) / len(tpots) * 1e3 if tpots else float("nan"))


def _ape(sim: float, meas: float) -> float:
    return abs(sim - meas) / meas * 100.0


ESTIMATORS = ("bench", "raw", "steady")


def target_prompts(concurrency: int) -> int:
    """The prompt count of the assumed real benchmark (before the wall-time cap)."""
    return max(PROMPTS_PER_SLOT * concurrency, MIN_PROMPTS)


def score(dep: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    """Add the three estimators of the benchmark means and their APEs to one simulated result.

    raw:    means over the simulated requests (num_prompts of the row, after the wall-time cap).
    steady: means over the requests after the first wave (NaN when only one wave ran).
    bench:  the primary one. The simulated first-wave and later-wave means, re-weighted to the
            assumed real prompt count N (the row's bench_prompts, else target_prompts(c)):
            (c * first + (N - c) * later) / N.
            Equals raw when the run already has N prompts or only one wave ran.
    """
    if "error" in r:
        return r
    c, n = dep["concurrency"], r["completed"]
    target = dep.get("bench_prompts") or target_prompts(c)
    for what in ("ttft", "tpot"):
        raw, steady = r[f"{what}_ms"], r[f"{what}_ms_steady"]
        bench = raw
        if c < n < target and not math.isnan(steady):
            first = (n * raw - (n - c) * steady) / c
            bench = (c * first + (target - c) * steady) / target
        r[f"{what}_ms_bench"] = bench
        meas = dep[f"{what}_meas_ms"]
        r[f"{what}_ape_bench"] = _ape(bench, meas)
        r[f"{what}_ape_raw"] = _ape(raw, meas)
        r[f"{what}_ape_steady"] = None if math.isnan(steady) else _ape(steady, meas)
        r.pop(f"{what}_ape", None)
    return r


def _work(item: tuple[Deployment, tuple[float, ...], float, str | None, str, str, str, bool, float]) -> dict[str, Any]:
    dep, jitters, range_ratio, bundle, comm_model, lengths, moe_routing, engine_cpu, frontend_s = item
    out: dict[str, Any] = {"deployment": asdict(dep)}
    for j in jitters:
        out[f"jitter={j:g}"] = score(out["deployment"], simulate_row(
            dep, j, range_ratio=range_ratio, predictor_bundle=bundle, comm_model=comm_model, lengths=lengths,
            moe_routing=moe_routing, engine_cpu_overhead=engine_cpu, frontend_latency_s=frontend_s))
        # A finished simulation is cyclic garbage (event loop <-> replicas <-> engine) that the
        # collector's thresholds rarely reach in a numpy-heavy run: without this a worker grew
        # ~28 MB per Llama-3.1-8B row (roofline too). Bundles are shared, not per row.
        gc.collect()
    return out


def load_aic(path: Path = AIC_CSV) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    if not path.is_file():
        return out
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            out[r["id"]] = {"ttft_pred": _num(r["ttft_pred"]), "tpot_pred": _num(r["tpot_pred"]),
                            "err": r.get("err") or None}
    return out


def _mape(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize_results(results: list[dict[str, Any]], aic: dict[str, dict[str, Any]],
                      jitters: tuple[float, ...],
                      repeats: dict[str, tuple[float, float]] | None = None) -> dict[str, Any]:
    """Totals per jitter setting; with ``repeats`` (``repeat_runs`` of the CSV), also the data's
    own run-to-run error on the simulated rows measured more than once, beside ours there."""
    totals: dict[str, Any] = {}
    for j in jitters:
        key = f"jitter={j:g}"
        ok = [r for r in results if "error" not in r[key]]
        both = [r for r in ok if (aic.get(r["deployment"]["row_id"]) or {}).get("ttft_pred") is not None]
        aim = [r for r in ok if r["deployment"]["system"] in AIM_SYSTEMS and r["deployment"].get("mode", "agg") == "agg"]

        def aic_ape(r: dict[str, Any], what: str) -> float:
            a = aic[r["deployment"]["row_id"]]
            return _ape(a[f"{what}_pred"], r["deployment"][f"{what}_meas_ms"])

        def mape(rs: list[dict[str, Any]], what: str, est: str) -> float | None:
            return _mape([r[key][f"{what}_ape_{est}"] for r in rs if r[key][f"{what}_ape_{est}"] is not None])

        def bias(rs: list[dict[str, Any]], what: str) -> float | None:
            return _mape([(r[key][f"{what}_ms_bench"] / r["deployment"][f"{what}_meas_ms"] - 1) * 100 for r in rs])

        by_harness: dict[str, list[dict[str, Any]]] = {}
        by_system: dict[str, list[dict[str, Any]]] = {}
        by_version: dict[str, list[dict[str, Any]]] = {}
        by_mode: dict[str, list[dict[str, Any]]] = {}
        for r in ok:   # reports written before the harness (version, mode) field count as "aic" ("not stated", "agg")
            by_harness.setdefault(r["deployment"].get("harness", "aic"), []).append(r)
            by_system.setdefault(r["deployment"]["system"], []).append(r)
            by_version.setdefault(r["deployment"].get("vllm_version") or "not stated", []).append(r)
            by_mode.setdefault(r["deployment"].get("mode", "agg"), []).append(r)
        per_model: dict[str, Any] = OrderedDict()
        for r in ok:
            mode = "" if r["deployment"].get("mode", "agg") == "agg" else f' ({r["deployment"]["mode"]})'
            per_model.setdefault(f'{r["deployment"]["model_path"]}@{r["deployment"]["system"]}{mode}', []).append(r)
        totals[key] = {
            "rows_simulated": len(ok),
            "rows_failed_in_simulation": len(results) - len(ok),
            **{est: {"ttft_mape": mape(ok, "ttft", est), "tpot_mape": mape(ok, "tpot", est),
                     "rows": sum(1 for r in ok if r[key][f"ttft_ape_{est}"] is not None)} for est in ESTIMATORS},
            "aim_rows": {"systems": list(AIM_SYSTEMS), "rows": len(aim),
                         "ttft_mape": mape(aim, "ttft", "bench"), "tpot_mape": mape(aim, "tpot", "bench")},
            "rows_with_aic_estimate": len(both),
            "ours_on_aic_rows": {"ttft_mape": mape(both, "ttft", "bench"), "tpot_mape": mape(both, "tpot", "bench")},
            "aic_on_same_rows": {"ttft_mape": _mape([aic_ape(r, "ttft") for r in both]),
                                 "tpot_mape": _mape([aic_ape(r, "tpot") for r in both])},
            **{f"per_{group}": {h: {"rows": len(rs), "ttft_mape": mape(rs, "ttft", "bench"),
                                    "tpot_mape": mape(rs, "tpot", "bench"),
                                    "ttft_bias_pct": bias(rs, "ttft"), "tpot_bias_pct": bias(rs, "tpot")}
                                for h, rs in sorted(rows.items())}
               for group, rows in (("harness", by_harness), ("system", by_system), ("version", by_version),
                                   ("mode", by_mode))},
            "per_model": {m: {"rows": len(rs),
                              "ttft_mape": mape(rs, "ttft", "bench"), "tpot_mape": mape(rs, "tpot", "bench"),
                              "ttft_bias_pct": bias(rs, "ttft"), "tpot_bias_pct": bias(rs, "tpot"),
                              "aic_rows": sum(1 for r in rs if r in both),
                              "aic_ttft_mape": _mape([aic_ape(r, "ttft") for r in rs if r in both]),
                              "aic_tpot_mape": _mape([aic_ape(r, "tpot") for r in rs if r in both])}
                          for m, rs in per_model.items()},
        }
        if repeats is not None:
            rep = [r for r in ok if r["deployment"]["row_id"] in repeats]
            totals[key]["repeated_runs"] = {
                "rows": len(rep),
                "data_ttft_mape": _mape([repeats[r["deployment"]["row_id"]][0] for r in rep]),
                "data_tpot_mape": _mape([repeats[r["deployment"]["row_id"]][1] for r in rep]),
                "ours_ttft_mape": mape(rep, "ttft", "bench"), "ours_tpot_mape": mape(rep, "tpot", "bench")}
    return totals


def _fmt(v: Any, nd: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{nd}f}"


def print_report(results: list[dict[str, Any]], skips: list[Skip], totals: dict[str, Any],
                 aic: dict[str, dict[str, Any]], jitters: tuple[float, ...], file: Any = None) -> None:
    file = file or sys.stdout
    p = lambda *a: print(*a, file=file)  # noqa: E731
    key0 = f"jitter={jitters[0]:g}"
    hdr = (f"{'row':<58} {'model':<22} {'gpu':<4} {'tp':>2} {'dp':>2} {'ep':>2} {'isl':>5} {'osl':>5} {'conc':>4} "
           f"{'n':>5} {'ttft_meas':>9} {'ttft_sim':>9} {'ape%':>6} {'aic%':>6} "
           f"{'tpot_meas':>9} {'tpot_sim':>9} {'ape%':>6} {'aic%':>6} {'wall_s':>6}")
    p(f"per row ({key0}; sim = 'bench' estimator; ape = |sim - meas| / meas; aic = AIC 0.12's APE on the row)")
    p(hdr)
    for r in results:
        d, s = r["deployment"], r[key0]
        a = aic.get(d["row_id"]) or {}
        aic_t = _ape(a["ttft_pred"], d["ttft_meas_ms"]) if a.get("ttft_pred") is not None else None
        aic_p = _ape(a["tpot_pred"], d["tpot_meas_ms"]) if a.get("tpot_pred") is not None else None
        name = d["model"].split("/")[-1][:22]
        if "error" in s:
            p(f"{d['row_id'][:58]:<58} {name:<22} ERROR {s['error'][:120]}")
            continue
        p(f"{d['row_id'][:58]:<58} {name:<22} {d['gpu']:<4} {d['tp']:>2} {d['dp']:>2} "
          f"{'y' if d['enable_expert_parallel'] else 'n':>2} {d['isl']:>5} {d['osl']:>5} {d['concurrency']:>4} "
          f"{d['num_prompts']:>5} {d['ttft_meas_ms']:>9.1f} {s['ttft_ms_bench']:>9.1f} {s['ttft_ape_bench']:>6.1f} {_fmt(aic_t):>6} "
          f"{d['tpot_meas_ms']:>9.2f} {s['tpot_ms_bench']:>9.2f} {s['tpot_ape_bench']:>6.1f} {_fmt(aic_p):>6} {s['wall_s']:>6.1f}")
    p("")
    for key, t in totals.items():
        p(f"totals [{key}]: simulated {t['rows_simulated']} rows ({t['rows_failed_in_simulation']} failed in simulation)")
        for est in ESTIMATORS:
            e = t[est]
            p(f"  {est:<6} TTFT MAPE {_fmt(e['ttft_mape']):>6}%  TPOT MAPE {_fmt(e['tpot_mape']):>6}%  ({e['rows']} rows)")
        aim = t.get("aim_rows")   # reports written before it have none
        if aim and aim["rows"]:
            p(f"  the aim's rows ({' + '.join(aim['systems'])}, bench): TTFT MAPE {_fmt(aim['ttft_mape'])}%  "
              f"TPOT MAPE {_fmt(aim['tpot_mape'])}%  ({aim['rows']} rows; aim: under 10 % on both)")
        p(f"  on the {t['rows_with_aic_estimate']} rows AIC estimates: ours (bench) TTFT {_fmt(t['ours_on_aic_rows']['ttft_mape'])}% "
          f"TPOT {_fmt(t['ours_on_aic_rows']['tpot_mape'])}%  |  AIC TTFT {_fmt(t['aic_on_same_rows']['ttft_mape'])}% "
          f"TPOT {_fmt(t['aic_on_same_rows']['tpot_mape'])}%")
        rep = t.get("repeated_runs")
        if rep and rep["rows"]:
            p(f"  {rep['rows']} rows are runs of a deployment measured more than once: one run against the mean of "
              f"the others (the data's repeatability) TTFT {_fmt(rep['data_ttft_mape'])}% TPOT "
              f"{_fmt(rep['data_tpot_mape'])}%  |  ours there TTFT {_fmt(rep['ours_ttft_mape'])}% "
              f"TPOT {_fmt(rep['ours_tpot_mape'])}%")
        for group in ("harness", "system", "version", "mode"):
            for h, v in t.get(f"per_{group}", {}).items():
                p(f"  {group} {h:<{20 - len(group)}} {v['rows']:>4} rows: TTFT MAPE {_fmt(v['ttft_mape'])}% "
                  f"(bias {_fmt(v['ttft_bias_pct'])}%)  TPOT MAPE {_fmt(v['tpot_mape'])}% (bias {_fmt(v['tpot_bias_pct'])}%)")
        p(f"  {'model@system (bench)':<45} {'rows':>4} {'aic_n':>5} {'ttft%':>6} {'bias%':>7} {'aic%':>6} "
          f"{'tpot%':>6} {'bias%':>7} {'aic%':>6}")
        for m, v in t["per_model"].items():
            p(f"  {m:<45} {v['rows']:>4} {v['aic_rows']:>5} {_fmt(v['ttft_mape']):>6} {_fmt(v['ttft_bias_pct']):>7} "
              f"{_fmt(v['aic_ttft_mape']):>6} {_fmt(v['tpot_mape']):>6} {_fmt(v['tpot_bias_pct']):>7} "
              f"{_fmt(v['aic_tpot_mape']):>6}")
    p("")
    groups: dict[str, list[Skip]] = OrderedDict()
    for s in skips:
        groups.setdefault(s.reason, []).append(s)
    p(f"skipped {len(skips)} rows:")
    for reason, ss in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        models = sorted({f"{s.model_path}@{s.system}" for s in ss})
        p(f"  {len(ss):>4}  {reason}  [{', '.join(models)}]")
        for s in ss[:2]:
            p(f"        e.g. {s.row_id}: {s.detail}")


def plan(rows: list[dict[str, str]], models: list[str] | None, limit: int | None,
         aic_runs: str = "benchmark") -> tuple[list[Deployment], list[Skip]]:
    deps: list[Deployment] = []
    skips: list[Skip] = []
    copies = imax_copies(rows)
    for row in rows:
        if models and not any(m.lower() in row["model_path"].lower() for m in models):
            continue
        m = map_row(row, aic_runs, "inferencemax" if row["id"] in copies else None)
        if isinstance(m, Deployment):
            why = check_deployment(m)
            if why:
                m = Skip(m.row_id, m.model_path, m.system, why.split(":")[0], why)
        (deps if isinstance(m, Deployment) else skips).append(m)
    if limit is not None:
        deps = deps[:limit]
    return deps, skips


def _items(text: str) -> tuple[str, ...]:
    """The non-empty items of a comma-separated flag value."""
    return tuple(x.strip() for x in text.split(",") if x.strip())


def check_args(args: argparse.Namespace) -> None:
    """ValueError (one line) for a flag the bench cannot run with, raised before anything is
    simulated (each of these used to fail every row, print an empty table, or end the run in a
    traceback once it was done)."""
    from frontier.out_path import check_file_path
    from simulator.moe_routing import RoutingSpec
    bad = [s for s in _items(args.systems) if s not in SYSTEM_TO_GPU]
    if bad:
        raise ValueError(f"--systems {bad[0]!r} is not a system this bench simulates; valid: {', '.join(SYSTEM_TO_GPU)}")
    modes = _items(args.modes)
    bad = [m for m in modes if m not in MODES] or ([] if modes else [args.modes])
    if bad:
        raise ValueError(f"--modes {bad[0]!r} is not a serving mode of the data; valid: {', '.join(MODES)}")
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    for flag, value, high in (("--step-jitter", args.step_jitter, 1.0), ("--range-ratio", args.range_ratio, 1.0),
                              ("--frontend-latency-ms", args.frontend_latency_ms, 60000.0)):
        if not 0.0 <= value < high:
            raise ValueError(f"{flag} must be in [0, {high:g}), got {value!r}")
    RoutingSpec.parse(args.moe_routing)
    if args.predictor_bundle not in (None, "none", "auto"):
        from calibration.bundle import read_manifest
        read_manifest(args.predictor_bundle)
    if args.out is not None:
        check_file_path("--out", args.out)


def _read_report(path: Path) -> dict[str, Any]:
    """A JSON report written by ``--out`` (``--rescore``); ValueError (one line) otherwise."""
    from frontier.text_file import read_json
    if not path.is_file():
        raise ValueError(f"--rescore {path} does not exist; give a report written by --out")
    report = read_json(path, "--rescore file")
    if not (isinstance(report, dict) and isinstance(report.get("rows"), list) and report["rows"]
            and "skipped" in report):
        raise ValueError(f"--rescore {path} is not a report written by --out (no rows and skipped lists)")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=SILICON_CSV)
    ap.add_argument("--aic-csv", type=Path, default=AIC_CSV)
    ap.add_argument("--limit", type=int, default=None, help="simulate only the first N supported rows")
    ap.add_argument("--models", default=None, help="comma-separated substrings of model_path")
    ap.add_argument("--systems", default=",".join(SYSTEM_TO_GPU))
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated serving modes ({', '.join(MODES)})")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--step-jitter", type=float, default=0.0, help="SimulationSpec.step_jitter")
    ap.add_argument("--lengths", default="harness", choices=LENGTH_POLICIES,
                    help="harness: InferenceMAX rows draw lengths in [int(0.8 L), L] as its benchmark does, "
                         "the others fixed (default); fixed: every row at the ISL/OSL it states")
    ap.add_argument("--aic-runs", default="benchmark", choices=AIC_RUN_POLICIES,
                    help="benchmark: the aic rows run with AIC's benchmark launch flags and aiperf's 20 x "
                         "concurrency requests (default); vllm-defaults: vLLM's default flags, 10 x concurrency")
    ap.add_argument("--range-ratio", type=float, default=0.0,
                    help="random_range_ratio (vLLM 0.33 semantics) of the fixed-length rows (0 = the stated ISL/OSL)")
    ap.add_argument("--both-jitter", action="store_true",
                    help="run every row with jitter 0 and with --step-jitter (default 0.05 if unset)")
    ap.add_argument("--progress", action="store_true", help="one line per finished row on stderr")
    ap.add_argument("--rescore", type=Path, default=None,
                    help="re-score and re-print a JSON report written by --out (no simulation)")
    ap.add_argument("--plan-only", action="store_true", help="map rows and print the plan, simulate nothing")
    ap.add_argument("--json", action="store_true", help="print the JSON report instead of the table")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    ap.add_argument("--predictor-bundle", default=None,
                    help="none (roofline, default), auto (cached bundle per GPU) or a bundle path")
    ap.add_argument("--comm-model", default="calibrated", choices=("calibrated", "analytical"),
                    help="collective costs: calibrated (measured AIC tables, default) or analytical")
    ap.add_argument("--moe-routing", default=MOE_ROUTING,
                    help=f"SimulationSpec.moe_routing of the MoE rows (default {MOE_ROUTING}; see the module doc)")
    ap.add_argument("--engine-cpu-overhead", default=True, action=argparse.BooleanOptionalAction,
                    help="SimulationSpec.engine_cpu_overhead: price each step's engine CPU time (default on here; "
                         "it shows where the row's release scheduled synchronously, before vLLM 0.14)")
    ap.add_argument("--frontend-latency-ms", type=float, default=FRONTEND_LATENCY_MS,
                    help=f"SimulationSpec.frontend_latency_s in ms: send -> engines (default {FRONTEND_LATENCY_MS:g} "
                         "here; see the module doc)")
    args = ap.parse_args(argv)
    try:
        check_args(args)
        report = _read_report(args.rescore) if args.rescore else None
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    if report is not None:
        jitters = tuple(float(k.split("=", 1)[1]) for k in report["rows"][0] if k.startswith("jitter="))
        for r in report["rows"]:
            for j in jitters:
                score(r["deployment"], r[f"jitter={j:g}"])
        aic = load_aic(args.aic_csv)
        repeats = repeat_runs(load_rows(args.csv, modes=MODES)) if args.csv.is_file() else None
        report["totals"] = summarize_results(report["rows"], aic, jitters, repeats)
        if args.out:
            args.out.write_text(json.dumps(report, indent=1, default=str))
        print_report(report["rows"], [Skip(**k) for k in report["skipped"]], report["totals"], aic, jitters)
        return 0
    systems = _items(args.systems)
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    modes = _items(args.modes)
    rows = load_rows(args.csv, systems, modes)
    deps, skips = plan(rows, models, args.limit, args.aic_runs)
    if models and not deps and not skips:
        print(f"error: --models {args.models!r} matches no row's model_path on {', '.join(systems)}", file=sys.stderr)
        return 2
    if args.both_jitter:
        jitters: tuple[float, ...] = (0.0, args.step_jitter or 0.05)
    else:
        jitters = (args.step_jitter,)
    if args.plan_only:
        report = {"deployments": [asdict(d) for d in deps], "skipped": [asdict(s) for s in skips]}
        print(json.dumps(report, indent=1))
        return 0
    bundles = resolve_bundles(args.predictor_bundle, {d.gpu for d in deps})  # fits once per GPU if needed
    t0 = time.perf_counter()
    items = [(d, jitters, args.range_ratio, bundles[d.gpu], args.comm_model, args.lengths, args.moe_routing,
              args.engine_cpu_overhead, args.frontend_latency_ms * 1e-3) for d in deps]
    # Longest rows first, so the pool does not end on one long straggler; progress to stderr.
    order = sorted(range(len(items)), key=lambda i: -items[i][0].num_prompts * items[i][0].osl)
    done: dict[int, dict[str, Any]] = {}

    def _progress(i: int, r: dict[str, Any]) -> None:
        done[i] = r
        if args.progress:
            s = r[f"jitter={jitters[0]:g}"]
            print(f"[{len(done)}/{len(items)} {time.perf_counter() - t0:.0f}s] {r['deployment']['row_id']} "
                  f"ttft_ape={_fmt(s.get('ttft_ape_bench'))} tpot_ape={_fmt(s.get('tpot_ape_bench'))} "
                  f"wall={_fmt(s.get('wall_s'))}", file=sys.stderr, flush=True)

    if args.jobs > 1 and len(items) > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(_work, items[i]): i for i in order}
            for fut in as_completed(futures):
                _progress(futures[fut], fut.result())
    else:
        for i in order:
            _progress(i, _work(items[i]))
    results = [done[i] for i in range(len(items))]
    wall = time.perf_counter() - t0
    aic = load_aic(args.aic_csv)
    totals = summarize_results(results, aic, jitters, repeat_runs(rows))
    report = {"source": str(args.csv), "selected_rows": len(rows), "wall_s": wall, "jobs": args.jobs,
              "cost_model": {"predictor_bundle": bundles, "comm_model": args.comm_model,
                             "moe_routing": args.moe_routing, "engine_cpu_overhead": args.engine_cpu_overhead,
                             "frontend_latency_ms": args.frontend_latency_ms},
              "workload_policy": {
                  "prompts_per_slot": PROMPTS_PER_SLOT, "min_prompts": MIN_PROMPTS,
                  "max_output_tokens": MAX_OUTPUT_TOKENS, "request_rate": "inf", "range_ratio": args.range_ratio,
                  "lengths": args.lengths, "imax_range_ratio": IMAX_RANGE_RATIO},
              "totals": totals, "rows": results, "skipped": [asdict(s) for s in skips]}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str))
    if args.json:
        print(json.dumps(report, indent=1, default=str))
    else:
        print_report(results, skips, totals, aic, jitters)
        print(f"\nwall {wall:.1f} s for {len(deps)} rows x {len(jitters)} jitter setting(s), {args.jobs} job(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
