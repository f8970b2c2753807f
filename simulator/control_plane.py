"""Control plane of prefill/decode disaggregation: role layouts compile into a P and a D cluster.

``--architecture pdd`` (DESIGN.md §2) turns one serving spec into two clusters:

    role P (prefill): engines with kv_role "producer": a request runs its prompt with
        max_tokens=1 and keeps its blocks until D has read them;
    role D (decode):  engines with kv_role "consumer": a request is admitted with blocks for
        its whole prompt, waits for the pull, then decodes (simulator.scheduler docstring).

Each role has its own layout (``--prefill-tp/-pp/-dp/-replicas/-gpu``, likewise
``--decode-*``; unset = the main flags), so its own engine args, vLLM defaults (which
depend on the GPU), memory budget, KV cache and batch engine; the GPUs of the two
roles may differ. The cross-role dependency is an explicit event: the KV transfer
(``simulator.kv_transfer``) over a ``Link`` per (P engine, D engine) pair.

DP inside a role: a dense role's DP ranks are independent engines (``replicas x dp``
replicas); an MoE role with DP > 1 (``ResolvedEngine.lockstep_dp``) has ``replicas``
replicas whose DP ranks step in lockstep (``simulator.dp_group``), exactly as the
co-located architecture runs them: each rank is an engine with its own scheduler, KV
cache and connector, a rank with nothing to run adds a dummy batch, the step lasts as
long as the slowest rank, and the replica's requests go to its least-loaded rank.
Either way engines are numbered replica-major (``replica x dp + rank``) for the links
and the records' ``prefill_replica`` / ``decode_replica``.

Placement (for the link medium): when both roles use the same GPU type, their GPUs
are numbered in one pool, P engines first, then D engines, each engine on
consecutive GPUs, ``gpus_per_node`` GPUs per node. A pair whose GPUs all sit in one
node talks over NVLink (``nvlink_bw_bytes_per_s``), any other pair over the network
(``network_bw_bytes_per_s``, the slower NIC of the two GPU types). Ports are per
engine and medium, so an engine's concurrent transfers share its NVLink or its NIC.

Bytes per transferred token (``kv_pull``): every GPU of the pair moves
its own shard in parallel. As vLLM's NixlConnector maps TP ranks
(``nixl/tp_mapping.py``): with tp_D >= tp_P each D rank reads its heads from one P
rank; with tp_D < tp_P each D rank reads from several P ranks; MLA latents are
replicated, one P rank serves each D rank. Either way the busiest GPU moves
``max(kv per token per rank of P, of D)`` bytes (GQA replication when tp > KV heads
and the worst PP stage are inside ``ModelSpec.kv_bytes_per_token_per_rank``), so
that is the size priced per transfer. With vLLM's hybrid KV groups on D (a model with
sliding-window layers), the sliding-window layers move only the tokens of the window's blocks.
A Gated DeltaNet model (Qwen3.5) moves its full-attention layers' KV of all but the prompt's last
token (NixlConnector's one-token backoff, ``simulator.scheduler``) and each GDN layer's state once
a request (``KvPull.state_bytes``, the larger side's shard). With a drafter the draft layer's KV
moves too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from frontier.model_spec import ModelSpec, pp_partition
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine
from simulator.cluster import Cluster, Role
from simulator.dp_group import LockstepRanks
from simulator.engine_args import EngineArgs, ResolvedEngine
from simulator.engine_cpu import EngineCpu
from simulator.events import EventLoop
from simulator.spec_decode import engine_acceptance, with_draft_layer
from simulator.kv_cache.hybrid import skipped_tokens
from simulator.kv_transfer import Link
from simulator.memory import MemoryBudget
from simulator.replica import Replica
from simulator.scheduler import Scheduler
from simulator.trace import BatchTrace

ARCHITECTURES = ("colocated", "pdd")
PREFILL_ROUTERS = ("round_robin", "least_loaded")
DECODE_ROUTERS = ("round_robin", "least_loaded", "kv_aware")
DEFAULT_KV_TRANSFER_LATENCY_S = 1e-4    # placeholder per-transfer floor (read setup + notification)


@dataclass(frozen=True)
class RoleLayout:
    """One role's parallel layout and batch limits (each role is its own ``vllm serve``);
    ``None`` = the main flag's value."""

    name: str                       # "prefill" | "decode" (for messages and flag names)
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    replicas: int | None = None
    gpu: str | None = None
    router: str | None = None
    max_num_seqs: int | None = None             # the role's --max-num-seqs
    max_num_batched_tokens: int | None = None   # the role's --max-num-batched-tokens

    def __post_init__(self) -> None:
        if self.name not in ("prefill", "decode"):
            raise ValueError(f"role {self.name!r} is not prefill or decode")
        for key in ("tp", "pp", "dp", "replicas", "max_num_seqs", "max_num_batched_tokens"):
            value = getattr(self, key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"--{self.name}-{key.replace('_', '-')} must be a positive integer, got {value!r}")
        routers = PREFILL_ROUTERS if self.name == "prefill" else DECODE_ROUTERS
        if self.router is not None and self.router not in routers:
            raise ValueError(f"--{self.name}-router {self.router!r} is not one of {', '.join(routers)}")

    def is_default(self) -> bool:
        return all(getattr(self, k) is None for k in ("tp", "pp", "dp", "replicas", "gpu", "router",
                                                      "max_num_seqs", "max_num_batched_tokens"))

    def engine_args(self, main: EngineArgs) -> EngineArgs:
        return replace(
            main,
            tensor_parallel_size=self.tp or main.tensor_parallel_size,
            pipeline_parallel_size=self.pp or main.pipeline_parallel_size,
            data_parallel_size=self.dp or main.data_parallel_size,
            num_replicas=self.replicas or main.num_replicas,
            gpu=self.gpu or main.gpu,
            max_num_seqs=self.max_num_seqs or main.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens or main.max_num_batched_tokens)


@dataclass(frozen=True)
class PddSpec:
    """The P/D part of a serving spec: both role layouts and the KV-transfer link model."""

    prefill: RoleLayout = field(default_factory=lambda: RoleLayout("prefill"))
    decode: RoleLayout = field(default_factory=lambda: RoleLayout("decode"))
    kv_transfer_bandwidth_bytes_per_s: float | None = None    # None: NVLink / network of the GPUs
    kv_transfer_latency_s: float = DEFAULT_KV_TRANSFER_LATENCY_S

    def __post_init__(self) -> None:
        if self.prefill.name != "prefill" or self.decode.name != "decode":
            raise ValueError("PddSpec needs RoleLayout('prefill') and RoleLayout('decode')")
        bw = self.kv_transfer_bandwidth_bytes_per_s
        if bw is not None and not bw > 0:
            raise ValueError(f"--kv-transfer-bandwidth must be > 0 GB/s, got {bw / 1e9!r}")
        if not self.kv_transfer_latency_s >= 0:
            raise ValueError(f"--kv-transfer-latency-ms must be >= 0, got {self.kv_transfer_latency_s * 1e3!r}")


@dataclass
class CompiledRole:
    """One compiled role: its resolved engine, memory budget and cluster."""

    layout: RoleLayout
    resolved: ResolvedEngine
    memory: MemoryBudget
    cluster: Cluster

    @property
    def num_gpus(self) -> int:
        return self.resolved.num_gpus


@dataclass(frozen=True)
class KvPull:
    """What a P->D pull moves on the busiest GPU (module docstring), in bytes per pulled token:
    every layer's KV (``full_bytes_per_token``), or, when the decode side keeps vLLM's hybrid KV
    groups, the full-attention layers' for every token and the sliding-window (or, ``chunked``,
    Llama 4's chunked) layers' (``sliding_bytes_per_token``, window or chunk ``window``) only for
    the tokens in the blocks D holds for that window or the last chunk: D leaves the blocks
    before it null (`allocate_external_computed_blocks`), so the connector reads nothing into
    them."""

    full_bytes_per_token: int
    sliding_bytes_per_token: int = 0
    window: int = 0
    block_size: int = 16
    chunked: bool = False       # the local layers attend within chunks of `window` tokens (Llama 4)
    state_bytes: int = 0        # a request's Gated DeltaNet states (every GDN layer's conv + temporal state)

    def num_bytes(self, hit: int, total: int) -> int:
        """Bytes of a pull of tokens [hit, total) (D's local prefix hit is not pulled), and of the
        request's Gated DeltaNet states (NixlConnector reads each GDN group's state block)."""
        n = (total - hit) * self.full_bytes_per_token + self.state_bytes
        if self.window:
            start = skipped_tokens(total, self.window, self.chunked) // self.block_size * self.block_size
            n += max(0, total - max(hit, start)) * self.sliding_bytes_per_token
        return n


def kv_pull(model: ModelSpec, prefill: CompiledRole, decode: CompiledRole) -> KvPull:
    """The pull of a P->D pair: the larger of the two sides' per-token KV shard for each kind of
    layer (worst pp stage), the sliding window's split only when D's KV manager is hybrid. With a
    drafter the draft layer's KV moves too, and a draft model's layers' (NixlConnector reads every
    layer of the KV cache)."""
    spec = decode.resolved.args.speculative_config
    if spec is not None:
        model = with_draft_layer(model, spec)
    layout = decode.memory.layout
    hybrid = (layout is not None and layout.local_window > 0
              and decode.resolved.args.speculative_config is None)
    if not hybrid:
        def per_token(role: CompiledRole) -> int:      # a draft model's layers are KV layers too
            draft = role.resolved.draft_model
            return model.kv_bytes_per_token_per_rank(role.resolved.parallel) + (
                draft.kv_bytes_per_token_per_rank(role.resolved.parallel) if draft is not None else 0)
        return KvPull(max(per_token(prefill), per_token(decode)),
                      state_bytes=max(_state_bytes(model, prefill), _state_bytes(model, decode)))

    def split(parallel: ParallelSpec) -> tuple[int, int]:
        """(full, sliding) bytes per token of the worst pp stage's layers on one rank."""
        stages = pp_partition(model.num_layers, parallel.pp)
        k = stages.index(max(stages))
        layers = range(sum(stages[:k]), sum(stages[:k + 1]))
        sliding = sum(1 for i in layers if model.is_sliding_layer(i) or model.is_chunked_layer(i))
        per_layer = model.kv_bytes_per_token_per_layer(parallel.tp)
        return int(round((len(layers) - sliding) * per_layer)), int(round(sliding * per_layer))

    p, d = split(prefill.resolved.parallel), split(decode.resolved.parallel)
    return KvPull(max(p[0], d[0]), max(p[1], d[1]), layout.local_window, layout.block_size,
                  layout.attention_chunk_size > 0)


def _state_bytes(model: ModelSpec, role: CompiledRole) -> int:
    """One request's Gated DeltaNet states on one rank of the role's worst pp stage (its GDN layers x
    ``KVLayout.mamba_state_bytes``, the conv + temporal state of a layer's TP shard); 0 without."""
    layout = role.memory.layout
    if layout is None or not layout.mamba_state_bytes:
        return 0
    return model.most_layers_per_stage(role.resolved.parallel.pp, model.is_linear_attention_layer) \
        * layout.mamba_state_bytes


def compile_role(layout: RoleLayout, main: EngineArgs, loop: EventLoop, trace: BatchTrace,
                 make_engine: Callable[[ResolvedEngine], BatchEngine], *,
                 debug: bool, step_jitter: float, seed: int, engine_cpu: EngineCpu | None = None) -> CompiledRole:
    """Resolve one role's engine args and build its replicas (refusals carry the role's name).

    ``make_engine`` prices the role's steps (its own model shard and GPU).
    """
    from simulator.simulation import build_memory, fit_max_model_len, resolve_engine

    role_flag = f"--{layout.name}"
    try:
        args = layout.engine_args(main)
        resolved = resolve_engine(args)
        memory = build_memory(resolved)
        resolved = fit_max_model_len(resolved, memory)
        if memory.block_size != resolved.block_size:     # a Gated DeltaNet model's attention block, aligned
            resolved = replace(resolved, block_size=memory.block_size)
        sched_config = resolved.scheduler_config(debug=debug)
    except ValueError as exc:
        raise ValueError(f"{layout.name} role: {exc}") from None
    if args.num_gpu_blocks_override is None:
        memory.check_starts(resolved.max_model_len, layout.name,
                            f"{role_flag}-tp, {role_flag}-gpu, --gpu-memory-utilization")
    engine = make_engine(resolved)
    kv_role, role = ("producer", Role.PREFILL) if layout.name == "prefill" else ("consumer", Role.DECODE)

    made: list[Scheduler] = []

    def new_scheduler() -> Scheduler:
        kv = resolved.kv_cache_manager(memory.num_gpu_blocks, memory.layout, connector=True)
        sched = Scheduler(sched_config, kv, kv_role=kv_role)
        if args.speculative_config is not None:     # speculative decoding: the engine's acceptance draws
            sched.accept_drafts = engine_acceptance(args.speculative_config, len(made))
        made.append(sched)
        return sched

    dp = args.data_parallel_size
    if resolved.lockstep_dp:        # MoE: the DP ranks of a replica step together
        scheds: list[Scheduler | LockstepRanks] = [LockstepRanks([new_scheduler() for _ in range(dp)], resolved.vllm_version)
                                                   for _ in range(args.num_replicas)]
    else:                           # dense: every DP rank is an independent engine
        scheds = [new_scheduler() for _ in range(resolved.num_engines)]
    replicas = [Replica(i, loop, s, engine, trace, on_update=lambda *a: None,
                        async_scheduling=args.effective_async_scheduling, step_jitter=step_jitter,
                        jitter_seed=seed, role=role.value, engine_cpu=engine_cpu) for i, s in enumerate(scheds)]
    cluster = Cluster(role, replicas, layout.router or main.router, resolved.num_gpus // len(replicas))
    return CompiledRole(layout, resolved, memory, cluster)


def build_links(prefill: CompiledRole, decode: CompiledRole, spec: PddSpec) -> list[list[Link]]:
    """``links[p][d]``: the path from P engine p to D engine d (module docstring: placement).

    Engines are numbered replica-major: engine ``replica x dp + rank`` (a dense role's
    replicas are its engines, dp 1 each).
    """
    p_res, d_res = prefill.resolved, decode.resolved
    gp, gd = p_res.gpus_per_engine, d_res.gpus_per_engine
    n_p, n_d = p_res.num_engines, d_res.num_engines
    same_type = p_res.gpu.name == d_res.gpu.name
    per_node = p_res.gpu.gpus_per_node
    links: list[list[Link]] = []
    for p in range(n_p):
        row = []
        for d in range(n_d):
            gpus = list(range(p * gp, (p + 1) * gp)) + list(range(n_p * gp + d * gd, n_p * gp + (d + 1) * gd))
            one_node = same_type and len({g // per_node for g in gpus}) == 1
            if spec.kv_transfer_bandwidth_bytes_per_s is not None:
                medium, bw = "link", spec.kv_transfer_bandwidth_bytes_per_s
            elif one_node:
                medium, bw = "nvlink", p_res.gpu.nvlink_bw_bytes_per_s
            else:
                medium = "net"
                bw = min(p_res.gpu.network_bw_bytes_per_s, d_res.gpu.network_bw_bytes_per_s)
            row.append(Link(f"P{p}/{medium}/out", f"D{d}/{medium}/in", bw, spec.kv_transfer_latency_s))
        links.append(row)
    return links
