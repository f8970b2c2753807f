"""P/D parity with Gated DeltaNet state groups: test_pd_parity's decode ("consumer") and prefill
("producer") runs with three GDN groups and one full-attention group over one block pool, as
Qwen3.5's KV cache groups are, in both of vLLM's mamba cache modes: "none" (``STATE``, prefix
caching off) and "align" (``STATE_ALIGN``, prefix caching on, vLLM's default: states at block
boundaries, block-aligned prefill chunks; cases named "shared" have prompts sharing prefixes).

vLLM's side is ``vllm_pd_driver.run_vllm_pd(..., kv_groups=...)``: its real scheduler with
``KVCacheCoordinatorNoPrefixCache`` / ``HybridKVCacheCoordinator`` over ``MambaManager`` and
``FullAttentionManager``, and ``HMAPullConnector`` with NixlConnector's one-token backoff for mamba
groups (the prefill side's prompt loses its last token; the decode side loads all but the last and
recomputes it). The mirror's is the simulator's ``StateKVCacheManager`` / ``AlignStateKVCacheManager``
behind its P/D scheduler paths. Schedules and free blocks after every update_from_output must be
equal step by step (``test_pd_parity.assert_pd_parity``).
"""

from __future__ import annotations

import random

import pytest
from test_pd_parity import _ACCEPT, assert_pd_parity, make_requests, pd_knobs, recomputed_locally, run_mirror

from simulator.request import RequestSpec
from simulator.scheduler_trace import STATE, STATE_ALIGN

QWEN35 = (STATE, STATE, STATE, 0)
QWEN35_ALIGN = (STATE_ALIGN, STATE_ALIGN, STATE_ALIGN, 0)

CASES = [
    # (name, side, seed, n, prompt range, output range, num_gpu_blocks, extra knobs)
    ("decode_state_budget_256", "decode", 301, 30, (1, 900), (1, 60), 3000, {"max_num_batched_tokens": 256}),
    ("decode_state_budget_2048", "decode", 302, 30, (16, 900), (1, 60), 3000, {"max_num_batched_tokens": 2048}),
    # tight: the state blocks count at admission; decode requests are preempted and recomputed locally
    ("decode_state_tight", "decode", 303, 30, (50, 600), (20, 200), 160, {}),
    ("decode_state_reservation_threshold_64", "decode", 304, 30, (200, 1500), (50, 300), 260,
     {"max_num_batched_tokens": 1024, "long_prefill_token_threshold": 64}),
    ("prefill_state_budget_2048", "prefill", 305, 30, (1, 900), (1, 1), 3000, {"max_num_batched_tokens": 2048}),
    # tight: admission waits for blocks (state ones included) held until finished_sending
    ("prefill_state_tight_budget_256", "prefill", 306, 30, (50, 900), (1, 1), 220, {"max_num_batched_tokens": 256}),
]
# the "align" mode (prefix caching on, vLLM's default): states at block boundaries, block-aligned chunks
ALIGN_CASES = [
    ("decode_align_budget_256", "decode", 311, 30, (1, 900), (1, 60), 3000, {"max_num_batched_tokens": 256}),
    ("decode_align_budget_2048", "decode", 312, 30, (16, 900), (1, 60), 3000, {"max_num_batched_tokens": 2048}),
    ("decode_align_tight", "decode", 313, 30, (50, 600), (20, 200), 160, {}),
    ("decode_align_reservation_threshold_64", "decode", 314, 30, (200, 1500), (50, 300), 260,
     {"max_num_batched_tokens": 1024, "long_prefill_token_threshold": 64}),
    ("prefill_align_budget_2048", "prefill", 315, 30, (1, 900), (1, 1), 3000, {"max_num_batched_tokens": 2048}),
    ("prefill_align_tight_budget_256", "prefill", 316, 30, (50, 900), (1, 1), 220, {"max_num_batched_tokens": 256}),
    # shared prefixes: hits on states and blocks a pull registered (not before it lands) or a prefill kept
    ("decode_align_shared", "decode", 317, 30, (100, 900), (1, 60), 3000, {"max_num_batched_tokens": 512}),
    ("decode_align_shared_tight", "decode", 318, 30, (100, 600), (20, 200), 200, {}),
    ("prefill_align_shared", "prefill", 319, 30, (100, 900), (1, 1), 3000, {"max_num_batched_tokens": 512}),
]
# an MTP-like drafter of k = 2 drafts (the driver's EAGLE drafter, whose layer joins the
# full-attention group, as Qwen3.5's MTP layer does): "none" mode 1 + k state blocks a request and
# group; "align" mode (names with "align") k speculative blocks at the table's end, and behind the
# connector EAGLE's block drop (legacy hashes): hits one block shorter, checkpoints one block lower
SPEC_CASES = [
    ("spec_decode_state", "decode", 321, 30, (16, 600), (1, 60), 3000, {}),
    ("spec_decode_state_tight", "decode", 322, 30, (16, 600), (20, 200), 200, {}),
    ("spec_prefill_state", "prefill", 323, 30, (16, 600), (1, 1), 3000, {}),
    ("spec_prefill_state_tight", "prefill", 324, 30, (16, 600), (1, 1), 160, {}),
    ("spec_decode_align", "decode", 331, 30, (16, 600), (1, 60), 3000, {}),
    ("spec_decode_align_tight", "decode", 11, 30, (16, 600), (20, 200), 200, {}),
    ("spec_decode_align_shared", "decode", 333, 30, (100, 900), (1, 60), 3000, {"max_num_batched_tokens": 512}),
    ("spec_decode_align_shared_tight", "decode", 334, 30, (100, 600), (20, 200), 220, {}),
    ("spec_prefill_align", "prefill", 335, 30, (16, 600), (1, 1), 3000, {}),
    ("spec_prefill_align_tight", "prefill", 336, 30, (16, 600), (1, 1), 160, {}),
    ("spec_prefill_align_shared", "prefill", 337, 30, (100, 900), (1, 1), 3000, {"max_num_batched_tokens": 512}),
]
SHARED_PREFIXES = 3     # the cases named "shared": prompts start with one of 3 prefixes
_BY_NAME = {case[0]: case for case in CASES + ALIGN_CASES + SPEC_CASES}


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pd_state_paths_match_vllm(case, async_scheduling) -> None:
    name, side, seed, n, prompt, output, blocks, extra = case
    requests = make_requests(seed, n, prompt, output)
    expected = assert_pd_parity(name, requests, side=side, num_gpu_blocks=blocks, kv_groups=QWEN35,
                                **pd_knobs(async_scheduling, **extra))
    assert len({rid for step in expected[0] for rid in step}) == n


def shared_requests(seed: int, n: int, prompt: tuple[int, int], output: tuple[int, int]) -> list[RequestSpec]:
    """``make_requests``' lengths, the prompts starting with one of SHARED_PREFIXES random prefixes
    (up to half the longest prompt), the rest of each prompt its own tokens."""
    rng = random.Random(seed)
    prefixes = [tuple(rng.randrange(1, 50_000) for _ in range(rng.randint(prompt[0], prompt[1] // 2)))
                for _ in range(SHARED_PREFIXES)]
    out = []
    for i, r in enumerate(make_requests(seed, n, prompt, output)):
        prefix = rng.choice(prefixes)[:r.prompt_len]
        ids = prefix + tuple(100_000 + i * 10_000 + j for j in range(r.prompt_len - len(prefix)))
        out.append(RequestSpec(r.request_id, 0.0, r.prompt_len, r.output_len, prompt_token_ids=ids))
    return out


def _requests(name: str, seed: int, n: int, prompt: tuple[int, int], output: tuple[int, int]) -> list[RequestSpec]:
    return (shared_requests if "shared" in name else make_requests)(seed, n, prompt, output)


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", ALIGN_CASES, ids=[c[0] for c in ALIGN_CASES])
def test_pd_align_state_paths_match_vllm(case, async_scheduling) -> None:
    name, side, seed, n, prompt, output, blocks, extra = case
    requests = _requests(name, seed, n, prompt, output)
    expected = assert_pd_parity(name, requests, side=side, num_gpu_blocks=blocks, kv_groups=QWEN35_ALIGN,
                                **pd_knobs(async_scheduling, enable_prefix_caching=True, **extra))
    assert len({rid for step in expected[0] for rid in step}) == n


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_pd_spec_state_paths_match_vllm(case, async_scheduling) -> None:
    import vllm_pd_driver

    name, side, seed, n, prompt, output, blocks, extra = case
    align = "align" in name
    groups = QWEN35_ALIGN if align else QWEN35
    knobs = pd_knobs(async_scheduling, enable_prefix_caching=align, **extra)
    requests = _requests(name, seed, n, prompt, output)
    spec = dict(num_speculative_tokens=2, accepted=_ACCEPT["mixed"])
    expected = vllm_pd_driver.run_vllm_pd(requests, side=side, num_gpu_blocks=blocks, kv_groups=groups, **spec,
                                          **knobs)
    actual = run_mirror(requests, side=side, num_gpu_blocks=blocks, kv_groups=groups, **spec, **knobs)
    assert actual[0] == expected[0], f"{name}: schedules differ"
    assert actual[1] == expected[1], f"{name}: free blocks differ"
    if side == "decode":
        assert any(d for step in expected[0] for _, d in step.values()), f"{name}: no drafts verified"
    if "tight" in name:     # guards: the pool runs out
        assert min(expected[1]) == 0 or side == "prefill" and min(expected[1]) < 30, f"{name}: the pool never ran low"


def _run_vllm(name: str, async_scheduling: bool, kv_groups):
    import vllm_pd_driver

    _, side, seed, n, prompt, output, blocks, extra = _BY_NAME[name]
    caching = {"enable_prefix_caching": True} if STATE_ALIGN in kv_groups else {}
    return vllm_pd_driver.run_vllm_pd(_requests(name, seed, n, prompt, output), side=side, num_gpu_blocks=blocks,
                                      kv_groups=kv_groups, **pd_knobs(async_scheduling, **caching, **extra))


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_prefill_side_computes_all_but_the_last_prompt_token(async_scheduling) -> None:
    # Guards the backoff: vLLM's prefill instance schedules N - 1 tokens of an N-token prompt.
    name = "prefill_state_budget_2048"
    _, _, seed, n, prompt, output, _, _ = _BY_NAME[name]
    lengths = {r.request_id: r.prompt_len for r in make_requests(seed, n, prompt, output)}
    trace, _ = _run_vllm(name, async_scheduling, QWEN35)
    scheduled: dict[str, int] = {}
    for step in trace:
        for rid, tokens in step.items():
            scheduled[rid] = scheduled.get(rid, 0) + tokens
    assert scheduled == {rid: max(length - 1, 1) for rid, length in lengths.items()}


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name, groups", [("decode_state_tight", QWEN35), ("decode_align_tight", QWEN35_ALIGN),
                                          ("decode_align_shared_tight", QWEN35_ALIGN)])
def test_tight_state_decode_cases_preempt(name, groups, async_scheduling) -> None:
    # Guards the tight decode cases: a tight case that never preempts tests nothing.
    trace, free = _run_vllm(name, async_scheduling, groups)
    assert recomputed_locally(trace), f"{name}: no decode request was preempted and recomputed locally"
    assert min(free) == 0, f"{name}: the pool never ran out"


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("name, groups", [("decode_state_tight", QWEN35), ("prefill_state_tight_budget_256", QWEN35),
                                          ("decode_align_tight", QWEN35_ALIGN),
                                          ("prefill_align_tight_budget_256", QWEN35_ALIGN)])
def test_state_groups_change_vllm_schedules(name, groups, async_scheduling) -> None:
    # Guards the tight cases: the state groups must reach vLLM's scheduler, or the cases are
    # test_pd_parity's (one full-attention group, no backoff).
    state = _run_vllm(name, async_scheduling, groups)
    plain = _run_vllm(name, async_scheduling, ())
    assert state[0] != plain[0] and state[1] != plain[1]
