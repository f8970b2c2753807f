"""Speculative decoding: vLLM's ``--speculative-config``, the drafts' acceptance, the drafter's shape.

Methods simulated: vLLM's EAGLE family, whose drafter is a head of the target's own shape run
after every step of the target (``eagle``: EAGLE-1 heads, ``eagle3``: EAGLE-3 heads, ``mtp``: a
model's multi-token-prediction layer, e.g. DeepSeek-V3's, reused for every draft), and
``draft_model``, a separate smaller model of the target's vocabulary (e.g. Qwen3-0.6B for
Qwen3-32B; the method vLLM infers when a --speculative-config gives a ``model`` and no ``method``,
unless the name says EAGLE: ``spec_method``). For all of them vLLM 0.33 reserves
``num_lookahead_tokens`` = k KV slots past each request's scheduled tokens; the EAGLE family adds
no draft rows to the step's token budget, a draft model one per scheduled request
(``SpeculativeConfig.max_num_new_slots_for_drafting``: 0 / 1, ``SchedulerConfig.num_draft_slots``),
and only the EAGLE family hashes a block with the token after it (``SchedulerConfig.eagle_drafter``).
The scheduler side is ``simulator.scheduler`` ("Speculative decoding"), co-located or on P/D
instances. Refused with a one-line error: ``ngram`` / ``suffix`` (their proposals depend on the
text, which a simulated request does not have), the parallel drafters (DFlash, DSpark, P-EAGLE),
dynamic speculation (``num_speculative_tokens_per_batch_size``: an unknown key), multi-module MTP
(k > 1 drafts from a model with several MTP layers), pipeline parallelism with synchronous
scheduling, and AFD; for a draft model also (``draft_model_error``) pipeline parallelism, a
draft tensor-parallel size other than the target's, a vocabulary other than the target's (vLLM
refuses it), and KV caches that are not one full-attention group (sliding-window, chunked,
Gated DeltaNet or MLA layers on either side, which vLLM groups in ways not modelled here) or an
MoE draft.

Acceptance. The accepted share of drafts is a property of the model pair and the data, which a
simulation does not have, so it is an input: ``acceptance_rates`` are the per-position
acceptance rates vLLM logs ("SpecDecoding metrics: ... Per-position acceptance rate: 0.80,
0.62, 0.47"), a_i = share of verifies whose draft i was accepted = P(accepted >= i), so
non-increasing; one value p stands for p, p^2, ..., p^k (every draft accepted with probability
p once the one before was). vLLM itself takes the same input for its test-only synthetic
rejection sampler (``"rejection_sample_method": "synthetic"`` with ``synthetic_acceptance_rates``,
per-position unconditional, or ``synthetic_acceptance_length``, turned into rates by its
minimum-variance schedule: ``_acceptance_length_to_rates``), which a --speculative-config may
give instead of --spec-acceptance-rate: the simulated deployment then is the vLLM launch with
that config. ``DraftAcceptance`` draws each verify's accepted count from the rates (draft i is
accepted with probability a_i / a_(i-1) when draft i - 1 was: vLLM's
``unconditional_to_conditional_rates``), seeded.

The drafter's work per step (``BatchEngine.draft_time_s``), as vLLM's EAGLE proposer runs it
(v1/worker/gpu/spec_decode): one forward of the draft head over the step's tokens, then k - 1
forwards over one token per request, each followed by the draft logits of one row per request.
The head is priced as one decoder layer of the target (EAGLE-1 / EAGLE-3 heads of Llama-style
targets and MTP layers have the target's width and layer kind) plus the GEMM that folds the
target's hidden states in (EAGLE-1 and MTP: 2 x hidden -> hidden, EAGLE-3: 3 x hidden ->
hidden; an EAGLE-3 layer's QKV projection also reads 2 x hidden) and a logits GEMM over the
head's vocabulary: an EAGLE-3 head's ``draft_vocab_size`` when ``--speculative-config``'s model
is a config.json path or catalogue name the simulator can read, else the target's (a pricing
note says so). A draft model runs as vLLM 0.33's model runner V2 runs it
(``StandaloneARSpeculator``, v1/worker/gpu/spec_decode/standalone_ar): eagerly (it captures no CUDA
graphs), a forward of the whole draft model over each request's scheduled tokens plus the sampled
one, then k - 1 forwards over one token per request, each with the draft's logits for one row per
request (``BatchEngine.standalone_draft_time_s``); its weights and its KV (every layer of it, in
the target's pool: vLLM's ``UniformTypeKVCacheSpecs``, one block spanning both models' layers)
come off the KV budget (``simulator.memory.kv_budget``'s ``draft``), and a draft of fewer
positions than the engine's max_model_len lowers it to the draft's (vLLM's
``_limit_max_model_len_to_draft``, with a warning: V2 cannot skip speculation for longer
sequences; ``EngineArgs.resolve``). vLLM skips drafting in a step
where no scheduled request can use the drafts (``SchedulerOutput.skip_drafts``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from frontier.model_spec import ModelSpec

SPEC_METHODS = ("eagle", "eagle3", "mtp", "draft_model")
EAGLE_METHODS = ("eagle", "eagle3", "mtp")      # drafters on the target's hidden states (vLLM use_eagle())
# Draft-head input GEMM width, in multiples of hidden_size (the target states it folds in).
FC_INPUTS = {"eagle": 2, "eagle3": 3, "mtp": 2}
# vLLM 0.33 --speculative-config keys accepted but not simulated (an EAGLE head's checkpoint is read
# only for its vocabulary, a draft model's for its shape; their revision, quantization and length cap
# are not: the draft runs its checkpoint's own quantization at the target's TP size, and
# draft_tensor_parallel_size is only checked, ``draft_model_error``).
IGNORED_KEYS = ("model", "revision", "code_revision", "quantization", "draft_tensor_parallel_size",
                "max_model_len", "disable_padded_drafter_batch", "speculative_token_tree", "draft_sample_method")
# vLLM's synthetic rejection sampler: the acceptance given in the config itself
SYNTHETIC_KEYS = ("rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length")
REFUSED_METHODS = {
    "ngram": "its proposals depend on the prompt's text, which a simulated request does not have",
    "suffix": "its proposals depend on the prompt's text, which a simulated request does not have",
    "ngram_gpu": "its proposals depend on the prompt's text, which a simulated request does not have",
    "dflash": "parallel drafters are not simulated", "dspark": "parallel drafters are not simulated",
}


@dataclass(frozen=True)
class SpecDecodeConfig:
    """Speculative decoding of one deployment.

    method: "eagle", "eagle3", "mtp" or "draft_model" (SPEC_METHODS).
    num_speculative_tokens: drafts per request and step (k >= 1).
    acceptance_rates: per-position acceptance rates (k non-increasing values in [0, 1]; one value
        p means p, p^2, ..., p^k): see the module docstring.
    seed: seed of the acceptance draws.
    draft: the draft model of method "draft_model" (its checkpoint's ``ModelSpec``; None otherwise).
    draft_tensor_parallel_size: --speculative-config's, 0 when not given (checked, not priced:
        ``draft_model_error``).
    """

    method: str
    num_speculative_tokens: int
    acceptance_rates: tuple[float, ...]
    seed: int = 0
    draft_model: str = ""           # --speculative-config model: the draft head's checkpoint, as given
    draft_vocab_size: int = 0       # the head's logits width when its config was found (0: the target's)
    draft: ModelSpec | None = None
    draft_tensor_parallel_size: int = 0

    def __post_init__(self) -> None:
        if self.method not in SPEC_METHODS:
            why = REFUSED_METHODS.get(self.method)
            raise ValueError(f"--speculative-config method {self.method!r} is not simulated"
                             + (f" ({why})" if why else "") + f"; valid: {', '.join(SPEC_METHODS)}")
        if (self.method == "draft_model") != (self.draft is not None):
            raise ValueError("--speculative-config method draft_model needs its draft model (a catalogue name or a "
                             "config.json path as model); the other methods take none")
        k = self.num_speculative_tokens
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"--speculative-config num_speculative_tokens must be an integer >= 1, got {k!r}")
        rates = tuple(self.acceptance_rates)
        if len(rates) == 1 and k > 1:
            rates = tuple(rates[0] ** (i + 1) for i in range(k))
        if len(rates) != k or any(not isinstance(a, (int, float)) or isinstance(a, bool) or not 0.0 <= a <= 1.0
                                  for a in rates):
            raise ValueError(f"--spec-acceptance-rate {list(self.acceptance_rates)} must be one value or "
                             f"{k} (num_speculative_tokens) values in [0, 1]")
        if any(b > a for a, b in zip(rates, rates[1:])):
            raise ValueError(f"--spec-acceptance-rate {list(rates)} must not increase with the position "
                             "(draft i is accepted only when draft i - 1 was)")
        object.__setattr__(self, "acceptance_rates", tuple(float(a) for a in rates))

    @property
    def num_lookahead_tokens(self) -> int:
        """KV slots reserved past the scheduled tokens (vLLM: k for the EAGLE family)."""
        return self.num_speculative_tokens

    @property
    def num_draft_slots(self) -> int:
        """Input rows the drafter adds per scheduled request (vLLM
        ``max_num_new_slots_for_drafting``): 1 for a draft model, 0 for the EAGLE family."""
        return 1 if self.method == "draft_model" else 0

    @property
    def eagle_drafter(self) -> bool:
        """Whether the drafter reads the target's hidden states (vLLM ``use_eagle()``)."""
        return self.method in EAGLE_METHODS

    @property
    def fc_inputs(self) -> int:
        """Width of the draft head's input GEMM in multiples of hidden_size (EAGLE family)."""
        return FC_INPUTS[self.method]


def with_draft_layer(model: ModelSpec, spec: SpecDecodeConfig) -> ModelSpec:
    """``model`` with an EAGLE-family draft head's layer added (a draft model: ``model`` as
    is, its draft counted apart, ``kv_budget``'s ``draft``), for the KV budget: its weights and its KV
    (vLLM loads the head beside the target and gives its attention layer a KV cache of its own in
    the same pool). An MTP layer of an MoE model is an MoE layer, an EAGLE head a dense one (an
    MoE layer when the model states no dense width, as ``BatchEngine`` prices it); the head's
    input GEMM and an EAGLE-3 head's own draft-vocabulary logits (~0.3 GB for 32k x 4096 in
    bf16) are not counted."""
    if not spec.eagle_drafter:
        return model
    dense = 0 if spec.method == "mtp" and model.num_moe_layers or not model.intermediate_size else 1
    # per-layer flags gain the head's layer: full attention (neither sliding, chunked nor Gated DeltaNet)
    flags = {k: getattr(model, k) + (v,) for k, v in (("sliding_layer_flags", False), ("chunked_layer_flags", False),
                                                      ("linear_attention_flags", False),
                                                      ("moe_layer_flags", not dense)) if getattr(model, k)}
    return replace(model, num_layers=model.num_layers + 1,
                   num_dense_layers=model.num_dense_layers + (dense if model.is_moe else 0), **flags)


def spec_config_from_vllm(cfg: dict[str, Any], acceptance_rates: Sequence[float] | None,
                          seed: int = 0) -> SpecDecodeConfig:
    """A ``SpecDecodeConfig`` from vLLM's --speculative-config object and --spec-acceptance-rate
    (or the config's synthetic acceptance: module docstring)."""
    known = ("method", "num_speculative_tokens", *IGNORED_KEYS, *SYNTHETIC_KEYS)
    for key in cfg:
        if key not in known:
            raise ValueError(f"--speculative-config key {key!r} is not simulated; valid: {', '.join(known)}")
    if "num_speculative_tokens" not in cfg or "method" not in cfg and not cfg.get("model"):
        raise ValueError("--speculative-config needs num_speculative_tokens and a method or a draft model, "
                         "e.g. '{\"method\": \"eagle3\", \"num_speculative_tokens\": 3}' or "
                         "'{\"model\": \"Qwen/Qwen3-0.6B\", \"num_speculative_tokens\": 4}'")
    synthetic = synthetic_rates(cfg)
    if synthetic is not None and acceptance_rates:
        raise ValueError("give the acceptance once: --spec-acceptance-rate or the --speculative-config's "
                         "synthetic_acceptance_rates / synthetic_acceptance_length, not both")
    acceptance_rates = synthetic if synthetic is not None else acceptance_rates
    if not acceptance_rates:
        raise ValueError("--speculative-config needs --spec-acceptance-rate: the per-position acceptance rates "
                         "vLLM logs for this model pair and data (e.g. 0.8,0.6,0.45), or one rate p for p, p^2, ...; "
                         "or vLLM's \"rejection_sample_method\": \"synthetic\" with synthetic_acceptance_rates")
    draft = str(cfg.get("model") or "")
    method = spec_method(cfg.get("method"), draft)
    tp = cfg.get("draft_tensor_parallel_size") or 0
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 0:
        raise ValueError(f"--speculative-config draft_tensor_parallel_size must be a positive integer, got {tp!r}")
    if method == "draft_model":
        from frontier.model_spec import load_model_spec
        if not draft:
            raise ValueError("--speculative-config method draft_model needs model: the draft model's catalogue name "
                             "or config.json path (e.g. Qwen/Qwen3-0.6B)")
        try:
            draft_spec = load_model_spec(draft)
        except ValueError as exc:
            raise ValueError(f"--speculative-config model {draft!r} (the draft model): {exc}") from None
        return SpecDecodeConfig(method, cfg["num_speculative_tokens"], tuple(acceptance_rates), seed, draft,
                                draft_spec.vocab_size, draft_spec, tp)
    return SpecDecodeConfig(method, cfg["num_speculative_tokens"], tuple(acceptance_rates), seed,
                            draft, draft_vocab_size(draft) if draft and method != "mtp" else 0,
                            draft_tensor_parallel_size=tp)


def spec_method(method: object, model: str) -> str:
    """The method vLLM 0.33 runs for a --speculative-config ``method`` (None: not given) and
    draft ``model``, by ``SpeculativeConfig.__post_init__``'s name rules: no method is a draft
    model, and a draft model named "eagle-..." / "...eagle3..." is an EAGLE / EAGLE-3 head, one
    named "...dflash..." / "...dspark..." a parallel drafter (refused). (vLLM also takes a draft
    whose config's model_type is an MTP type for MTP; that one is given as method mtp here.)"""
    if method is None:
        method = "draft_model"
    if not isinstance(method, str):
        raise ValueError(f"--speculative-config method must be a string, got {method!r}; valid: "
                         f"{', '.join(SPEC_METHODS)}")
    if method == "draft_model":
        name = model.lower()
        for marker, named in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")):
            if marker in name:
                return named
    return method


def draft_model_error(spec: SpecDecodeConfig, target: ModelSpec, tp: int, pp: int) -> str | None:
    """Why a draft model (method "draft_model") is not simulated beside ``target`` at ``tp`` x
    ``pp``, or None (see the module docstring)."""
    draft = spec.draft
    if draft is None:
        return None
    name = f"draft model {spec.draft_model!r}"
    if draft.vocab_size != target.vocab_size:     # vLLM verify_equal_vocab_size_if_draft_model
        return (f"{name} has vocab_size {draft.vocab_size}, {target.name} {target.vocab_size}: vLLM requires the "
                "same vocabulary (use_heterogeneous_vocab is not simulated)")
    if spec.draft_tensor_parallel_size not in (0, tp):
        return (f"--speculative-config draft_tensor_parallel_size {spec.draft_tensor_parallel_size} with "
                f"--tensor-parallel-size {tp}: a draft model is simulated at the target's TP size only (vLLM's V1 "
                f"proposer requires it); drop the key or give {tp}")
    if pp > 1:
        return f"{name} with pipeline parallelism is not simulated; use --pipeline-parallel-size 1"
    for which, m in (("target", target), ("draft", draft)):
        kinds = [k for k, n in (("sliding-window", m.num_sliding_layers), ("chunked local", m.num_chunked_layers),
                                ("Gated DeltaNet", m.num_linear_attention_layers)) if n]
        if m.is_mla:
            kinds.append("MLA")
        if kinds:
            return (f"{name} with {which} {m.name}'s {', '.join(kinds)} layers is not simulated (vLLM groups the two "
                    "models' KV caches in ways not modelled); a draft model beside full-attention models only")
    if draft.is_moe:
        return f"{name} is a mixture-of-experts model; a dense draft model only"
    return None


def synthetic_rates(cfg: dict[str, Any]) -> tuple[float, ...] | None:
    """The per-position acceptance rates of vLLM's synthetic rejection sampler in a
    --speculative-config (None for the default "standard" sampler), validated as vLLM 0.33's
    ``SpeculativeConfig._resolve_synthetic_acceptance_rates`` validates them: exactly one of
    synthetic_acceptance_rates (k non-increasing values in [0, 1]) or synthetic_acceptance_length
    (in [1, k + 1]: rates 1, ..., 1, the fraction left, 0, ...)."""
    method = cfg.get("rejection_sample_method", "standard")
    rates, length = cfg.get("synthetic_acceptance_rates"), cfg.get("synthetic_acceptance_length")
    if method != "synthetic":
        if method != "standard":
            raise ValueError(f"--speculative-config rejection_sample_method {method!r} is not simulated; "
                             "valid: standard (acceptance from --spec-acceptance-rate), synthetic")
        if rates is not None or length is not None:
            raise ValueError("synthetic_acceptance_rates / synthetic_acceptance_length are only valid with "
                             "rejection_sample_method 'synthetic'")
        return None
    if (rates is None) == (length is None):
        raise ValueError("rejection_sample_method 'synthetic' requires exactly one of synthetic_acceptance_rates "
                         "or synthetic_acceptance_length")
    k = cfg["num_speculative_tokens"]
    if rates is not None:
        if not isinstance(rates, list) or len(rates) != k:
            raise ValueError(f"synthetic_acceptance_rates must be a list of {k} (num_speculative_tokens) rates, "
                             f"got {rates!r}")
        return tuple(rates)
    if not isinstance(length, (int, float)) or isinstance(length, bool) or not 1.0 <= length <= k + 1:
        raise ValueError(f"synthetic_acceptance_length must be in [1, {k + 1}], got {length!r}")
    accepted = length - 1
    full = int(accepted)
    return tuple(([1.0] * full + [accepted - full] + [0.0] * (k - full - 1))[:k])


def draft_vocab_size(draft_model: str) -> int:
    """The logits width of a draft head's config (EAGLE-3's ``draft_vocab_size``, else its
    ``vocab_size``) when ``draft_model`` is a local config.json path / folder or a catalogue name;
    0 when it is neither (a hub name: the simulator reads nothing from the network)."""
    from frontier.model_spec import find_model_config
    config = find_model_config(draft_model)
    if config is None:
        return 0
    size = config.get("draft_vocab_size") or config.get("vocab_size") or 0
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ValueError(f"--speculative-config model {draft_model!r}: its config's draft_vocab_size / vocab_size "
                         f"{size!r} is not a positive integer")
    return size


def drafter_note(spec: SpecDecodeConfig) -> str | None:
    """A pricing note when an EAGLE-3 head's logits are priced at the target's vocabulary because
    its config was not found (EAGLE-1 heads and MTP layers use the target's lm_head: no note)."""
    if spec.method != "eagle3" or spec.draft_vocab_size:
        return None
    which = f"draft head {spec.draft_model!r} not found" if spec.draft_model else "no draft head given"
    return (f"speculative decoding: {which} (a config.json path or catalogue name): its draft logits are priced "
            "over the target's vocabulary (EAGLE-3 heads usually draft over 32k tokens)")


class DraftAcceptance:
    """Seeded draws of accepted drafts. ``__call__(request, context_len, drafts)`` is the
    scheduler's ``accept_drafts``: draft i is accepted with probability a_i / a_(i-1) when draft
    i - 1 was (a_0 = 1)."""

    def __init__(self, config: SpecDecodeConfig) -> None:
        rates = (1.0, *config.acceptance_rates)
        self._cond = [b / a if a > 0 else 0.0 for a, b in zip(rates, rates[1:])]
        self._rng = random.Random(config.seed)

    def __call__(self, request: object, context_len: int, drafts: int) -> int:
        draw, cond = self._rng.random, self._cond
        accepted = 0
        while accepted < drafts and draw() < cond[accepted]:
            accepted += 1
        return accepted


class SpecDecodingStats:
    """What vLLM's "SpecDecoding metrics" log line counts, over the verifies of processed steps:
    verifies (steps of a request that carried drafts), drafts, accepted drafts, and accepted
    drafts per position (placeholder drafts count as drafted and rejected, as in vLLM)."""

    def __init__(self, num_speculative_tokens: int) -> None:
        self.num_drafts = 0
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos = [0] * num_speculative_tokens

    def observe(self, drafts: int, accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += drafts
        self.num_accepted_tokens += accepted
        per_pos = self.accepted_per_pos
        for i in range(accepted):
            per_pos[i] += 1

    def add(self, other: SpecDecodingStats) -> None:
        self.num_drafts += other.num_drafts
        self.num_draft_tokens += other.num_draft_tokens
        self.num_accepted_tokens += other.num_accepted_tokens
        self.accepted_per_pos = [a + b for a, b in zip(self.accepted_per_pos, other.accepted_per_pos)]

    def summary(self) -> dict[str, Any]:
        """Summary keys (vLLM's names where its log has one): mean acceptance length = 1 +
        accepted / verifies, draft acceptance rate = accepted / drafted, per-position rates."""
        n = self.num_drafts
        return {"spec_num_drafts": n, "spec_num_draft_tokens": self.num_draft_tokens,
                "spec_num_accepted_tokens": self.num_accepted_tokens,
                "spec_mean_acceptance_length": 1.0 + self.num_accepted_tokens / n if n else 0.0,
                "spec_draft_acceptance_rate": (self.num_accepted_tokens / self.num_draft_tokens
                                               if self.num_draft_tokens else 0.0),
                "spec_per_position_acceptance_rate": [a / n if n else 0.0 for a in self.accepted_per_pos]}


def engine_acceptance(spec: SpecDecodeConfig, engine_index: int) -> DraftAcceptance:
    """The acceptance draws of one engine (scheduler): seeded with the config's seed plus the
    engine's index, so engines draw independently and a run repeats exactly."""
    return DraftAcceptance(replace(spec, seed=spec.seed + engine_index))


def schedulers_stats(schedulers: Sequence, num_speculative_tokens: int) -> dict[str, Any]:
    """The summary's spec_* keys over ``schedulers`` (each a ``Scheduler`` or a lockstep group
    with ``ranks``)."""
    stats = SpecDecodingStats(num_speculative_tokens)
    for sched in schedulers:
        for rank in getattr(sched, "ranks", (sched,)):
            stats.add(rank.spec_stats)
    return stats.summary()
