"""Multi-LoRA serving (``simulator.lora``): slots in the budget, the batch limit, hashes, kernels.

The scheduler's --max-loras rule is checked against vLLM's own scheduler in
tests/oracle/test_lora_parity.py; these tests check the rest against vLLM's formulas by hand.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from frontier.cli import app
from frontier.model_spec import load_model_spec
from frontier.ops import LoraOp
from frontier.parallel import ParallelSpec
from simulator.batch_engine import BatchEngine, BatchShape
from simulator.comm.backend import make_comm_backend
from simulator.cost_model import RooflineCostModel
from simulator.engine_args import EngineArgs
from simulator.lora import (AdapterCache, LoraConfig, adapter_copy_s, lora_head_ops, lora_layer_ops,
                            slot_bytes_per_rank)
from simulator.memory import cuda_graph_bytes
from simulator.request import Request, RequestSpec
from simulator.scheduler_config import SchedulerConfig
from simulator.scheduler_trace import run_scheduler_only
from simulator.simulation import SimulationSpec, build_memory, resolve_engine, run_simulation
from simulator.spec_decode import SpecDecodeConfig
from simulator.workload import WorkloadSpec, generate_requests

LLAMA = load_model_spec("meta-llama/Llama-3.1-8B")


def test_the_slots_are_vllms_lora_buffers():
    # one rank-16 slot at TP 2, per decoder layer (create_lora_weights): qkv A 3 x 16 x 4096 (whole)
    # + B (2048 + 2 x 512) x 16 (its shard); o A 16 x 2048 (shard) + B 4096 x 16; gate_up A 2 x 16 x 4096
    # + B 2 x 7168 x 16; down A 16 x 7168 + B 4096 x 16: 884,736 elements x 32 layers; embedding and
    # lm_head each 128,256 x 16 + 4096 x 16; 2 bytes an element
    per_layer = (3 * 16 * 4096 + 3072 * 16) + (16 * 2048 + 4096 * 16) + (2 * 16 * 4096 + 2 * 7168 * 16) + (
        16 * 7168 + 4096 * 16)
    assert per_layer == 884736
    expected = 2 * (32 * per_layer + 2 * (128256 * 16 + 4096 * 16))
    assert slot_bytes_per_rank(LLAMA, ParallelSpec(tp=2), LoraConfig(1, 16)) == expected == 65093632
    assert slot_bytes_per_rank(LLAMA, ParallelSpec(tp=1), LoraConfig(4, 64)) == 1477705728
    # pipeline stages: the worst stage holds its layers' slots and the embedding's or the lm_head's
    pp2 = slot_bytes_per_rank(LLAMA, ParallelSpec(tp=2, pp=2), LoraConfig(1, 16))
    assert pp2 == 2 * (16 * per_layer + 128256 * 16 + 4096 * 16)


def test_the_slots_and_twice_the_graphs_come_off_the_kv_budget():
    plain = build_memory(resolve_engine(EngineArgs()))
    lora = resolve_engine(EngineArgs(enable_lora=True, max_loras=4, max_lora_rank=64))
    m = build_memory(lora)
    assert m.weights_bytes - plain.weights_bytes == 1477705728
    graphs = lora.cudagraph_config()
    assert m.cuda_graph_bytes == cuda_graph_bytes(LLAMA, lora.parallel, graphs, lora_cases=2) == 480247808
    assert plain.cuda_graph_bytes == cuda_graph_bytes(LLAMA, lora.parallel, graphs) == 266338304
    assert (plain.num_gpu_blocks, m.num_gpu_blocks) == (28746, 27939)
    res = CliRunner().invoke(app, ["memory", "--enable-lora", "--max-loras", "4", "--max-lora-rank", "64"])
    assert res.exit_code == 0, res.output
    assert "of which LoRA slots              1.38 GiB" in res.output and "num_gpu_blocks                    27939" in res.output


def test_a_lora_kernel_reads_every_adapters_weights_once():
    shrink = LoraOp("qkv_proj_lora_shrink", "shrink", 10, 4096, 6144, 16, 3, 2)
    assert shrink.flops == 2 * 10 * 4096 * 16 * 3
    assert shrink.bytes_moved == 2 * 3 * 16 * 4096 * 2 + 10 * 4096 * 2 + 10 * 16 * 3 * 4 == 870272
    expand = LoraOp("qkv_proj_lora_expand", "expand", 10, 4096, 6144, 16, 3, 2)
    assert expand.bytes_moved == 2 * 16 * 6144 * 2 + 10 * 16 * 3 * 4 + 2 * 10 * 6144 * 2 == 640896
    with pytest.raises(ValueError, match="LoraOp.kind='x'"):
        LoraOp("y", "x", 1, 1, 1, 1, 1, 1)


def test_a_step_with_adapters_pays_their_kernels():
    r = resolve_engine(EngineArgs(enable_lora=True, max_loras=4))
    cost = RooflineCostModel(r.gpu, make_comm_backend("analytical", r.gpu))
    engine = BatchEngine(r.model, r.parallel, r.gpu, cost, r.cudagraph_config(), lora=r.args.lora)
    plain = BatchEngine(r.model, r.parallel, r.gpu, cost, r.cudagraph_config())
    new, ctx = (1,) * 8, tuple(range(100, 900, 100))
    base = engine.step_cost(BatchShape(new, ctx)).duration_s
    assert base == plain.step_cost(BatchShape(new, ctx)).duration_s      # base-model requests only: no kernels
    two = engine.step_cost(BatchShape(new, ctx, num_loras=2))
    decoder = lora_layer_ops(r.model, 1, two.padded_tokens, 2, 16, 2.0)
    head = lora_head_ops(r.model, 8, 2, 16, 2.0)
    assert len(decoder) == 9 and decoder[0][1] == 32
    timing = "kernel" if two.cudagraph_mode == "FULL" else "launch"
    expected = sum(t * n for t, (_, n) in zip(cost.op_times_s([op for op, _ in decoder], timing), decoder)) + sum(
        t * n for t, (_, n) in zip(cost.op_times_s([op for op, _ in head], "launch"), head))
    assert two.duration_s - base == pytest.approx(expected, rel=1e-12)
    assert engine.step_cost(BatchShape(new, ctx, num_loras=4)).duration_s > two.duration_s
    assert any("punica kernels" in n for n in engine.pricing_notes)


def test_the_adapter_cache_is_vllms_two_lrus():
    # 2 GPU slots, 3 CPU slots (LRUCacheWorkerLoRAManager): a step's adapters are read from disk when
    # the CPU cache lacks them and copied into the least recently used GPU slot when the slots lack them;
    # leaving the CPU cache frees the GPU slot too
    cache = AdapterCache(LoraConfig(max_loras=2, max_cpu_loras=3))
    assert cache.apply((1, 2)) == (2, 2)
    assert cache.apply((1,)) == (0, 0)          # 1 is now the most recent in both
    assert cache.apply((3,)) == (1, 1)          # slot of 2 (least recent) taken; CPU holds 1, 2, 3
    assert cache.apply((2,)) == (1, 0)          # in the CPU cache: a copy, no read; slot of 1 taken
    assert cache.apply((4,)) == (1, 1)          # CPU drops 1 (least recent): holds 3, 2, 4; slot of 3 taken
    # 1 from disk again (CPU drops 3) into 2's slot, then 3 from disk (CPU drops 2) into 4's slot
    assert cache.apply((1, 3)) == (2, 2)
    assert (cache.gpu_loads, cache.disk_loads) == (7, 6)
    assert cache.apply((2,)) == (1, 1)          # CPU dropped 2: from disk; CPU drops 4, 2 takes 1's slot
    # a copy: one slot's bytes over the host link at 80 %: Llama-3.1-8B rank 16 at TP 1 on an H100
    one_slot = slot_bytes_per_rank(LLAMA, ParallelSpec(tp=1), LoraConfig(1, 16))
    assert adapter_copy_s(LLAMA, ParallelSpec(tp=1), LoraConfig(4, 16), 64e9) == one_slot / 51.2e9
    assert one_slot == 92356608 and adapter_copy_s(LLAMA, ParallelSpec(tp=1), LoraConfig(4, 16), 0.0) == 0.0


def _sched(max_loras: int):
    return SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=512, max_model_len=1024, async_scheduling=False,
                           enable_prefix_caching=False, max_loras=max_loras)


def test_a_waiting_request_of_another_adapter_waits_while_max_loras_run():
    # adapters 1, 2, 1, base, 3: with max_loras 1, r1 and r4 wait behind r0's adapter (skipped in place,
    # the later ones admitted); the base-model request never waits for an adapter
    reqs = [RequestSpec(f"r{i}", 0.0, 32, 4, lora_id=a) for i, a in enumerate((1, 2, 1, 0, 3))]
    steps = run_scheduler_only(reqs, _sched(1), 200)
    assert steps[0] == {"r0": 32, "r2": 32, "r3": 32}
    assert [set(s) for s in steps[:8]].index({"r1"}) == 4 and steps[-1] == {"r4": 1}
    assert run_scheduler_only(reqs, _sched(3), 200)[0] == {"r0": 32, "r1": 32, "r2": 32, "r3": 32, "r4": 32}


def test_adapters_never_share_cached_blocks():
    ids = tuple(range(1, 65))
    base, a1, a1_again, a2 = (Request.from_spec(RequestSpec(f"r{i}", 0.0, 64, 4, prompt_token_ids=ids, lora_id=a), 16)
                              for i, a in enumerate((0, 1, 1, 2)))
    assert a1.block_hashes == a1_again.block_hashes
    assert not set(a1.block_hashes) & set(a2.block_hashes) and not set(base.block_hashes) & set(a1.block_hashes)


def test_requests_draw_their_adapters_as_vllm_bench_serve_assigns_them():
    spec = WorkloadSpec(num_prompts=10, lora_modules=("a", "b", "c"))
    assert [r.lora_id for r in generate_requests(spec)] == [3, 2, 1, 1, 3, 3, 2, 3, 3, 2]     # seed 0
    rr = WorkloadSpec(num_prompts=5, lora_modules=("a", "b"), lora_assignment="round-robin")
    assert [r.lora_id for r in generate_requests(rr)] == [1, 2, 1, 2, 1]
    assert {r.lora_id for r in generate_requests(WorkloadSpec(num_prompts=5))} == {0}
    for bad, message in [({"lora_modules": ("a", "a")}, "names an adapter twice"),
                         ({"lora_modules": "ab"}, "need adapter names"),
                         ({"lora_assignment": "lru"}, "valid: random, round-robin")]:
        with pytest.raises(ValueError, match=message):
            WorkloadSpec(**bad)


def _run(engine: EngineArgs, **workload):
    return run_simulation(SimulationSpec(engine=engine, workload=WorkloadSpec(
        dataset_name="random", num_prompts=60, request_rate=20.0, random_input_len=500, random_output_len=60,
        **workload), debug=True, keep_batch_trace=True))


def test_fewer_adapter_slots_than_adapters_queue_the_requests():
    eight = ("a", "b", "c", "d", "e", "f", "g", "h")
    plain = _run(EngineArgs(max_model_len=4096))
    two = _run(EngineArgs(max_model_len=4096, enable_lora=True, max_loras=2), lora_modules=eight)
    eight_slots = _run(EngineArgs(max_model_len=4096, enable_lora=True, max_loras=8), lora_modules=eight)
    assert two.summary["completed"] == eight_slots.summary["completed"] == 60
    assert two.summary["mean_ttft_ms"] > 2 * eight_slots.summary["mean_ttft_ms"]
    assert eight_slots.summary["mean_tpot_ms"] > plain.summary["mean_tpot_ms"]      # the kernels
    # copies into GPU slots are priced (1.80 ms each on an H100's PCIe 5.0 link), disk reads counted
    s = two.summary
    assert s["lora_adapter_copy_ms"] == pytest.approx(1e3 * 92356608 / 51.2e9, rel=1e-12)
    assert s["lora_gpu_loads"] >= 8 and s["lora_disk_loads"] >= 8
    # no step runs more than two adapters (the batch trace: one row per scheduled request and step)
    lora_of = {r.request_id: r.lora_id for r in generate_requests(WorkloadSpec(
        dataset_name="random", num_prompts=60, request_rate=20.0, random_input_len=500, random_output_len=60,
        lora_modules=eight))}
    cols = two.trace.req_cols
    per_step: dict[int, set[int]] = {}
    for step, rid in zip(cols["step"], cols["request_id"]):
        per_step.setdefault(step, set()).add(lora_of[rid])
    assert max(len(a) for a in per_step.values()) == 2


@pytest.mark.parametrize("engine, workload, message", [
    (dict(model="Qwen/Qwen3-30B-A3B", enable_lora=True), {}, "Qwen/Qwen3-30B-A3B's mixture-of-experts layers"),
    (dict(model="Qwen/Qwen3.5-27B", enable_lora=True), {}, "Gated DeltaNet layers is not simulated"),
    (dict(enable_lora=True, speculative_config=SpecDecodeConfig("eagle", 2, (0.5,))), {},
     "--enable-lora with --speculative-config is not simulated"),
    (dict(max_loras=4), {}, "need --enable-lora"),
    (dict(enable_lora=True, pipeline_parallel_size=2), {}, "--enable-lora with pipeline parallelism is not simulated"),
    (dict(enable_lora=True, max_lora_rank=24), {}, "--max-lora-rank 24 is not one of 1, 8, 16"),
    (dict(enable_lora=True, max_loras=4, max_cpu_loras=2), {}, r"--max-cpu-loras \(2\) must be >= --max-loras \(4\)"),
    ({}, dict(lora_modules=("a",)), "--lora-modules a: the server needs --enable-lora"),
])
def test_lora_setups_that_are_not_simulated_are_one_line(engine, workload, message):
    with pytest.raises(ValueError, match=message):
        _run(EngineArgs(max_model_len=4096, **engine), **workload)


def test_lora_outside_colocated_vllm_is_refused():
    for kwargs, message in [({"architecture": "pdd"}, "--enable-lora with --architecture pdd is not simulated")]:
        with pytest.raises(ValueError, match=message):
            run_simulation(SimulationSpec(engine=EngineArgs(max_model_len=4096, enable_lora=True),
                                          workload=WorkloadSpec(num_prompts=5), **kwargs))
    res = CliRunner().invoke(app, ["simulate", "--engine", "sglang", "--enable-lora", "--num-prompts", "5"])
    assert res.exit_code == 2 and "--enable-lora is a vLLM flag" in res.output


def test_the_cli_serves_adapters():
    res = CliRunner().invoke(app, ["simulate", "--max-model-len", "4096", "--num-prompts", "30", "--request-rate", "10",
                                   "--enable-lora", "--max-loras", "2", "--lora-modules", "sql-lora,chat-lora other",
                                   "--lora-assignment", "round-robin"])
    assert res.exit_code == 0, res.output
    assert "note: LoRA: the adapters' punica kernels" in res.output and "Successful requests:" in res.output
    assert "LoRA: 3 adapter copies into GPU slots (1.80 ms each), 3 reads from disk (not priced)" in res.output


def test_a_scenario_file_lists_the_adapters(tmp_path):
    (tmp_path / "s.yaml").write_text("num_prompts: 12\nmax_model_len: 4096\nenable_lora: true\nmax_loras: 2\n"
                                     "lora_modules: [sql, chat, code]\nlora_assignment: round-robin\n")
    res = CliRunner().invoke(app, ["simulate", "--config", str(tmp_path / "s.yaml")])
    assert res.exit_code == 0, res.output
    assert "LoRA: 3 adapter copies into GPU slots" in res.output


def test_requests_parquet_names_each_requests_adapter(tmp_path):
    import pyarrow.parquet as pq
    res = CliRunner().invoke(app, ["simulate", "--max-model-len", "4096", "--num-prompts", "6", "--enable-lora",
                                   "--max-loras", "2", "--lora-modules", "a,b", "--lora-assignment", "round-robin",
                                   "--output-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    table = pq.read_table(tmp_path / "requests.parquet").to_pydict()
    assert dict(zip(table["request_id"], table["lora_id"])) == {"0": 1, "1": 2, "2": 1, "3": 2, "4": 1, "5": 2}
    plain = CliRunner().invoke(app, ["simulate", "--num-prompts", "3", "--output-dir", str(tmp_path / "p")])
    assert plain.exit_code == 0 and "lora_id" not in pq.read_table(tmp_path / "p" / "requests.parquet").column_names


def test_a_trace_names_each_requests_adapter(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_time_s": 0, "prompt_len": 100, "output_len": 20, "lora": "sql"}\n'
                     '{"arrival_time_s": 0.1, "prompt_len": 100, "output_len": 20}\n'
                     '{"arrival_time_s": 0.2, "prompt_len": 100, "output_len": 20, "lora": "chat"}\n'
                     '{"arrival_time_s": 0.3, "prompt_len": 100, "output_len": 20, "lora": "sql"}\n')
    spec = WorkloadSpec(dataset_name="trace", dataset_path=str(trace), num_prompts=4)
    assert [r.lora_id for r in generate_requests(spec)] == [1, 0, 2, 1]       # by first appearance
    with pytest.raises(ValueError, match="the trace names the requests' LoRA adapters"):
        generate_requests(WorkloadSpec(dataset_name="trace", dataset_path=str(trace), num_prompts=4,
                                       lora_modules=("a",)))
    # one slot: sql, chat, sql again are three copies into it
    res = CliRunner().invoke(app, ["simulate", "--dataset-name", "trace", "--dataset-path", str(trace),
                                   "--num-prompts", "4", "--enable-lora", "--max-loras", "1"])
    assert res.exit_code == 0, res.output
    assert "LoRA: 3 adapter copies into GPU slots" in res.output
    for flags, message in [([], "error: request '0' runs LoRA adapter 1, but the engine serves none: add --enable-lora"),
                           (["--engine", "sglang"], "error: request '0' runs a LoRA adapter: LoRA is simulated on vLLM")]:
        bad = CliRunner().invoke(app, ["simulate", "--dataset-name", "trace", "--dataset-path", str(trace),
                                       "--num-prompts", "4", *flags])
        assert bad.exit_code == 2 and bad.output.startswith(message), bad.output
    trace.write_text('{"arrival_time_s": 0, "prompt_len": 100, "output_len": 20, "lora": 3}\n')
    with pytest.raises(ValueError, match="trace row 0: lora=3 is not an adapter name"):
        generate_requests(WorkloadSpec(dataset_name="trace", dataset_path=str(trace), num_prompts=1))
