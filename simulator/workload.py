"""Workload description and request generation, faithful to ``vllm bench serve`` (vLLM 0.33).

    spec = WorkloadSpec(dataset_name="random", num_prompts=100, request_rate=10.0)
    requests = generate_requests(spec, vocab_size=model.vocab_size)

Arrival times follow vLLM's ``get_request`` (see ``workloads/arrivals.py``); lengths and token
ids follow the dataset classes (``workloads/random_dataset.py``, ``workloads/sharegpt.py``,
``workloads/prefix_repetition.py``, ``workloads/random_mm.py``: the random dataset with images);
a trace carries its own arrival times (``workloads/trace.py``); multi-round sessions
(``workloads/sessions.py``) give the client their first rounds, the later ones follow each round's
finish. ``--max-concurrency`` is not a workload property: the simulator applies it as the client's
semaphore.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from simulator.request import RequestSpec
from simulator.workloads.arrivals import RAMP_UP_STRATEGIES, arrival_times_s
from simulator.workloads.prefix_repetition import sample_prefix_repetition_requests
from simulator.workloads.sessions import Session, load_session_trace, sample_reasoning_sessions
from simulator.workloads.random_dataset import length_bounds, sample_random_requests
from simulator.workloads.random_mm import (DEFAULT_BUCKET_CONFIG, DEFAULT_LIMIT_MM_PER_PROMPT, image_item_params,
                                           parse_bucket_config, parse_limit_mm_per_prompt, sample_random_mm)
from simulator.workloads.sharegpt import sample_sharegpt_requests
from simulator.workloads.trace import load_trace

DATASETS = ("random", "sharegpt", "trace", "prefix_repetition", "reasoning", "session_trace", "random-mm")
SESSION_DATASETS = ("reasoning", "session_trace")     # multi-round sessions (workloads/sessions.py)
LORA_ASSIGNMENTS = ("random", "round-robin")     # vllm bench serve --lora-assignment


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require_ints(spec: object, names: tuple[str, ...], minimum: int) -> None:
    """Refuse (one line) a field of ``names`` that is not an integer >= ``minimum``."""
    for name in names:
        value = getattr(spec, name)
        if not _is_int(value) or value < minimum:
            raise ValueError(f"{name}={value!r} is invalid; need an integer >= {minimum}")


@dataclass(frozen=True)
class WorkloadSpec:
    """One benchmark workload, named after ``vllm bench serve`` flags (defaults are vLLM's).

    dataset_name: "random" | "sharegpt" | "trace" | "prefix_repetition" | "reasoning" | "session_trace"
        (multi-round sessions from ``dataset_path``, ``workloads/sessions.load_session_trace``) |
        "random-mm" (the random dataset's text, then images: ``workloads/random_mm.py``).
    num_prompts: requests to generate (trace: the first ``num_prompts`` rows).
    request_rate: mean arrivals per second; ``inf`` sends everything at t = 0 (ignored for traces).
    burstiness: gamma shape of the inter-arrival gaps (1 = Poisson, < 1 burstier, ``inf`` = constant).
    seed: seeds the arrival process and the dataset sampling, as ``--seed`` does.
    random_input_len / random_output_len / random_range_ratio / random_prefix_len: the random
        dataset; lengths uniform in [L(1-r), L(1+r)], plus a prefix shared by every request.
    sharegpt_output_len: overrides every ShareGPT output length (``--sharegpt-output-len``).
    dataset_path: the trace file (required for "trace"), or a ShareGPT JSON replacing the
        packaged one; not allowed with "random" (vLLM rejects it too).
    prefix_repetition_prefix_len / _suffix_len / _num_prefixes / _output_len: the prefix_repetition
        dataset (``workloads/prefix_repetition.py``): num_prefixes shared prefixes, each with
        num_prompts // num_prefixes requests of their own suffix (vLLM's defaults 256, 256, 10, 128).
    disable_shuffle: keep the prefix_repetition requests in generation order (``--disable-shuffle``).
    reasoning_*: the reasoning dataset (``workloads/sessions.py``): ``num_prompts`` multi-round
        sessions arriving as requests do, rounds geometric with mean ``reasoning_rounds`` (at most
        ``reasoning_max_rounds``), a first prompt of ``reasoning_first_input_len`` tokens, each later
        round ``reasoning_round_input_len`` new tokens (a tool's observation), hidden rounds
        ``reasoning_round_output_len`` output tokens, the final answer ``reasoning_answer_len``, and
        ``reasoning_tool_latency_ms`` between rounds; lengths spread by ``random_range_ratio``.
    lora_modules: LoRA adapter names the requests run (``--lora-modules``, as vllm bench serve's:
        each request one of them; empty = the base model); the server registers them in this
        order, so adapter i has vLLM's lora_int_id i + 1.
    lora_assignment: "random" (vllm bench serve's default: each request draws one, seeded by
        ``seed``; vLLM's own draws come from Python's global random state, which is not
        reproduced) or "round-robin" (request i runs adapter i mod n).
    ramp_up_strategy / ramp_up_start_rps / ramp_up_end_rps: vllm bench serve's ramp-up ("linear" or
        "exponential" from start to end requests per second over the run, replacing
        ``request_rate``, which must stay inf: ``workloads/arrivals.py``); None = a fixed rate.
    random_mm_*: the random-mm dataset (vllm bench serve's flags and defaults): images per request
        uniform in [floor(base (1 - r)), ceil(base (1 + r))] (at most the image limit), each of a
        (height, width, 1) bucket drawn with its probability; ``random_mm_limit_mm_per_prompt``
        and ``random_mm_bucket_config`` as vLLM's flags take them (JSON / a Python dict literal),
        or mappings (a scenario file's); None = vLLM's defaults.
    """

    dataset_name: str = "random"
    num_prompts: int = 1000
    request_rate: float = math.inf
    burstiness: float = 1.0
    seed: int = 0
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    sharegpt_output_len: int | None = None
    dataset_path: str | None = None
    prefix_repetition_prefix_len: int = 256
    prefix_repetition_suffix_len: int = 256
    prefix_repetition_num_prefixes: int = 10
    prefix_repetition_output_len: int = 128
    disable_shuffle: bool = False
    reasoning_rounds: float = 4.0
    reasoning_max_rounds: int = 16
    reasoning_first_input_len: int = 4096
    reasoning_round_input_len: int = 1024
    reasoning_round_output_len: int = 200
    reasoning_answer_len: int = 500
    reasoning_tool_latency_ms: float = 500.0
    lora_modules: tuple[str, ...] = ()
    lora_assignment: str = "random"
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: int | None = None
    ramp_up_end_rps: int | None = None
    random_mm_base_items_per_request: int = 1
    random_mm_num_mm_items_range_ratio: float = 0.0
    random_mm_limit_mm_per_prompt: str | dict | None = None
    random_mm_bucket_config: str | dict | None = None

    def __post_init__(self) -> None:
        names = self.lora_modules
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"lora_modules={names!r} is invalid; need adapter names (non-empty strings)")
        object.__setattr__(self, "lora_modules", tuple(names))
        if len(set(self.lora_modules)) != len(self.lora_modules):
            raise ValueError(f"lora_modules={list(self.lora_modules)} names an adapter twice")
        if self.lora_assignment not in LORA_ASSIGNMENTS:
            raise ValueError(f"lora_assignment={self.lora_assignment!r} is invalid; valid: {', '.join(LORA_ASSIGNMENTS)}")
        if self.dataset_name not in DATASETS:
            raise ValueError(f"dataset_name={self.dataset_name!r} is invalid; valid: {', '.join(DATASETS)}")
        _require_ints(self, ("num_prompts",), 1)
        if not isinstance(self.request_rate, (int, float)) or not self.request_rate > 0:
            raise ValueError(f"request_rate={self.request_rate!r} is invalid; need a number > 0 (inf = all at t=0)")
        if not isinstance(self.burstiness, (int, float)) or not self.burstiness > 0:
            raise ValueError(f"burstiness={self.burstiness!r} is invalid; need a number > 0 (inf = constant gaps)")
        if not _is_int(self.seed) or not 0 <= self.seed < 2**32:
            raise ValueError(f"seed={self.seed!r} is invalid; need an integer in [0, 2**32)")
        _require_ints(self, ("random_input_len",), 0)
        _require_ints(self, ("random_output_len",), 1)
        if not isinstance(self.random_range_ratio, (int, float)) or not 0.0 <= self.random_range_ratio < 1.0:
            raise ValueError(f"random_range_ratio={self.random_range_ratio!r} is invalid; need a number in [0, 1)")
        _require_ints(self, ("random_prefix_len",), 0)
        if self.dataset_name == "random":
            low, _ = length_bounds(self.random_input_len, self.random_range_ratio, at_least_one=False)
            if self.random_prefix_len + low < 1:
                raise ValueError(
                    f"random_input_len={self.random_input_len} with random_range_ratio={self.random_range_ratio} "
                    f"and random_prefix_len={self.random_prefix_len} allows an empty prompt; "
                    "need random_prefix_len + floor(random_input_len * (1 - ratio)) >= 1"
                )
        _require_ints(self, ("random_mm_base_items_per_request",), 0)
        self._check_ramp_up()
        if self.dataset_name == "random-mm":
            self.mm_sampling()      # vLLM's checks of the settings, before any request is drawn
        if self.dataset_name in ("random", "prefix_repetition", "reasoning", "random-mm") \
                and self.dataset_path is not None:
            raise ValueError(f"dataset_path={self.dataset_path!r} is not used by dataset_name={self.dataset_name!r}; "
                             "remove it")
        if self.sharegpt_output_len is not None and (
            not _is_int(self.sharegpt_output_len) or self.sharegpt_output_len < 1
        ):
            raise ValueError(
                f"sharegpt_output_len={self.sharegpt_output_len!r} is invalid; need None or an integer >= 1"
            )
        _require_ints(self, ("prefix_repetition_prefix_len", "prefix_repetition_suffix_len"), 0)
        _require_ints(self, ("prefix_repetition_num_prefixes", "prefix_repetition_output_len"), 1)
        if not isinstance(self.disable_shuffle, bool):
            raise ValueError(f"disable_shuffle={self.disable_shuffle!r} is invalid; need true or false")
        if self.dataset_name == "prefix_repetition":
            if self.prefix_repetition_prefix_len + self.prefix_repetition_suffix_len < 1:
                raise ValueError("prefix_repetition_prefix_len + prefix_repetition_suffix_len must be >= 1 "
                                 "(an empty prompt)")
            if self.num_prompts < self.prefix_repetition_num_prefixes:
                raise ValueError(f"num_prompts ({self.num_prompts}) must be >= prefix_repetition_num_prefixes "
                                 f"({self.prefix_repetition_num_prefixes}), as vLLM requires")
        elif self.disable_shuffle:
            raise ValueError(f"disable_shuffle is simulated for dataset_name='prefix_repetition' only, not "
                             f"{self.dataset_name!r}")
        if not isinstance(self.reasoning_rounds, (int, float)) or isinstance(self.reasoning_rounds, bool) \
                or not self.reasoning_rounds >= 1:
            raise ValueError(f"reasoning_rounds={self.reasoning_rounds!r} is invalid; need a mean >= 1")
        _require_ints(self, ("reasoning_max_rounds", "reasoning_first_input_len", "reasoning_round_input_len",
                             "reasoning_round_output_len", "reasoning_answer_len"), 1)
        t = self.reasoning_tool_latency_ms
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 <= t < math.inf:
            raise ValueError(f"reasoning_tool_latency_ms={t!r} is invalid; need a finite number >= 0")
        if self.dataset_name == "trace" and self.dataset_path is None:
            raise ValueError("dataset_name='trace' needs dataset_path (a .jsonl, .csv or .parquet file)")
        if self.dataset_name == "session_trace" and self.dataset_path is None:
            raise ValueError("dataset_name='session_trace' needs dataset_path (a .jsonl, .json or .parquet file of "
                             "sessions)")

    def _check_ramp_up(self) -> None:
        """vllm bench serve's checks of the ramp-up flags (its messages), one line each."""
        strategy, start, end = self.ramp_up_strategy, self.ramp_up_start_rps, self.ramp_up_end_rps
        if strategy is None:
            if start is not None or end is not None:
                raise ValueError("--ramp-up-start-rps / --ramp-up-end-rps need --ramp-up-strategy linear or exponential")
            return
        if strategy not in RAMP_UP_STRATEGIES:
            raise ValueError(f"--ramp-up-strategy {strategy!r} is invalid; valid: {', '.join(RAMP_UP_STRATEGIES)}")
        if self.request_rate != math.inf:
            raise ValueError("When using ramp-up, do not specify --request-rate: the ramp-up parameters set the rate")
        if start is None or end is None:
            raise ValueError("When using --ramp-up-strategy, both --ramp-up-start-rps and --ramp-up-end-rps must be "
                             "specified")
        _require_ints(self, ("ramp_up_start_rps", "ramp_up_end_rps"), 0)
        if start > end:
            raise ValueError(f"--ramp-up-start-rps {start} must not exceed --ramp-up-end-rps {end}")
        if start == 0:
            raise ValueError(f"--ramp-up-start-rps 0 with a {strategy} ramp-up: the first request's rate is 0 "
                             "(vLLM refuses it for exponential, and its linear ramp-up fails an assertion)")

    def arrivals(self) -> list[float]:
        """The ``num_prompts`` arrival times (seconds) of ``vllm bench serve``'s schedule
        (``workloads/arrivals.py``), with the ramp-up when one is set."""
        ramp = None if self.ramp_up_strategy is None else (self.ramp_up_strategy, self.ramp_up_start_rps,
                                                           self.ramp_up_end_rps)
        return arrival_times_s(self.num_prompts, self.request_rate, self.burstiness, self.seed, ramp)

    def mm_sampling(self) -> tuple[dict[str, int] | None, dict[tuple[int, int, int], float] | None]:
        """The random-mm limits and buckets, parsed (None: vLLM's defaults); ValueError (one
        line) for a bad text or setting."""
        limits, buckets = self.random_mm_limit_mm_per_prompt, self.random_mm_bucket_config
        if isinstance(limits, str):
            limits = parse_limit_mm_per_prompt(limits)
        if isinstance(buckets, str):
            buckets = parse_bucket_config(buckets)
        image_item_params(self.random_mm_base_items_per_request, self.random_mm_num_mm_items_range_ratio,
                          DEFAULT_LIMIT_MM_PER_PROMPT if limits is None else limits,
                          DEFAULT_BUCKET_CONFIG if buckets is None else buckets)
        return limits, buckets


def generate_requests(spec: WorkloadSpec, vocab_size: int | None = None) -> list[RequestSpec]:
    """The requests of ``spec`` in arrival order, ``arrival_s`` from the start of the schedule.

    ``vocab_size`` (the model's) is needed only by the random dataset with a shared prefix,
    whose token ids it bounds.  Random prompts without a prefix carry no token ids
    (``prompt_token_ids=None``: unique content); ShareGPT and trace prompts carry real ids
    when available, so prefix caching sees genuine sharing. A session dataset's requests are its
    sessions' first rounds (``generate_workload`` gives the sessions too).
    """
    return generate_workload(spec, vocab_size)[0]


def generate_workload(spec: WorkloadSpec, vocab_size: int | None = None) -> tuple[list[RequestSpec],
                                                                                list[Session] | None]:
    """``generate_requests``' requests and, for a session dataset (SESSION_DATASETS), its sessions,
    generated once: the client sends their later rounds (None for other datasets)."""
    if vocab_size is not None and (not _is_int(vocab_size) or vocab_size < 1):
        raise ValueError(f"vocab_size={vocab_size!r} is invalid; need None or an integer >= 1")
    if spec.dataset_name in SESSION_DATASETS:
        sessions = generate_sessions(spec)
        return assign_loras([s.round_spec(0, s.arrival_s, 0) for s in sessions], spec), sessions
    return assign_loras(_requests(spec, vocab_size), spec), None


def generate_sessions(spec: WorkloadSpec) -> list[Session]:
    """The multi-round sessions of the reasoning dataset or a session trace, in arrival order
    (``workloads/sessions.py``)."""
    if spec.dataset_name == "session_trace":
        return load_session_trace(spec.dataset_path, spec.num_prompts)
    if spec.dataset_name != "reasoning":
        raise ValueError(f"dataset_name={spec.dataset_name!r} has no sessions; only {', '.join(SESSION_DATASETS)}")
    arrivals = spec.arrivals()
    return sample_reasoning_sessions(
        spec.num_prompts, float(spec.reasoning_rounds), spec.reasoning_max_rounds, spec.reasoning_first_input_len,
        spec.reasoning_round_input_len, spec.reasoning_round_output_len, spec.reasoning_answer_len,
        spec.reasoning_tool_latency_ms / 1e3, spec.random_range_ratio, spec.seed, arrivals)


def assign_loras(requests: list[RequestSpec], spec: WorkloadSpec) -> list[RequestSpec]:
    """``requests`` with the adapters of ``spec.lora_modules`` (ids 1..n in their order) assigned
    by ``spec.lora_assignment``; unchanged without adapters."""
    n = len(spec.lora_modules)
    if not n:
        return requests
    if any(r.lora_id for r in requests):
        raise ValueError("the trace names the requests' LoRA adapters (its lora column); drop --lora-modules")
    if spec.lora_assignment == "round-robin":
        ids = [i % n + 1 for i in range(len(requests))]
    else:
        rng = random.Random(spec.seed ^ 0x10A4)
        ids = [rng.randrange(n) + 1 for _ in requests]
    return [replace(r, lora_id=i) for r, i in zip(requests, ids)]


def _requests(spec: WorkloadSpec, vocab_size: int | None) -> list[RequestSpec]:
    if spec.dataset_name == "trace":
        return load_trace(spec.dataset_path, spec.num_prompts)
    arrivals = spec.arrivals()
    if spec.dataset_name == "prefix_repetition":
        if vocab_size is None:
            raise ValueError("dataset_name='prefix_repetition' needs vocab_size (its prompts are drawn from the "
                             "vocabulary)")
        return sample_prefix_repetition_requests(
            spec.num_prompts, spec.prefix_repetition_prefix_len, spec.prefix_repetition_suffix_len,
            spec.prefix_repetition_num_prefixes, spec.prefix_repetition_output_len, spec.seed, arrivals, vocab_size,
            shuffle=not spec.disable_shuffle)
    if spec.dataset_name == "random-mm":
        if vocab_size is None:
            raise ValueError("dataset_name='random-mm' needs vocab_size (its draws follow the vocabulary's)")
        limits, buckets = spec.mm_sampling()
        draws = sample_random_mm(spec.num_prompts, spec.random_input_len, spec.random_output_len,
                                 spec.random_range_ratio, spec.random_prefix_len, spec.seed, vocab_size,
                                 spec.random_mm_base_items_per_request, spec.random_mm_num_mm_items_range_ratio,
                                 limits, buckets)
        return [RequestSpec(str(i), arrivals[i], spec.random_prefix_len + d.input_len, d.output_len,
                            prompt_token_ids=d.prompt_token_ids, images=d.images) for i, d in enumerate(draws)]
    if spec.dataset_name == "random":
        return sample_random_requests(
            spec.num_prompts,
            spec.random_input_len,
            spec.random_output_len,
            spec.random_range_ratio,
            spec.random_prefix_len,
            spec.seed,
            arrivals,
            vocab_size,
        )
    return sample_sharegpt_requests(
        spec.num_prompts, spec.seed, arrivals, output_len=spec.sharegpt_output_len, dataset_path=spec.dataset_path
    )
