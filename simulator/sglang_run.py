"""Run one co-located SGLang deployment against one workload (``frontier simulate --engine sglang``).

``--num-replicas`` SGLang servers behind the router, each of ``--data-parallel-size`` TP groups
(SGLang's ``--dp-size``: requests dealt round robin), each group an engine loop
(``simulator.replica``: SGLang's normal loop as the sync loop, its overlap loop, the default, as the
async one) over ``simulator.sglang_scheduler``, pricing steps with the same batch engine and cost
models as vLLM's engines (``simulator.batch_engine``) under SGLang's CUDA graphs
(``simulator.sglang_graphs``) and token pool (``simulator.sglang_layout``). The benchmark client is
``vllm bench serve``'s; SGLang's ``bench_serving`` sends requests with ``ignore_eos`` as the
simulated outputs end, at their lengths.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from simulator.batch_engine import BatchEngine, pricing_notes
from simulator.cluster import Cluster, Role
from simulator.events import EventLoop
from simulator.moe_routing import make_router
from simulator.predictor_cost import cost_model_stats, make_cost_model
from simulator.replica import Replica
from simulator.role_stats import role_summary
from simulator.sglang_layout import SGLANG_VERSION, SglangLayout, resolve_sglang, sglang_parallel
from simulator.sglang_scheduler import SglangScheduler
from simulator.trace import BatchTrace
from simulator.multimodal import refuse_images
from simulator.workload import generate_requests

if TYPE_CHECKING:
    from simulator.engine_args import EngineArgs, ResolvedEngine
    from simulator.sglang_layout import SglangArgs
    from simulator.simulation import SimulationResult, SimulationSpec


def sglang_resolved(args: EngineArgs, sglang: SglangArgs) -> ResolvedEngine:
    """One SGLang TP group's model, GPU and layout: the shared flags resolved as for vLLM (the
    served model's quantization, KV dtype, --language-model-only, which SGLang honours for the
    Qwen ViT's checkpoints) with SGLang's layout (``sglang_parallel``: --ep-size) checked instead of
    vLLM's; ``args`` kept whole (its --data-parallel-size counts TP groups)."""
    model = load_model_spec(args.model)
    if args.language_model_only and model.vision_modalities != ("image", "video"):
        raise ValueError(f"--language-model-only: SGLang 0.5.23 skips the vision tower of Qwen3-VL and Qwen3.5 "
                         f"checkpoints only (models/qwen3_vl.py, qwen3_5.py), not {model.name}'s")
    resolved = dataclasses.replace(args, data_parallel_size=1).resolve(model, get_gpu(args.gpu))
    return dataclasses.replace(resolved, args=args, parallel=sglang_parallel(sglang, resolved.model,
                                                                             resolved.parallel.tp))


def run_sglang(spec: SimulationSpec) -> SimulationResult:
    """Simulate ``spec`` (``spec.sglang`` set) to completion."""
    from simulator.simulation import BenchmarkClient, SimulationResult, run_client
    if spec.architecture != "colocated":
        raise ValueError(f"--engine sglang simulates co-located servers; --architecture {spec.architecture} is vLLM's here")
    args = spec.engine
    if args.speculative_config is not None:
        raise ValueError("--speculative-config is simulated for --engine vllm only")
    if spec.engine_cpu_overhead:
        raise ValueError("--engine-cpu-overhead prices vLLM's engine core as measured (simulator/engine_cpu.py); "
                         "SGLang's scheduler CPU time is not measured here, so it is not available with --engine sglang")
    # --dp-size (--data-parallel-size): that many TP groups per server, each a whole model, requests
    # dealt round robin (DataParallelController's "auto" without P/D); attention DP is not simulated
    dp = args.data_parallel_size
    if dp > 1 and args.num_replicas > 1 and args.router != "round_robin":
        raise ValueError(f"--router {args.router} over servers of --data-parallel-size {dp}: SGLang deals each server's "
                         "requests round robin over its DP workers, which is simulated only under --router round_robin")
    resolved = sglang_resolved(args, spec.sglang)
    layout = resolve_sglang(spec.sglang, resolved.model, resolved.parallel, resolved.gpu)
    engines_n = args.num_replicas * dp
    spec.check_num_gpus([("colocated", resolved.parallel.tp * engines_n)])
    cost_model = make_cost_model(resolved.gpu, spec.comm_model, spec.predictor_bundle)
    engine = BatchEngine(resolved.model, resolved.parallel, resolved.gpu, cost_model, layout.graphs,
                         moe_router=make_router(spec.moe_routing, resolved.model, resolved.parallel,
                                                spec.workload.seed, resolved.gpu.gpus_per_node),
                         vllm_version=resolved.vllm_version)
    loop = EventLoop()
    trace = BatchTrace(keep_requests=spec.keep_batch_trace)
    overlap = not layout.config.disable_overlap_schedule
    schedulers = [SglangScheduler(layout.config) for _ in range(engines_n)]
    replicas = [Replica(i, loop, s, engine, trace, on_update=lambda *a: None, async_scheduling=overlap,
                        step_jitter=spec.step_jitter, engine_cpu=spec.engine_cpu, jitter_seed=spec.workload.seed)
                for i, s in enumerate(schedulers)]
    # with DP workers the one level of routing is their round robin (a server's --router is moot)
    cluster = Cluster(Role.COLOCATED, replicas, "round_robin" if dp > 1 else args.router, resolved.parallel.tp)
    specs = generate_requests(spec.workload, vocab_size=resolved.model.vocab_size)
    refuse_images(specs, "--engine sglang")
    context = layout.config.context_length
    client = BenchmarkClient(loop, specs, cluster, context, spec.max_concurrency)
    records, summary, sim_wall_s = run_client(loop, client, spec, len(specs))
    summary["async_scheduling"] = overlap
    summary.update(cost_model_stats(cost_model))
    summary["pricing_notes"] = pricing_notes([engine])
    summary.update(sglang_summary(layout, schedulers))
    summary["num_gpus"] = resolved.parallel.tp * engines_n
    engines = {Role.COLOCATED.value: engines_n}
    summary.update(role_summary(trace.step_cols, engines, loop.now_s))
    return SimulationResult(resolved, None, records, client.failed, trace, summary, loop.now_s, sim_wall_s,
                            loop.num_events, role_engines=engines, sglang=layout)


def sglang_summary(layout: SglangLayout, schedulers: list[SglangScheduler]) -> dict:
    """Summary keys of an SGLang run: what it started with (as its log says) and its retractions."""
    c = layout.config
    return {"engine": f"sglang {SGLANG_VERSION}", "sglang_max_total_num_tokens": c.max_total_tokens,
            "sglang_max_running_requests": c.max_running_requests, "sglang_mem_fraction_static": layout.mem_fraction_static,
            "sglang_chunked_prefill_size": c.chunked_prefill_size, "sglang_context_len": c.context_length,
            "sglang_cuda_graph_max_bs": max(layout.graphs.decode_sizes, default=0), "sglang_page_size": c.page_size,
            "sglang_num_retractions": sum(s.num_retractions for s in schedulers)}
