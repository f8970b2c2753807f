"""P/D disaggregated serving: the benchmark client behind vLLM's disaggregated-prefill proxy.

Per request (engine-semantics.md §5.2, NixlConnector, pull mode)::

    client ─▶ proxy ─▶ P engine (router: round_robin | least_loaded), max_tokens=1,
                       remote_decode: blocks kept at finish
             P finishes (its one token is discarded by the proxy)
           ─▶ proxy ─▶ D engine (router: round_robin | least_loaded | kv_aware), full max_tokens,
                       remote_prefill: blocks for the whole prompt at admission
             D admits it (schedule()) ──▶ KV transfer starts (simulator.kv_transfer)
             last byte lands ──▶ D: finish_remote_kv (promoted at its next schedule())
                             └─▶ P: finish_sending_kv (blocks freed, P may admit more)
             D's 1-token step produces the client's first token; D decodes the rest.

TTFT is D's first token. Not modelled: the proxy's HTTP hops (P's response and the D
request are instantaneous), P's block lease timeout (blocks are held until the read,
however long D takes to admit), and the step granularity at which a D worker reports a
finished read (the request is ready for the first schedule() after the last byte).

MoE roles with DP > 1 (``simulator.dp_group``): the routers pick a replica, the replica's
least-loaded DP rank takes the request (vLLM's DP load balancer), and the route records
that engine (``replica x dp + rank``): its link, and the rank told about the finished read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.cluster import Cluster, Role
from simulator.control_plane import (CompiledRole, KvPull, PddSpec, build_links, compile_role,
                                     kv_pull)
from simulator.predictor_cost import cost_model_stats, make_cost_model
from simulator.batch_engine import BatchEngine, pricing_notes
from simulator.dp_group import LockstepRanks
from simulator.engine_args import ResolvedEngine
from simulator.events import EventLoop
from simulator.kv_transfer import Link, SharedLinkTransfers, TransferModel
from simulator.metrics import RequestRecord
from simulator.moe_routing import make_router as make_moe_router
from simulator.replica import Replica
from simulator.router import KvAwareRouter, LeastLoadedRouter
from simulator.role_stats import role_summary
from simulator.request import Request, RequestSpec
from simulator.scheduler import Scheduler
from simulator.scheduler_config import UpdateResult
from simulator.spec_decode import schedulers_stats
from simulator.simulation import (BenchmarkClient, SimulationResult, SimulationSpec, _InFlight, prefix_cache_summary,
                                  run_client)
from simulator.trace import BatchTrace
from simulator.multimodal import encoder_summary, layout_images
from simulator.workload import generate_workload
from simulator.workloads.sessions import Session


def _num_ranks(cluster: Cluster) -> int:
    """DP ranks per replica: a lockstep group's size, 1 for an engine of its own."""
    sched = cluster.replicas[0].scheduler
    return len(sched.ranks) if isinstance(sched, LockstepRanks) else 1


def prefill_prefix_cache(prefill) -> dict:
    """The prefill role's prefix cache counters (vLLM's prefix_cache_hits / queries summed over its
    engines and DP ranks) with prefix_cache_scope "prefill role", or {} without prefix caching.
    Only prefill engines look prompts up; the decode side allocates the pulled KV."""
    if not prefill.resolved.args.enable_prefix_caching:
        return {}
    ranks = [s for r in prefill.cluster.replicas
             for s in (r.scheduler.ranks if isinstance(r.scheduler, LockstepRanks) else [r.scheduler])]
    return {**prefix_cache_summary(ranks), "prefix_cache_scope": "prefill role"}


def _rank_of(replica: Replica, request_id: str) -> int:
    sched = replica.scheduler
    return sched.rank_of(request_id) if isinstance(sched, LockstepRanks) else 0


def _rank_scheduler(replica: Replica, rank: int) -> Scheduler:
    sched = replica.scheduler
    return sched.ranks[rank] if isinstance(sched, LockstepRanks) else sched


@dataclass(slots=True)
class _Route:
    """Engines of one request (``replica x dp + rank``, as ``control_plane.build_links`` numbers them)."""

    prefill: int
    prefill_request: Request
    decode: int = -1
    transfer_start_s: float = 0.0
    transfer_end_s: float = 0.0


class PDProxy(BenchmarkClient):
    """``BenchmarkClient`` whose requests go P -> KV transfer -> D (module docstring)."""

    def __init__(self, loop: EventLoop, specs: list[RequestSpec], prefill: Cluster, decode: Cluster,
                 transfers: TransferModel, links: list[list[Link]], pull: KvPull,
                 max_model_len: int, max_concurrency: int | None, debug: bool = False,
                 sessions: list[Session] | None = None) -> None:
        super().__init__(loop, specs, decode, max_model_len, max_concurrency, sessions)
        self.prefill, self.decode = prefill, decode
        self.transfers, self.links, self.pull = transfers, links, pull
        self.routes: dict[str, _Route] = {}
        self._p_dp, self._d_dp = _num_ranks(prefill), _num_ranks(decode)
        for replica in prefill.replicas:
            replica.on_update = self._on_prefill_update
        # Every P request goes through _submit and every P finish through _on_prefill_update:
        # a least_loaded P router keeps the loads instead of polling each P replica per request.
        self._p_index = {id(replica): i for i, replica in enumerate(prefill.replicas)}
        self._p_follow = isinstance(prefill.router, LeastLoadedRouter)
        if self._p_follow:
            prefill.router.follow(prefill.replicas, verify=debug)
        if isinstance(decode.router, KvAwareRouter) and not any(
                isinstance(r.scheduler, LockstepRanks) for r in decode.replicas):
            decode.router.read_free_blocks([r.scheduler.kv.pool.free_queue for r in decode.replicas], verify=debug)
        for replica in decode.replicas:
            replica.on_remote_kv = self._on_remote_kv
        # multi-round sessions: the P and D replicas of each session's first round (session affinity:
        # P holds its earlier prompts' blocks, D its earlier rounds' whole sequences)
        self._session_routes: dict[str, list[int]] = {}

    def _submit(self, spec: RequestSpec, state: _InFlight) -> None:
        route = self._session_routes.get(spec.session_id) if spec.session_id else None
        if route is None:
            p = self.prefill.router.pick(self.prefill.replicas)
            if spec.session_id:
                self._session_routes[spec.session_id] = [p, -1]
        else:
            p = route[0]
            if self._p_follow:
                self.prefill.router.took(p)
        replica = self.prefill.replicas[p]
        req = replica.add_request(replace(spec, output_len=1), remote_decode=True)
        self.routes[spec.request_id] = _Route(p * self._p_dp + _rank_of(replica, spec.request_id), req)

    def _on_prefill_update(self, replica: Replica, result: UpdateResult, now_s: float) -> None:
        if self._p_follow and result.finished_request_ids:
            self.prefill.router.finished(self._p_index[id(replica)], len(result.finished_request_ids))
        for rid in result.finished_request_ids:      # P's token is discarded; send to D
            route = self.routes[rid]
            state = self.in_flight[rid]
            session = self._session_routes.get(state.spec.session_id) if state.spec.session_id else None
            if session is not None and session[1] >= 0:
                d = session[1]
            else:
                d = self.decode.router.pick(self.decode.replicas)
                if session is not None:
                    session[1] = d
            replica = self.decode.replicas[d]
            self._track(state, replica.add_request(state.spec, remote_prefill=True))
            route.decode = d * self._d_dp + _rank_of(replica, rid)

    def _on_remote_kv(self, replica: Replica, request_ids: tuple[str, ...]) -> None:
        """D admitted these requests with blocks for their prompt: start pulling their KV."""
        now = self.loop.now_s
        for rid in request_ids:
            route = self.routes[rid]
            r = self.in_flight[rid].request
            nbytes = self.pull.num_bytes(max(r.num_cached_tokens, 0), r.num_computed_tokens)  # D's hit stays
            route.transfer_start_s = now
            self.transfers.start(rid, self.links[route.prefill][route.decode],
                                 nbytes, lambda rid=rid: self._on_transferred(rid))

    def _on_transferred(self, rid: str) -> None:
        route = self.routes[rid]
        route.transfer_end_s = self.loop.now_s
        d_replica, d_rank = divmod(route.decode, self._d_dp)
        d = self.decode.replicas[d_replica]
        _rank_scheduler(d, d_rank).finish_remote_kv(rid)
        d.wake()
        p_replica, p_rank = divmod(route.prefill, self._p_dp)
        p = self.prefill.replicas[p_replica]
        _rank_scheduler(p, p_rank).finish_sending_kv(rid)
        p.wake()

    def _make_record(self, rid: str, state: _InFlight, **fields) -> RequestRecord:
        route = self.routes.pop(rid)
        p_req = route.prefill_request
        return super()._make_record(
            rid, state, prefill_replica=route.prefill, decode_replica=route.decode,
            kv_transfer_s=route.transfer_end_s - route.transfer_start_s,
            kv_transfer_start_s=route.transfer_start_s,
            num_preemptions=state.request.num_preemptions + p_req.num_preemptions,
            num_prefix_hit_tokens=max(p_req.num_cached_tokens, 0), **fields)


def _roles_cost_model_stats(cost_models: list) -> dict[str, int | str]:
    """The summary's cost-model keys over the roles' cost models (query counts added up)."""
    out: dict[str, int | str] = {}
    for cm in cost_models:
        for key, value in cost_model_stats(cm).items():
            if isinstance(value, str):
                out[key] = value if out.get(key, value) == value else f"{out[key]}+{value}"
            else:
                out[key] = int(out.get(key, 0)) + value
    return out


def _engine_factory(spec: SimulationSpec):
    def make_engine(resolved: ResolvedEngine) -> BatchEngine:
        cudagraph = resolved.cudagraph_config()
        return BatchEngine(resolved.model, resolved.parallel, resolved.gpu,
                           make_cost_model(resolved.gpu, spec.comm_model, spec.predictor_bundle),
                           cudagraph, moe_router=make_moe_router(spec.moe_routing, resolved.model,
                                                                 resolved.parallel, spec.workload.seed,
                                                                 resolved.gpu.gpus_per_node),
                           all2all_backend=resolved.args.all2all_backend, vllm_version=resolved.vllm_version,
                           spec=resolved.args.speculative_config, draft_model=resolved.draft_model)
    return make_engine


def run_pdd(spec: SimulationSpec) -> SimulationResult:
    """Simulate ``spec`` with ``--architecture pdd`` to completion."""
    pdd = spec.pdd or PddSpec()
    loop = EventLoop()
    trace = BatchTrace(keep_requests=spec.keep_batch_trace)
    make_engine = _engine_factory(spec)
    roles = [compile_role(layout, spec.engine, loop, trace, make_engine, debug=spec.debug,
                          step_jitter=spec.step_jitter, seed=spec.workload.seed, engine_cpu=spec.engine_cpu)
             for layout in (pdd.prefill, pdd.decode)]
    prefill, decode = roles
    spec.check_num_gpus([("prefill", prefill.num_gpus), ("decode", decode.num_gpus)])
    if prefill.resolved.max_model_len != decode.resolved.max_model_len:
        raise ValueError(f"prefill max_model_len {prefill.resolved.max_model_len} differs from decode's "
                         f"{decode.resolved.max_model_len}; give --max-model-len")
    model = decode.resolved.model
    specs, sessions = generate_workload(spec.workload, vocab_size=model.vocab_size)
    specs = layout_images(specs, model, min(prefill.resolved.image_limit, decode.resolved.image_limit))
    client = PDProxy(loop, specs, prefill.cluster, decode.cluster, SharedLinkTransfers(loop),
                     build_links(prefill, decode, pdd), kv_pull(model, prefill, decode),
                     decode.resolved.max_model_len, spec.max_concurrency, debug=spec.debug, sessions=sessions)
    records, summary, sim_wall_s = run_client(loop, client, spec, len(specs))
    summary.update(pdd_summary(roles, records))
    summary.update(_roles_cost_model_stats([role.cluster.replicas[0].engine.cost_model for role in roles]))
    summary["pricing_notes"] = pricing_notes(role.cluster.replicas[0].engine for role in roles)
    if decode.resolved.args.speculative_config is not None:     # the decode role verifies the drafts
        summary.update(schedulers_stats([r.scheduler for r in decode.cluster.replicas], decode.resolved.num_spec_tokens))
    summary.update(prefill_prefix_cache(prefill))
    summary.update(encoder_summary(specs, [s for r in prefill.cluster.replicas for s in (   # the prefill role
        r.scheduler.ranks if isinstance(r.scheduler, LockstepRanks) else [r.scheduler])]))  # encodes (D pulls KV)
    engines = {Role.PREFILL.value: prefill.resolved.num_engines, Role.DECODE.value: decode.resolved.num_engines}
    summary.update(role_summary(trace.step_cols, engines, loop.now_s))
    return SimulationResult(decode.resolved, decode.memory, records, client.failed, trace, summary,
                            loop.now_s, sim_wall_s, loop.num_events, roles=roles, role_engines=engines)


def pdd_summary(roles: list[CompiledRole], records: list[RequestRecord]) -> dict[str, float | int | str]:
    """Extra summary keys of a P/D run: GPUs per role and KV-transfer times (ms)."""
    prefill, decode = roles
    xfer = np.asarray([r.kv_transfer_s for r in records] or [0.0]) * 1000
    return {
        "architecture": "pdd",
        "num_prefill_gpus": prefill.num_gpus,
        "num_decode_gpus": decode.num_gpus,
        "num_gpus": prefill.num_gpus + decode.num_gpus,
        "mean_kv_transfer_ms": float(np.mean(xfer)),
        "p99_kv_transfer_ms": float(np.percentile(xfer, 99)),
    }
