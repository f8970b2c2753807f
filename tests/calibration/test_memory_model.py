"""Memory rows -> fitted non-KV terms -> bundle manifest -> `frontier memory --predictor-bundle`."""

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from calibration.bundle import read_manifest, save_bundle
from calibration.memory_model import GRAPH_TOKENS, fit_memory_rows, memory_entry, overheads_for
from frontier.cli import app
from frontier.gpu import get_gpu
from frontier.model_spec import load_model_spec
from frontier.parallel import ParallelSpec
from frontier.profile_schema import columns_for, write_profile
from simulator import memory
from simulator.memory import kv_budget

runner = CliRunner()
MIB = 1 << 20
MODEL = "meta-llama/Llama-3.1-8B"


def rows(model=MODEL, tp=1, tokens=(2048, 8192), peak=lambda t: 100 * MIB + 100_000 * t,
         non_torch=(300 * MIB, 340 * MIB), graph=lambda n: 20 * MIB + 50_000 * n, gpu="H100-SXM"):
    """Memory rows in the profile schema, with exactly linear peaks and graph pools."""
    out = []
    for t, nt in zip(tokens, non_torch):
        row = {c: None for c in columns_for("memory")}
        row.update(family="memory", gpu=gpu, source="frontier-profiler", schema_version=1, framework="frontier",
                   model=model, tp=tp, pp=1, ep=1, max_num_batched_tokens=t, weights_bytes=16 * (1 << 30),
                   torch_peak_increase_bytes=None if peak is None else peak(t),
                   non_torch_bytes=nt, cuda_graph_bytes=None if graph is None else graph(min(t, GRAPH_TOKENS)))
        out.append(row)
    return pd.DataFrame(out)


def test_graph_tokens_follow_the_profiler():
    from profiler.memory_run import _GRAPH_TOKENS
    assert GRAPH_TOKENS == _GRAPH_TOKENS


def test_lines_and_median_fitted_exactly():
    df = rows(tokens=(256, 2048, 8192), non_torch=(300 * MIB, 340 * MIB, 900 * MIB))
    [fit] = fit_memory_rows(df)["fits"]
    assert fit["max_num_batched_tokens"] == [256, 2048, 8192]
    assert fit["activation"]["bytes_per_token"] == pytest.approx(100_000)
    assert fit["activation"]["intercept_bytes"] == pytest.approx(100 * MIB, abs=1)
    assert fit["non_torch_bytes"] == 340 * MIB                      # median of three
    # graphs captured at min(T, 512): 256 and 512 tokens
    assert fit["graph_pool"]["bytes_per_token"] == pytest.approx(50_000)
    assert fit["graph_pool"]["intercept_bytes"] == pytest.approx(20 * MIB, abs=1)
    o = overheads_for(fit_memory_rows(df), MODEL.upper(), ParallelSpec())
    assert o.activation_bytes(4096) == 100 * MIB + 409_600_000
    assert o.graph_pool_bytes(512) == 20 * MIB + 25_600_000


def test_one_token_count_gives_a_line_through_the_origin():
    [fit] = fit_memory_rows(rows(tokens=(4096,), non_torch=(500 * MIB,)))["fits"]
    assert fit["activation"] == {"intercept_bytes": 0.0, "bytes_per_token": (100 * MIB + 409_600_000) / 4096}
    assert fit["graph_pool"] == {"intercept_bytes": 0.0, "bytes_per_token": (20 * MIB + 25_600_000) / 512}


def test_unmeasured_terms_stay_estimated():
    entry = fit_memory_rows(rows(peak=None, graph=None, non_torch=(None, None)))
    o = overheads_for(entry, MODEL, ParallelSpec())
    assert (o.activation_bytes(100), o.non_torch_bytes, o.graph_pool_bytes(100)) == (None, None, None)
    assert overheads_for(entry, MODEL, ParallelSpec(tp=2)) is None      # no fit at tp 2
    assert overheads_for(None, MODEL, ParallelSpec()) is None


def test_budget_uses_profiled_terms_and_names_their_source():
    model, gpu, parallel = load_model_spec(MODEL), get_gpu("H100"), ParallelSpec()
    kw = dict(max_num_batched_tokens=8192, max_num_seqs=256)
    estimated = kv_budget(model, parallel, gpu, **kw)
    o = overheads_for(fit_memory_rows(rows()), MODEL, parallel)
    profiled = kv_budget(model, parallel, gpu, profiled=o, **kw)
    assert dict(estimated.sources) == {"weights": "model", "activation": "estimated", "non_torch": "estimated",
                                       "cuda_graph": "estimated"}
    assert dict(profiled.sources) == {"weights": "model", "activation": "profiled", "non_torch": "profiled",
                                      "cuda_graph": "profiled"}
    assert profiled.activation_bytes == 100 * MIB + 100_000 * 8192
    assert profiled.non_torch_bytes == 320 * MIB                         # median of 300 and 340 MiB
    n_graphs = estimated.cuda_graph_bytes - memory.activation_peak_bytes(model, parallel, 512, 0)
    assert profiled.cuda_graph_bytes == 20 * MIB + 50_000 * 512 + n_graphs   # first capture at 512 profiled
    assert profiled.kv_bytes == (profiled.requested_bytes - profiled.weights_bytes - profiled.activation_bytes
                                 - profiled.non_torch_bytes - profiled.cuda_graph_bytes)


def test_bundle_carries_the_entry_and_the_cli_uses_it(tmp_path):
    root, bundle = tmp_path / "profiles", tmp_path / "b.joblib"
    write_profile(rows(), root, "memory", "H100-SXM")
    entry = memory_entry(root, "H100-SXM")
    assert memory_entry(root, "A100-80GB") is None
    save_bundle(bundle, {}, {"gpu": "H100-SXM"}, memory=entry)
    assert read_manifest(bundle)["memory"] == json.loads(json.dumps(entry))
    assert overheads_for(read_manifest(bundle)["memory"], MODEL, ParallelSpec()).non_torch_bytes == 320 * MIB
    res = runner.invoke(app, ["memory", "--model", MODEL, "--max-num-seqs", "256", "--predictor-bundle", str(bundle),
                              "--json"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["sources"]["activation"] == "profiled" and report["non_torch_gib"] == 320 / 1024
    assert report["bundle_note"] is None
    # `frontier evaluate` on it: one line, not a KeyError traceback
    res = runner.invoke(app, ["evaluate", "--bundle", str(bundle)])
    assert res.exit_code == 2 and res.output == (f"error: bundle {bundle} holds profiled memory terms only; `frontier "
                                                 "calibrate` writes the held-out error `frontier evaluate` reports\n")
    res = runner.invoke(app, ["memory", "--model", MODEL, "-tp", "2", "--predictor-bundle", str(bundle)])
    assert res.exit_code == 0 and "(estimated)" in res.output and "(profiled)" not in res.output
    # ... and says why (the estimates used to replace the bundle's terms silently)
    assert res.output.splitlines()[-1] == (f"note: {bundle} has no profiled memory terms for {MODEL} at TP2 PP1 "
                                           "EP1: the activation, non-torch and CUDA-graph terms are vLLM's estimates")
    # terms profiled on another GPU are not applied to this one (they were, silently)
    res = runner.invoke(app, ["memory", "--model", MODEL, "--gpu", "H200", "--predictor-bundle", str(bundle)])
    assert res.exit_code == 2 and res.output == (f"error: --predictor-bundle {bundle} was profiled on H100-SXM, not "
                                                 "H200; its memory terms hold for H100-SXM only\n"), res.output


def test_cpu_profiler_rows_leave_every_term_estimated(tmp_path):
    pytest.importorskip("torch")
    folder = tmp_path / "tiny-llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
        "max_position_embeddings": 512, "tie_word_embeddings": False}))
    grid = tmp_path / "grid.yaml"
    grid.write_text("memory_max_num_batched_tokens: [16, 32]\n")
    out = tmp_path / "profiles"
    res = runner.invoke(app, ["profile", "--model", str(folder / "config.json"), "--families", "memory",
                              "--out", str(out), "--grid", str(grid)])
    assert res.exit_code == 0, res.output
    entry = memory_entry(out, "cpu")
    [fit] = entry["fits"]
    assert (fit["model"], fit["max_num_batched_tokens"]) == ("tiny-llama", [16, 32])
    assert (fit["activation"], fit["non_torch_bytes"], fit["graph_pool"]) == (None, None, None)
    bundle = tmp_path / "cpu.joblib"
    save_bundle(bundle, {}, {"gpu": "cpu"}, memory=entry)
    res = runner.invoke(app, ["memory", "--model", str(folder), "--predictor-bundle", str(bundle), "--json"])
    assert res.exit_code == 0, res.output
    assert set(json.loads(res.output)["sources"].values()) == {"model", "estimated"}


def test_a_profiled_folder_name_matches_the_catalogue_name():
    """`frontier profile --model path/Llama-3.1-8B` records "Llama-3.1-8B"; the simulator asks for
    "meta-llama/Llama-3.1-8B": the same model. Another name or layout does not match."""
    entry = fit_memory_rows(rows(model="Llama-3.1-8B"))
    assert overheads_for(entry, MODEL, ParallelSpec()).non_torch_bytes == 320 * MIB
    assert overheads_for(entry, "LLAMA-3.1-8B", ParallelSpec()).non_torch_bytes == 320 * MIB
    assert overheads_for(entry, "meta-llama/Llama-3.1-70B", ParallelSpec()) is None


def test_multi_gpu_budget_adds_the_communicators_to_a_profiled_non_torch():
    """Memory rows come from one card (collectives stubbed): at TP > 1 the budget adds
    COMMUNICATOR_BYTES (the estimated multi-GPU minus single-GPU non-torch) and says so."""
    model, gpu = load_model_spec(MODEL), get_gpu("H100")
    kw = dict(max_num_batched_tokens=8192, max_num_seqs=256)
    entry = fit_memory_rows(pd.concat([rows(tp=1), rows(tp=2)]))
    one = kv_budget(model, ParallelSpec(), gpu, profiled=overheads_for(entry, MODEL, ParallelSpec()), **kw)
    two = kv_budget(model, ParallelSpec(tp=2), gpu, profiled=overheads_for(entry, MODEL, ParallelSpec(tp=2)), **kw)
    assert memory.COMMUNICATOR_BYTES == int(1.0 * (1 << 30)) - int(0.15 * (1 << 30))
    assert one.non_torch_bytes == 320 * MIB and dict(one.sources)["non_torch"] == "profiled"
    assert two.non_torch_bytes == 320 * MIB + memory.COMMUNICATOR_BYTES
    assert dict(two.sources)["non_torch"] == "profiled + estimated communicators"


def test_a_profiled_forward_below_the_sampler_run_gives_way_to_the_sampler_estimate():
    """The memory run has no sampler run: with 1,024 sequences the sampler's logits (1,024 x
    128,256 x (2 + 4 x 3) bytes) outgrow a profiled forward peak of 500 MiB."""
    model, gpu, parallel = load_model_spec(MODEL), get_gpu("H100"), ParallelSpec()
    o = overheads_for(fit_memory_rows(rows(peak=lambda t: 500 * MIB)), MODEL, parallel)
    low = kv_budget(model, parallel, gpu, profiled=o, max_num_batched_tokens=8192, max_num_seqs=1024)
    assert low.activation_bytes == 8192 * 4096 * 2 + 1024 * 128256 * 14 == memory.sampler_peak_bytes(model, 8192, 1024)
    assert dict(low.sources)["activation"] == "estimated sampler run (above the profiled forward)"
    high = kv_budget(model, parallel, gpu, profiled=o, max_num_batched_tokens=8192, max_num_seqs=16)
    assert high.activation_bytes == 500 * MIB and dict(high.sources)["activation"] == "profiled"
