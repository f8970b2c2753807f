"""Parity with image requests: our scheduler mirror schedules tokens and encoder inputs as vLLM 0.33's does.

Each case is a seeded workload of requests whose prompts end in 0-3 image runs (placeholder runs
of a given length, of which a given number are embeddings, Qwen-style = all of them, Gemma-style
= all but 2 marker tokens each side), through vLLM's real Scheduler / AsyncScheduler (the
``vllm_driver``'s tiny model, its encoder budget and ``EncoderCacheManager`` set to the case's
budget after construction, as a multimodal model's ``MultiModalBudget`` would; every request's
``mm_features`` the runs, ``MultiModalFeatureSpec``) and through our ``Scheduler``
(``SchedulerConfig.encoder_budget``, ``RequestSpec.mm_inputs``). Every step's scheduled tokens
and encoder inputs (request id, item index) must be equal, in order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pytest
from test_parity import Case, _knobs, first_difference

from simulator.encoder_cache import MmInput
from simulator.request import RequestSpec

IMAGE_PAD = 151_655     # the token id of an image's run in vLLM's prompt (any id: only equality matters)


@dataclass(frozen=True)
class MmCase(Case):
    encoder_budget: int = 1024
    run_lengths: tuple[int, ...] = (64, 200, 880)   # an image's run is one of these (tokens)
    markers: int = 0                                # marker tokens each side inside a run (Gemma 3: 2)
    images: tuple[int, int] = (0, 3)                # images per request, inclusive range
    shared_images: int = 0                          # > 0: images drawn from this many shared contents
    disable_chunked_mm_input: bool = False


CASES = [   # encoder budgets as vLLM sets them: max(max_num_batched_tokens, the largest item's embeddings)
    MmCase("qwen_sync", 61, 30, (16, 300), (1, 40), 3000, encoder_budget=880),
    MmCase("qwen_async", 62, 30, (16, 300), (1, 40), 3000, encoder_budget=880, async_scheduling=True),
    MmCase("gemma_markers_budget_256", 63, 30, (16, 300), (1, 40), 3000, max_num_batched_tokens=256,
           encoder_budget=256, run_lengths=(260,), markers=2, images=(1, 3)),
    MmCase("tight_encoder_cache_evicts", 64, 30, (16, 200), (1, 30), 3000, max_num_batched_tokens=256,
           encoder_budget=880, run_lengths=(880, 400), images=(1, 2)),
    MmCase("shared_images_prefix_cached", 65, 40, (16, 200), (1, 30), 3000, enable_prefix_caching=True,
           num_shared_prefixes=3, shared_images=3, run_lengths=(200, 300), images=(1, 2), encoder_budget=512),
    MmCase("disable_chunked_mm_input", 66, 30, (16, 300), (1, 40), 3000, max_num_batched_tokens=512,
           encoder_budget=512, run_lengths=(64, 200, 500), disable_chunked_mm_input=True),
    MmCase("tight_blocks_preemption_async", 67, 30, (50, 300), (40, 150), 120, async_scheduling=True,
           encoder_budget=512, run_lengths=(64, 256)),
    MmCase("priority_long_prefill_threshold", 68, 30, (16, 400), (1, 40), 3000, policy="priority",
           priorities=(0, 1, 2), long_prefill_token_threshold=96, encoder_budget=512, run_lengths=(128, 300)),
]


def mm_requests(case: MmCase) -> list[RequestSpec]:
    """The case's requests: test_parity-like text, then 0-3 image runs (explicit ids when prefixes
    are shared: shared images then share their runs' ids and identifiers), seeded."""
    rng = random.Random(case.seed)
    prefixes = [tuple(rng.randrange(1, 50_000) for _ in range(rng.randint(*case.prompt_len)))
                for _ in range(case.num_shared_prefixes)]
    contents = [(f"img{k}", rng.choice(case.run_lengths)) for k in range(case.shared_images)]
    out = []
    for i in range(case.num_requests):
        text = rng.randint(*case.prompt_len)
        items, pos = [], text
        for j in range(rng.randint(*case.images)):
            ident, length = rng.choice(contents) if contents else (f"r{i:03d}/{j}", rng.choice(case.run_lengths))
            items.append(MmInput(pos, length, length - 2 * case.markers, 16 * length, ident))
            pos += length
        ids = None
        if prefixes:
            prefix = rng.choice(prefixes)[:text]
            ids = prefix + tuple(100_000 + i * 10_000 + k for k in range(text - len(prefix)))
            ids += (IMAGE_PAD,) * (pos - text)
        out.append(RequestSpec(f"r{i:03d}", 0.0, pos, rng.randint(*case.output_len),
                               priority=rng.choice(case.priorities), prompt_token_ids=ids, mm_inputs=tuple(items)))
    return out


class _Recorder:
    """The driver's one-token runner, recording each step's tokens and encoder inputs."""

    def __init__(self, vllm_driver, scheduler) -> None:
        self.inner = vllm_driver._OneTokenRunner(scheduler)

    def execute(self, out):
        return self.inner.execute(out)

    def record(self, trace, out) -> None:
        if out.total_num_scheduled_tokens > 0:
            enc = [(rid, k) for rid in out.num_scheduled_tokens for k in out.scheduled_encoder_inputs.get(rid, ())]
            trace.append((dict(out.num_scheduled_tokens), enc))

    def take_draft_token_ids(self):
        return None


def run_vllm(vllm_driver, case: MmCase, requests: list[RequestSpec]):
    import torch
    from vllm import SamplingParams
    from vllm.multimodal.inputs import MultiModalFeatureSpec, PlaceholderRange
    from vllm.v1.core.encoder_cache_manager import EncoderCacheManager
    from vllm.v1.request import Request

    scheduler, hasher = vllm_driver.new_scheduler(num_gpu_blocks=case.num_gpu_blocks,
                                                  disable_chunked_mm_input=case.disable_chunked_mm_input,
                                                  **_knobs(case))
    scheduler.max_num_encoder_input_tokens = case.encoder_budget     # a multimodal model's MultiModalBudget
    scheduler.encoder_cache_manager = EncoderCacheManager(cache_size=case.encoder_budget)
    for index, spec in enumerate(requests):
        ids = list(spec.prompt_token_ids) if spec.prompt_token_ids is not None else \
            vllm_driver._prompt_ids(replace(spec, prompt_token_ids=None), index)
        features = []
        for m in spec.mm_inputs:
            mask = None
            if m.length != m.num_embeds:
                mask = torch.zeros(m.length, dtype=torch.bool)
                mask[m.lead:m.lead + m.num_embeds] = True
            features.append(MultiModalFeatureSpec(None, "image", m.identifier,
                                                  PlaceholderRange(m.offset, m.length, is_embed=mask)))
        scheduler.add_request(Request(
            request_id=spec.request_id, prompt_token_ids=ids,
            sampling_params=SamplingParams(max_tokens=spec.output_len, ignore_eos=True), pooling_params=None,
            arrival_time=0.0, priority=spec.priority, block_hasher=hasher, mm_features=features or None))
    runner = _Recorder(vllm_driver, scheduler)
    if case.async_scheduling:
        return vllm_driver._run_async(scheduler, 200_000, runner=runner)
    return vllm_driver._run_sync(scheduler, 200_000, runner=runner)


def run_mirror(case: MmCase, requests: list[RequestSpec], encoder_budget: int | None = None):
    from simulator.scheduler_config import SchedulerConfig
    from simulator.scheduler_trace import drive, make_scheduler

    config = SchedulerConfig(**_knobs(case), encoder_budget=case.encoder_budget if encoder_budget is None
                             else encoder_budget, disable_chunked_mm_input=case.disable_chunked_mm_input)
    sched = make_scheduler(config, case.num_gpu_blocks)
    for spec in requests:
        sched.add_request(spec)
    trace = []

    def record(out) -> None:
        if out.total_num_scheduled_tokens > 0:
            trace.append((out.as_dict(), list(out.encoder_inputs)))

    drive(sched, on_schedule=record)
    return trace


def _difference(expected, actual) -> str | None:
    tokens = first_difference([s for s, _ in expected], [s for s, _ in actual])
    if tokens is not None:
        return tokens
    for step, ((_, want), (_, got)) in enumerate(zip(expected, actual)):
        if want != got:
            return f"step {step}: encoder inputs vllm {want} vs mirror {got}"
    return None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_mm_mirror_matches_vllm(vllm_driver, case: MmCase) -> None:
    requests = mm_requests(case)
    expected = run_vllm(vllm_driver, case, requests)
    assert sum(len(enc) for _, enc in expected) > 0
    diff = _difference(expected, run_mirror(case, requests))
    assert diff is None, f"{case.name}: {diff}"


def test_the_encoder_bounds_bite(vllm_driver) -> None:
    # Guards the cases: a mirror with a larger encoder budget (and cache) schedules differently
    # from vLLM where the budget binds, and in the shared case vLLM encodes a shared image once
    # for several requests while it stays cached.
    for name in ("qwen_sync", "gemma_markers_budget_256", "tight_encoder_cache_evicts"):
        case = next(c for c in CASES if c.name == name)
        requests = mm_requests(case)
        expected = run_vllm(vllm_driver, case, requests)
        assert _difference(expected, run_mirror(case, requests, encoder_budget=100_000)) is not None, name
    case = next(c for c in CASES if c.name == "shared_images_prefix_cached")
    requests = mm_requests(case)
    expected = run_vllm(vllm_driver, case, requests)
    encoded = sum(len(enc) for _, enc in expected)
    assert encoded < sum(len(r.mm_inputs) for r in requests)
