"""Run one co-located deployment against one workload: the ``frontier simulate`` job.

Control plane (``simulator.cluster``): the engine arguments compile into one
cluster of role ``C`` (co-located) behind a router. For a dense model it holds
``num_replicas x data_parallel_size`` independent engines of TP x PP GPUs, each
with its own scheduler and KV cache (vLLM runs dense DP ranks independently),
``--router`` picking a replica and vLLM's DP load balancer a rank within it;
for an MoE model with DP it holds ``num_replicas`` replicas whose DP ranks step
in lockstep (``simulator.dp_group``). The benchmark client replays the workload like ``vllm bench serve``:
requests arrive on the schedule, wait for a ``--max-concurrency`` slot if
one is set, are sent to a replica and observe each output token when the
step that produced it ends.

A request whose prompt does not fit ``max_model_len`` is refused, as vLLM's
server refuses it, and counted as failed.
"""

from __future__ import annotations

import dataclasses
import gc
import time
from array import array
from contextlib import contextmanager
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from simulator.batch_engine import BatchEngine, pricing_notes
from simulator.cluster import Admission, Cluster, Role
from simulator.comm.backend import COMM_MODELS
from simulator.predictor_cost import cost_model_stats, make_cost_model
from simulator.dp_group import LockstepRanks
from simulator.engine_args import AUTO_MAX_MODEL_LEN, EngineArgs, ResolvedEngine, gdn_simulation_error
from simulator.engine_cpu import MEASURED as MEASURED_ENGINE_CPU, EngineCpu
from simulator.events import PRIO_ARRIVAL, EventLoop
from simulator.memory import MemoryBudget, ProfiledOverheads, kv_budget
from simulator.metrics import (GOODPUT_METRICS, PERCENTILE_METRICS, RequestRecord, SessionRecord, session_summary,
                               summarize)
from simulator.moe_routing import RoutingSpec, make_router
from simulator.multimodal import encoder_summary, layout_images
from simulator.replica import Replica
from simulator.request import Request, RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import UpdateResult
from simulator.lora import AdapterCache, adapter_copy_s
from simulator.spec_decode import engine_acceptance, schedulers_stats, with_draft_layer
from simulator.role_stats import role_summary
from simulator.trace import BatchTrace
from simulator.workload import SESSION_DATASETS, WorkloadSpec, generate_workload
from simulator.workloads.sessions import Session

if TYPE_CHECKING:
    from frontier.gpu import GpuSpec
    from simulator.afd import AfdSpec
    from simulator.control_plane import CompiledRole, PddSpec
    from simulator.sglang_layout import SglangArgs, SglangLayout


# Send -> engines, seconds (BenchmarkClient): the order of a local HTTP hop plus the API server's
# tokenization of a ~1k-token prompt and its IPC to the engine core; not fitted (bench/README.md: on
# the Qwen3-32B silicon rows 0.5, 2 and 5 ms give the same errors within 0.2 points)
FRONTEND_LATENCY_S = 0.001


@dataclass(frozen=True)
class SimulationSpec:
    """Everything one run needs: the deployment, the workload and client options."""

    engine: EngineArgs = field(default_factory=EngineArgs)
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    max_concurrency: int | None = None
    keep_batch_trace: bool = False
    debug: bool = False
    step_jitter: float = 0.0        # relative std-dev of per-step time noise (0 = deterministic steps)
    comm_model: str = "analytical"  # analytical | calibrated (measured AIC tables, simulator/comm)
    predictor_bundle: str | None = None   # calibrated operator costs (a bundle path); None = roofline
    moe_routing: str = "balanced"   # balanced | random | power_law:ALPHA | trace:PATH (simulator/moe_routing.py)
    architecture: str = "colocated"     # "colocated" | "pdd" (prefill/decode) | "afd" (attention/FFN)
    pdd: PddSpec | None = None          # role layouts + KV transfer (pdd, afd's prefill; None = defaults)
    afd: AfdSpec | None = None          # attention/FFN layouts, lanes, A-F link (afd only)
    num_gpus: int | None = None         # --num-gpus: the deployment must use exactly this many GPUs
    save_detailed: bool = False         # --save-detailed: keep vLLM's per-request arrays in the summary
    engine_cpu_overhead: bool = False   # --engine-cpu-overhead: each step's engine CPU time (simulator/engine_cpu.py)
    frontend_latency_s: float = FRONTEND_LATENCY_S   # --frontend-latency-ms / 1e3: send -> engines (BenchmarkClient)
    sglang: SglangArgs | None = None    # --engine sglang: SGLang's server flags (None: vLLM engines)
    # vllm bench serve's reporting: --goodput SLOs (metric, ms), --percentile-metrics (None: ttft,
    # tpot, itl and e2el) and --metric-percentiles
    goodput: tuple[tuple[str, float], ...] = ()
    percentile_metrics: tuple[str, ...] | None = None
    metric_percentiles: tuple[float, ...] = (99.0,)

    @property
    def engine_cpu(self) -> EngineCpu | None:
        """The engine CPU model of every replica (``simulator.engine_cpu.MEASURED``), or None."""
        return MEASURED_ENGINE_CPU if self.engine_cpu_overhead else None

    def __post_init__(self) -> None:
        for name, ms in self.goodput:
            if name not in GOODPUT_METRICS or not isinstance(ms, (int, float)) or not ms >= 0:
                raise ValueError(f"--goodput {name}:{ms} is invalid; metrics {', '.join(GOODPUT_METRICS)}, values >= 0 ms")
        bad = [m for m in self.percentile_metrics or () if m not in PERCENTILE_METRICS]
        if bad or self.percentile_metrics == ():
            raise ValueError(f"--percentile-metrics {','.join(self.percentile_metrics)} is invalid; valid: "
                             f"{','.join(PERCENTILE_METRICS)}")
        if not self.metric_percentiles or not all(isinstance(p, (int, float)) and 0 < p < 100
                                                  for p in self.metric_percentiles):
            raise ValueError(f"--metric-percentiles {self.metric_percentiles} is invalid; need percentiles in (0, 100)")
        if self.architecture not in ("colocated", "pdd", "afd"):
            raise ValueError(f"--architecture {self.architecture!r} is not one of colocated, pdd, afd")
        if self.architecture != "afd" and self.afd is not None:
            raise ValueError("--attention-*/--ffn-*/--afd-* flags need --architecture afd")
        if self.architecture == "afd" and self.pdd is not None and not self.pdd.decode.is_default():
            raise ValueError("--decode-* flags need --architecture pdd; AFD decodes on --attention-*/--ffn-*")
        if self.architecture == "colocated" and self.pdd is not None:
            raise ValueError("--prefill-*/--decode-*/--kv-transfer-* flags need --architecture pdd")
        if self.architecture == "afd" and self.engine.all2all_backend != "allgather_reducescatter":
            raise ValueError(f"--all2all-backend {self.engine.all2all_backend} applies to co-located and P/D "
                             "engines; AFD moves tokens to its FFN side over the A<->F link (--afd-link-bandwidth)")
        if self.architecture != "colocated" and (self.engine.max_num_queued_reqs is not None
                                                 or self.engine.max_num_queued_tokens is not None):
            raise ValueError("--max-num-queued-reqs / --max-num-queued-tokens are simulated for co-located "
                             "deployments (one API server per replica); P/D and AFD front ends do not take them")
        if self.engine.prefill_schedule_interval != 1 and self.architecture != "colocated":
            raise ValueError("--prefill-schedule-interval is simulated for co-located deployments; P/D and AFD "
                             "instances do not take it here")
        if self.architecture == "afd" and self.engine.enable_eplb:
            raise ValueError("--enable-eplb applies to co-located and P/D engines; AFD's FFN side places its experts "
                             "by --ffn-ep")
        latency = self.frontend_latency_s
        number = isinstance(latency, (int, float)) and not isinstance(latency, bool)
        if not number or not 0.0 <= latency < 60.0:
            raise ValueError(f"--frontend-latency-ms must be in [0, 60000), got {latency * 1e3 if number else latency!r}")
        if not 0.0 <= self.step_jitter < 1.0:
            raise ValueError(f"--step-jitter must be in [0, 1), got {self.step_jitter!r}")
        if self.comm_model not in COMM_MODELS:
            raise ValueError(f"--comm-model {self.comm_model!r}; valid: {', '.join(COMM_MODELS)}")
        RoutingSpec.parse(self.moe_routing)
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"--max-concurrency must be >= 1, got {self.max_concurrency!r}")
        if self.num_gpus is not None and (isinstance(self.num_gpus, bool) or not isinstance(self.num_gpus, int)
                                          or self.num_gpus < 1):
            raise ValueError(f"--num-gpus must be a positive integer, got {self.num_gpus!r}")

    def check_num_gpus(self, roles: list[tuple[str, int]]) -> None:
        """Refuse a deployment whose GPUs per role, ``(role, count)``, do not add up to --num-gpus."""
        total = sum(n for _, n in roles)
        if self.num_gpus is None or total == self.num_gpus:
            return
        uses = f"{' + '.join(f'{name} {n}' for name, n in roles)} = {total}" if len(roles) > 1 else str(total)
        raise ValueError(f"--num-gpus {self.num_gpus} does not match the deployment, which uses {uses} GPUs")


@dataclass
class SimulationResult:
    resolved: ResolvedEngine
    memory: MemoryBudget | None         # vLLM's KV budget (None for SGLang: ``sglang`` has its token pool)
    records: list[RequestRecord]
    failed: dict[str, str]              # request_id -> reason
    trace: BatchTrace
    summary: dict[str, Any]
    simulated_duration_s: float
    sim_wall_s: float
    num_events: int
    roles: list[CompiledRole] | None = None    # P/D: the compiled prefill and decode roles
    role_engines: dict[str, int] = field(default_factory=dict)   # role letter -> engines (role_stats)
    sglang: SglangLayout | None = None  # --engine sglang: what its servers started with


@dataclass(slots=True)
class _InFlight:
    """A sent request. token_times_s: array('d') of its token times (8 bytes a token, not a float
    object each), sized for max_tokens while it runs (written at [num_output_tokens - 1]: no
    growth per token) and cut to the tokens it produced when it finishes."""

    spec: RequestSpec
    send_s: float
    request: Request
    token_times_s: array


class BenchmarkClient:
    """Replays arrivals, applies the concurrency limit and records what the client sees.

    ``frontend_latency_s``: seconds between a send and the request reaching the engines (the
    HTTP hop, the API server's input processing, the IPC to the engine core); TTFT counts it.
    0 hands a request over at the instant it is sent, so a request sent when another finishes
    can join the step scheduled at that instant, which no real client can (the simulation's
    default is ``FRONTEND_LATENCY_S``).
    """

    frontend_latency_s = 0.0
    stream_interval = 1     # --stream-interval: tokens a streamed chunk waits for (``_delivered_times``)

    def __init__(self, loop: EventLoop, specs: list[RequestSpec], entry: Cluster,
                 max_model_len: int, max_concurrency: int | None, sessions: list[Session] | None = None) -> None:
        """``sessions``: the multi-round sessions whose first rounds ``specs`` holds
        (``simulator.workloads.sessions``); the client sends each later round after its previous
        round finished and the tool's latency passed, and records the session (``session_records``)."""
        self.loop = loop
        self.specs = specs
        self.entry = entry
        self.max_model_len = max_model_len
        self.max_concurrency = max_concurrency
        self.in_flight: dict[str, _InFlight] = {}
        self.held: deque[RequestSpec] = deque()     # arrived, waiting for a concurrency slot
        self.records: list[RequestRecord] = []
        self.failed: dict[str, str] = {}
        self._next = 0
        self._sessions = {s.session_id: s for s in sessions or ()}
        self.num_sessions = len(self._sessions)
        self._round_index: dict[str, int] = {}      # request id of a later round -> its index in its session
        self._hidden_tokens: dict[str, int] = {}    # session -> output tokens of its rounds before the last
        self.session_records: list[SessionRecord] = []
        for replica in entry.replicas:
            replica.on_update = self._on_update

    def start(self) -> None:
        self._schedule_next_arrival()

    def _schedule_next_arrival(self) -> None:
        if self._next < len(self.specs):
            spec = self.specs[self._next]
            self._next += 1
            self.loop.at(spec.arrival_s, lambda: self._arrive(spec), PRIO_ARRIVAL)

    def _arrive(self, spec: RequestSpec) -> None:
        self._schedule_next_arrival()
        self._admit(spec)

    def _admit(self, spec: RequestSpec) -> None:
        if self.max_concurrency is not None and len(self.in_flight) >= self.max_concurrency:
            self.held.append(spec)
        else:
            self._send(spec)

    def _send(self, spec: RequestSpec) -> None:
        now = self.loop.now_s
        if spec.prompt_len >= self.max_model_len:
            self.failed[spec.request_id] = (
                f"prompt of {spec.prompt_len} tokens does not fit max_model_len {self.max_model_len}")
            self._release_slot()
            return
        state = _InFlight(spec, now, None, array("d"))  # type: ignore[arg-type]
        self.in_flight[spec.request_id] = state
        if self.frontend_latency_s > 0.0:
            self.loop.at(now + self.frontend_latency_s, lambda: self._submit(spec, state), PRIO_ARRIVAL)
        else:
            self._submit(spec, state)

    def _submit(self, spec: RequestSpec, state: _InFlight) -> None:
        request = self.entry.submit(spec)
        if isinstance(request, str):        # refused by the server (its admission limits)
            del self.in_flight[spec.request_id]
            self.failed[spec.request_id] = request
            self._release_slot()
            return
        self._track(state, request)

    def _track(self, state: _InFlight, request: Request) -> None:
        """``request`` produces ``state``'s tokens: their times go to state.token_times_s."""
        state.request = request
        most = min(request.max_tokens, max(self.max_model_len - request.prompt_len, 1))
        state.token_times_s = request.token_times_s = array("d", bytes(8 * most))

    def _release_slot(self) -> None:
        if self.held and (self.max_concurrency is None or len(self.in_flight) < self.max_concurrency):
            self._send(self.held.popleft())

    def _on_update(self, replica: Replica, result: UpdateResult, now_s: float) -> None:
        in_flight = self.in_flight
        if result.num_new_tokens:           # speculative decoding: a chunk of 1 + accepted tokens
            for r, n in zip(result.token_requests, result.num_new_tokens):
                r.token_times_s[r.num_output_tokens - n:r.num_output_tokens] = array("d", [now_s]) * n
        else:
            for r in result.token_requests:     # the Request, not a look-up by id: per token
                r.token_times_s[r.num_output_tokens - 1] = now_s
        for rid in result.aborted_request_ids:
            state = in_flight.pop(rid)
            state.request.token_times_s = None
            self.failed[rid] = ("aborted by the engine: out of memory even after retracting every other request "
                                "of the decode batch (SGLang)")
            self._release_slot()
        for rid in result.finished_request_ids:
            state = in_flight.pop(rid)
            del state.token_times_s[state.request.num_output_tokens:]
            if result.num_new_tokens or self.stream_interval > 1:   # one time per output chunk, as vllm bench
                state.token_times_s = array("d", _delivered_times(state.token_times_s, self.stream_interval))
            state.request.token_times_s = None
            self.records.append(self._make_record(rid, state))
            self._release_slot()
            if state.spec.session_id:
                self._next_round(rid, state)

    def _next_round(self, rid: str, state: _InFlight) -> None:
        """A session's round ``rid`` finished: its next round arrives after the tool's latency,
        with the session's whole sequence so far as its prompt's head; after the last round the
        session is recorded."""
        sid = state.spec.session_id
        session, k = self._sessions[sid], self._round_index.pop(rid, 0)
        if k + 1 < len(session.rounds):
            self._hidden_tokens[sid] = self._hidden_tokens.get(sid, 0) + state.request.num_output_tokens
            at = self.loop.now_s + session.rounds[k].tool_latency_s
            context = state.spec.prompt_len + state.request.num_output_tokens
            spec = dataclasses.replace(session.round_spec(k + 1, at, context), lora_id=state.spec.lora_id)
            self._round_index[spec.request_id] = k + 1
            self.loop.at(at, lambda: self._admit(spec), PRIO_ARRIVAL)
            return
        last = self.records[-1]
        self.session_records.append(SessionRecord(sid, session.arrival_s, last.first_token_s, last.finish_s,
                                                  len(session.rounds), self._hidden_tokens.pop(sid, 0)))

    def _make_record(self, rid: str, state: _InFlight, **fields: Any) -> RequestRecord:
        """The record of a finished request; ``fields`` set or override RequestRecord fields."""
        req = state.request
        times = state.token_times_s
        return RequestRecord(**{
            "request_id": rid, "arrival_s": state.spec.arrival_s, "send_s": state.send_s,
            "first_token_s": times[0], "finish_s": times[-1],
            "prompt_len": state.spec.prompt_len - state.spec.image_tokens, "image_tokens": state.spec.image_tokens,
            "output_len": req.num_output_tokens, "token_times_s": times,
            "num_preemptions": req.num_preemptions,
            "num_prefix_hit_tokens": max(req.num_cached_tokens, 0), "lora_id": state.spec.lora_id, **fields})


@contextmanager
def _event_loop_gc() -> Iterator[None]:
    """Garbage-collector settings while the event loop runs (restored after).

    The loop allocates many short-lived objects per step and creates no reference cycles, but
    the default collector scans young objects every 700 allocations and, every few of those,
    all objects alive (GBs at 1k GPUs). Objects built before the loop are frozen (never scanned:
    block pools, workload), young objects are collected every 100k allocations, the middle
    generation every 1,000 of those and the old one in effect never: at 1,024 GPUs x 100k
    requests (bench/scale_1k.py --case pdd) the old thresholds (10, 10) spent ~11 of 98 CPU s in
    collections that found nothing (peak RSS the same with the collector off, 3,265 MiB).
    """
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 1_000, 1_000)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


def run_client(loop: EventLoop, client, spec: SimulationSpec,
               num_prompts: int) -> tuple[list[RequestRecord], dict[str, Any], float]:
    """Run the event loop until every request finished or can never run, and summarize.

    Requests still held or in flight at the end could never be scheduled (their prompt
    does not fit the KV cache); they are counted as failed, never dropped. Returns the
    records in send order, the summary (vllm bench serve keys, plus ``failed``,
    ``simulated_duration_s`` and ``sim_wall_s``) and the wall time of the loop.
    """
    wall0 = time.perf_counter()
    client.frontend_latency_s = spec.frontend_latency_s
    client.stream_interval = spec.engine.stream_interval
    client.start()
    with _event_loop_gc():
        loop.run()
    sim_wall_s = time.perf_counter() - wall0
    for rid in sorted(client.in_flight) + [s.request_id for s in client.held]:
        client.failed[rid] = "never scheduled: its prompt cannot fit the KV cache"
    records = sorted(client.records, key=lambda r: (r.send_s, r.request_id))
    duration_s = max((r.finish_s for r in records), default=0.0)
    summary = summarize(records, duration_s, spec.metric_percentiles, max_concurrency=spec.max_concurrency,
                        selected_percentile_metrics=spec.percentile_metrics or PERCENTILE_METRICS,
                        goodput=dict(spec.goodput),
                        request_rate=spec.workload.request_rate, burstiness=spec.workload.burstiness,
                        model_id=spec.engine.model, num_prompts=num_prompts,
                        detailed=spec.save_detailed) if records else {}
    w = spec.workload
    if records and w.ramp_up_strategy is not None:      # vllm bench serve's result keys
        summary.update(ramp_up_strategy=w.ramp_up_strategy, ramp_up_start_rps=w.ramp_up_start_rps,
                       ramp_up_end_rps=w.ramp_up_end_rps)
    summary["failed"] = len(client.failed)
    summary["simulated_duration_s"] = loop.now_s
    summary["sim_wall_s"] = sim_wall_s
    summary["async_scheduling"] = spec.engine.effective_async_scheduling    # the engine loop it ran
    summary["engine_cpu_overhead"] = spec.engine_cpu_overhead
    summary["frontend_latency_ms"] = spec.frontend_latency_s * 1e3
    if client.num_sessions:
        summary.update(session_summary(client.session_records, client.num_sessions, duration_s))
    return records, summary, sim_wall_s


def _delivered_times(times: array, interval: int) -> list[float]:
    """The times of the chunks a client receives for tokens generated at ``times`` (the tokens of
    one step share its time), as vLLM 0.33's output processor streams them
    (``RequestState.make_request_output`` with ``--stream-interval``): a step's output is sent when
    it holds the first token, when ``interval`` tokens or more are unsent, or when it finishes the
    request; otherwise its tokens wait for the next send. Interval 1: one chunk per step (a
    speculative step's 1 + accepted tokens)."""
    out: list[float] = []
    sent, n, i = 0, len(times), 0
    while i < n:
        t, j = times[i], i + 1
        while j < n and times[j] == t:      # the step's tokens
            j += 1
        if sent == 0 or j - sent >= interval or j == n:
            out.append(t)
            sent = j
        i = j
    return out


def build_memory(resolved: ResolvedEngine, profiled: ProfiledOverheads | None = None,
                 gpu: GpuSpec | None = None) -> MemoryBudget:
    """The KV budget of one engine rank, vLLM's formula (`profiled`: fitted non-KV terms).

    `gpu` replaces the engine's GPU in the formula (default ``resolved.gpu``); AFD's attention
    role passes one enlarged by the MLP weights it does not hold (``afd.attention_memory``),
    so every flag reaches its budget the same way."""
    args = resolved.args
    model = resolved.model
    if args.speculative_config is not None:     # an EAGLE-family head's weights and KV (a draft model's: draft=)
        model = with_draft_layer(model, args.speculative_config)
    return kv_budget(
        model, resolved.parallel, gpu or resolved.gpu,
        gpu_memory_utilization=args.effective_gpu_memory_utilization, block_size=resolved.block_size,
        max_num_batched_tokens=resolved.max_num_batched_tokens, max_num_seqs=resolved.max_num_seqs,
        enforce_eager=args.enforce_eager, num_gpu_blocks_override=args.num_gpu_blocks_override,
        max_model_len=resolved.max_model_len, kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        async_scheduling=args.effective_async_scheduling, profiled=profiled,
        num_spec_tokens=resolved.num_spec_tokens, cudagraph_capture_sizes=args.cudagraph_capture_sizes,
        max_cudagraph_capture_size=resolved.max_cudagraph_capture_size, cudagraph_mode=resolved.cudagraph_mode,
        vllm_version=resolved.vllm_version, interactivity=args.performance_mode == "interactivity",
        hybrid_kv_cache_manager=not args.disable_hybrid_kv_cache_manager,
        prefix_caching=args.enable_prefix_caching, draft=resolved.draft_model, lora=args.lora)


def fit_max_model_len(resolved: ResolvedEngine, memory: MemoryBudget) -> ResolvedEngine:
    """``resolved`` with ``--max-model-len auto`` (-1) fitted as vLLM 0.14+ fits it: the longest
    request whose KV fits in the blocks besides the null block, at most the model's length
    (``kv_cache_planning._auto_fit_max_model_len``); other values unchanged."""
    if resolved.args.max_model_len != AUTO_MAX_MODEL_LEN:
        return resolved
    fit = memory.max_fitting_model_len(resolved.max_model_len)
    if fit <= 0:
        raise ValueError("Cannot auto-fit max_model_len: not enough GPU memory for the KV cache of even a single "
                         "token; raise --gpu-memory-utilization, the parallel size or --kv-cache-memory-bytes")
    return dataclasses.replace(resolved, max_model_len=fit)


def prefix_cache_summary(schedulers: list[Scheduler]) -> dict[str, float]:
    """vLLM's prefix-cache counters over every engine (``vllm:prefix_cache_queries`` / ``_hits``:
    the prompt tokens of each admission and the tokens its lookup hit, preempted requests'
    re-admissions apart, as vLLM counts them) and their ratio (0 without queries)."""
    queries = sum(s.kv.stats.queries for s in schedulers)
    hits = sum(s.kv.stats.hits for s in schedulers)
    return {"prefix_cache_queries": queries, "prefix_cache_hits": hits,
            "prefix_cache_hit_rate": hits / queries if queries else 0.0}


def resolve_engine(args: EngineArgs) -> ResolvedEngine:
    model = load_model_spec(args.model)
    gpu = get_gpu(args.gpu)
    resolved = args.resolve(model, gpu)
    resolved.parallel.check_model(model)
    return resolved


def run_simulation(spec: SimulationSpec) -> SimulationResult:
    """Simulate ``spec`` to completion (every request finished or refused)."""
    args = spec.engine
    if spec.sglang is None and args.enable_prefix_caching and not args.enable_chunked_prefill \
            and load_model_spec(args.model).num_linear_attention_layers:     # (--engine sglang refuses them)
        raise ValueError(gdn_simulation_error(args))
    where = "--engine sglang" if spec.sglang is not None else f"--architecture {spec.architecture}"
    if (spec.sglang is not None or spec.architecture == "afd") and load_model_spec(args.model).block_pattern:
        raise ValueError(f"{args.model} (Mamba2 hybrid) with {where} is not simulated; its blocks are simulated on "
                         "vLLM engines, co-located or P/D")
    if spec.workload.dataset_name in SESSION_DATASETS and (spec.sglang is not None or spec.architecture == "afd"):
        raise ValueError(f"--dataset-name {spec.workload.dataset_name} (multi-round sessions) with {where} is not "
                         "simulated; its sessions run on vLLM engines, co-located or P/D")
    if spec.workload.lora_modules and spec.sglang is not None:
        raise ValueError("--lora-modules with --engine sglang: LoRA adapters are simulated on co-located vLLM engines "
                         "only")
    if spec.engine.enable_lora and (spec.sglang is not None or spec.architecture != "colocated"):
        raise ValueError(f"--enable-lora with {where} is not simulated; LoRA adapters are simulated on co-located "
                         "vLLM engines")
    if spec.workload.lora_modules and not spec.engine.enable_lora:
        raise ValueError(f"--lora-modules {' '.join(spec.workload.lora_modules)}: the server needs --enable-lora to "
                         "serve adapters (vLLM answers 404 for an unknown model name)")
    if spec.sglang is not None:
        from simulator.sglang_run import run_sglang
        return run_sglang(spec)
    if spec.architecture == "afd" and spec.engine.speculative_config is not None:
        raise ValueError("--speculative-config under --architecture afd is not simulated yet; "
                         "use --architecture colocated or pdd")
    if spec.architecture == "pdd":
        from simulator.pd_proxy import run_pdd
        return run_pdd(spec)
    if spec.architecture == "afd":
        from simulator.afd import run_afd
        return run_afd(spec)
    resolved = resolve_engine(spec.engine)
    args = resolved.args
    memory = build_memory(resolved)
    resolved = fit_max_model_len(resolved, memory)
    if memory.block_size != resolved.block_size:     # a Gated DeltaNet model's attention block, aligned
        resolved = dataclasses.replace(resolved, block_size=memory.block_size)
    if args.prefill_schedule_interval != 1 and resolved.lockstep_dp:
        raise ValueError("--prefill-schedule-interval with MoE DP ranks: vLLM coordinates that cadence across the "
                         "DP ranks (its DP prefill throttle), which is not simulated; use it with DP 1 or a dense model")
    if args.num_gpu_blocks_override is None:
        memory.check_starts(resolved.max_model_len,
                            more_memory="--gpu-memory-utilization, the parallel size or --kv-cache-memory-bytes")
    spec.check_num_gpus([("colocated", resolved.num_gpus)])
    cudagraph = resolved.cudagraph_config()
    cost_model = make_cost_model(resolved.gpu, spec.comm_model, spec.predictor_bundle)
    engine = BatchEngine(resolved.model, resolved.parallel, resolved.gpu, cost_model,
                         cudagraph, moe_router=make_router(spec.moe_routing, resolved.model, resolved.parallel,
                                                           spec.workload.seed, resolved.gpu.gpus_per_node),
                         all2all_backend=args.all2all_backend, vllm_version=resolved.vllm_version,
                         spec=args.speculative_config, draft_model=resolved.draft_model, lora=args.lora)
    sched_config = resolved.scheduler_config(debug=spec.debug)
    loop = EventLoop()
    trace = BatchTrace(keep_requests=spec.keep_batch_trace)
    schedulers: list[Scheduler] = []

    def new_scheduler() -> Scheduler:
        kv = resolved.kv_cache_manager(memory.num_gpu_blocks, memory.layout)
        sched = Scheduler(sched_config, kv)
        if args.speculative_config is not None:
            sched.accept_drafts = engine_acceptance(args.speculative_config, len(schedulers))
        schedulers.append(sched)
        return sched

    lora = args.lora
    copy_s = adapter_copy_s(resolved.model, resolved.parallel, lora, resolved.gpu.host_bw_bytes_per_s) if lora else 0.0

    def new_replica(i: int, sched: Scheduler | LockstepRanks) -> Replica:
        return Replica(i, loop, sched, engine, trace, on_update=lambda *a: None,
                       async_scheduling=args.effective_async_scheduling, step_jitter=spec.step_jitter,
                       engine_cpu=spec.engine_cpu,
                       jitter_seed=spec.workload.seed, adapters=AdapterCache(lora) if lora else None,
                       adapter_copy_s=copy_s)

    dp = args.data_parallel_size
    admission = (Admission(args.max_num_queued_reqs, args.max_num_queued_tokens)
                 if args.max_num_queued_reqs is not None or args.max_num_queued_tokens is not None else None)
    if resolved.lockstep_dp:    # MoE: the DP ranks of a replica step together
        replicas = [new_replica(i, LockstepRanks([new_scheduler() for _ in range(dp)], resolved.vllm_version))
                    for i in range(args.num_replicas)]
        cluster = Cluster(Role.COLOCATED, replicas, args.router, resolved.num_gpus // len(replicas),
                          admission=admission)
    else:                       # dense: every DP rank is an independent engine, a server's DP LB picks it
        replicas = [new_replica(i, new_scheduler()) for i in range(args.num_replicas * dp)]
        cluster = Cluster(Role.COLOCATED, replicas, args.router, resolved.num_gpus // len(replicas),
                          dp_ranks=dp, vllm_version=resolved.vllm_version, admission=admission)
    specs, sessions = generate_workload(spec.workload, vocab_size=resolved.model.vocab_size)
    specs = layout_images(specs, resolved.model, resolved.image_limit)
    client = BenchmarkClient(loop, specs, cluster, resolved.max_model_len, spec.max_concurrency, sessions)
    records, summary, sim_wall_s = run_client(loop, client, spec, len(specs))
    summary.update(cost_model_stats(cost_model))
    summary["pricing_notes"] = pricing_notes([engine])
    if args.speculative_config is not None:
        summary.update(schedulers_stats(schedulers, resolved.num_spec_tokens))
    if args.enable_prefix_caching:
        summary.update(prefix_cache_summary(schedulers))
    summary.update(encoder_summary(specs, schedulers))
    if lora is not None:    # the adapters' copies into GPU slots (priced) and reads from disk (not priced)
        summary["lora_gpu_loads"] = sum(r.adapters.gpu_loads for r in replicas)
        summary["lora_disk_loads"] = sum(r.adapters.disk_loads for r in replicas)
        summary["lora_adapter_copy_ms"] = copy_s * 1e3
    engines = {Role.COLOCATED.value: resolved.num_engines}
    summary.update(role_summary(trace.step_cols, engines, loop.now_s))
    return SimulationResult(resolved, memory, records, client.failed, trace, summary,
                            loop.now_s, sim_wall_s, loop.num_events, role_engines=engines)
