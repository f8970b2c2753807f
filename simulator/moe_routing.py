"""MoE routing: how a step's tokens spread over experts, and the load of the slowest EP rank.

A step routes `tokens` tokens (those entering the MoE layer on an EP rank: with DP they
are all DP ranks' tokens, gathered) to `topk` distinct experts each, so `pairs = tokens *
topk` (token, expert) assignments; no expert gets more than `tokens` of them. Experts are
placed on EP ranks contiguously, as vLLM's linear expert map does:

    experts  0 .. L-1 | L .. 2L-1 | ... | (ep-1)L .. E-1      (L = E / ep local experts)
    rank         0    |     1     | ... |      ep-1

The step costs what the slowest rank costs. `rank_loads(tokens)` gives every rank's tokens
per local expert; the batch engine prices each distinct one (`MoeOp.tokens_per_expert` /
`routed_pairs`) and keeps the slowest — in memory-bound decode a rank with many active
experts can be slower than the rank with the most pairs. `slowest_rank(tokens)` is the rank
with the most pairs (ties -> more active experts, then the lowest rank).

Distributions (`--moe-routing`):
* ``balanced`` — pairs spread evenly; the remainder goes round-robin over ranks first, so
  the slowest rank holds ceil(pairs / ep) pairs (what the roofline assumed before).
* ``random`` — every token picks ``topk`` distinct experts uniformly at random (seeded per
  token count): the expected distinct experts of a step, E(1 - (1 - k/E)^T), are fewer than
  ``balanced``'s min(E, T k) (gpt-oss at 32 decode tokens: 81.5 of 128). Exact draws up to
  RANDOM_EXACT_PAIRS pairs; above, a multinomial over the experts (a token may then repeat an
  expert; every expert is active long before that size).
* ``power_law:ALPHA`` — our reconstruction of AIConfigurator's power-law sampler
  (``frontier.power_law_routing``: expert weights i.i.d. from p(x) ~ x^-ALPHA on [1, 0.8 T]
  when T k > E, else on [0.01, 2], scaled to the pairs and rounded, experts capped at T), the
  same draw calibration uses to featurize AIC's ``power_law_<ALPHA>`` table rows, so a
  calibrated query of a step routed so meets the rows measured so. ``power_law:1.01`` is
  AIC's own default routing assumption (its estimator prices MoE layers from those rows).
* ``trace:PATH`` — fixed expert weights from a file: JSON list (or {"expert_load": [...]}),
  .npy, or text/CSV numbers; one non-negative weight per expert (e.g. an expert-load dump).

With EPLB (``--enable-eplb``) the slots are not the linear map: ``placement`` gives the logical
expert of every physical slot (``simulator.eplb``), and an expert's pairs split evenly over its
replicas.

Deterministic: the draw for a token count depends only on (seed, tokens), so a run does
not depend on the order steps are priced in; results are memoized per token count.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from frontier.power_law_routing import power_law_loads
from frontier.text_file import read_json, read_text

ROUTING_KINDS = ("balanced", "random", "power_law", "trace")
RANDOM_EXACT_PAIRS = 4096      # random routing: exact distinct top-k draws up to this many pairs
MAX_MEMO = 65_536


@dataclass(frozen=True)
class RoutingSpec:
    """Parsed `--moe-routing` value: kind plus power-law exponent or trace path."""

    kind: str = "balanced"
    alpha: float = 0.0
    path: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ROUTING_KINDS:
            raise ValueError(f"--moe-routing kind {self.kind!r}; valid: balanced, random, power_law:ALPHA, trace:PATH")
        if self.kind == "power_law" and not 0 < self.alpha < float("inf"):
            raise ValueError(f"--moe-routing power_law:{self.alpha!r}: the exponent must be a finite number > 0, "
                             "e.g. power_law:1.01")
        if self.kind == "trace" and not self.path:
            raise ValueError("--moe-routing trace needs a path: trace:PATH")

    @classmethod
    def parse(cls, text: str) -> RoutingSpec:
        kind, _, arg = str(text).partition(":")
        if kind == "power_law":
            try:
                alpha = float(arg)
            except ValueError:
                raise ValueError(f"--moe-routing {text!r}: power_law:ALPHA needs a number, e.g. power_law:1.2") from None
            return cls("power_law", alpha=alpha)
        if kind == "trace":
            return cls("trace", path=arg)
        if arg or kind not in ("balanced", "random"):
            raise ValueError(f"--moe-routing {text!r}; valid: balanced, random, power_law:ALPHA, trace:PATH")
        return cls(kind)


def load_expert_weights(path: str | Path, num_experts: int) -> np.ndarray:
    """One non-negative weight per expert from a JSON / .npy / text file (module doc)."""
    p = Path(path)
    what = f"--moe-routing trace file {str(p)!r}"
    if not p.is_file():
        raise ValueError(f"{what} does not exist")
    if p.suffix == ".npy":
        try:
            values = np.load(p, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"{what} is not a .npy array of numbers ({exc})") from None
    else:
        if p.suffix == ".json":
            data = read_json(p, "--moe-routing trace file")
            if isinstance(data, dict) and "expert_load" not in data:
                raise ValueError(f"{what} holds a JSON object without \"expert_load\" (a list of weights)")
            values = data["expert_load"] if isinstance(data, dict) else data
        else:
            values = read_text(p, "--moe-routing trace file").replace(",", " ").split()
    try:
        w = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} holds no list of expert weights ({exc})") from None
    if w.size != num_experts or (w < 0).any() or not w.sum() > 0:
        raise ValueError(f"trace {str(p)!r}: need {num_experts} non-negative weights with a positive sum, "
                         f"got {w.size}")
    return w


def allocate_pairs(weights: np.ndarray, pairs: int, cap: int) -> np.ndarray:
    """Integer pairs per expert, proportional to `weights`, each <= `cap`, summing to `pairs`.

    Water-filling: experts whose share exceeds `cap` are pinned at it and the rest re-shared;
    then largest remainder (ties -> lower expert index) rounds to integers."""
    w = np.asarray(weights, dtype=float)
    x = np.zeros(w.size)
    free = np.ones(w.size, dtype=bool)
    left = float(pairs)
    while left > 0 and free.any() and w[free].sum() > 0:
        share = np.zeros(w.size)
        share[free] = left * w[free] / w[free].sum()
        over = free & (x + share > cap)
        if not over.any():
            x += share
            break
        left -= float((cap - x[over]).sum())
        x[over] = cap
        free &= ~over
    counts = np.floor(x + 1e-9).astype(np.int64)
    short = pairs - int(counts.sum())
    if short > 0:
        room = counts < cap
        frac = np.where(room, x - counts, -1.0)
        order = np.lexsort((np.arange(w.size), -frac))
        counts[order[:short]] += 1
    return counts


class MoeRouter:
    """Tokens per expert for a step of `tokens` tokens, and the slowest EP rank's share.

    `placement` (EPLB, ``simulator.eplb``): the logical expert of every physical slot, slot i on
    rank i // local; an expert's pairs split evenly over its replicas (the first replicas in
    slot order take the remainder; vLLM hashes each token to a replica). None: vLLM's linear map."""

    def __init__(self, spec: RoutingSpec, num_experts: int, topk: int, ep: int, seed: int = 0,
                 placement: np.ndarray | None = None) -> None:
        slots = num_experts if placement is None else len(placement)
        if num_experts < 1 or not 1 <= topk <= num_experts or ep < 1 or slots % ep:
            raise ValueError(f"MoeRouter: need 1 <= topk={topk} <= num_experts={num_experts} and "
                             f"ep={ep} dividing the {slots} expert slots")
        self.spec, self.num_experts, self.topk, self.ep, self.seed = spec, num_experts, topk, ep, seed
        self.local = slots // ep
        self._weights = load_expert_weights(spec.path, num_experts) if spec.kind == "trace" else None
        self._memo: dict[int, tuple[tuple[int, ...], ...]] = {}
        self.placement = None if placement is None else np.asarray(placement, dtype=np.int64)
        if self.placement is not None:
            if self.placement.min() < 0 or self.placement.max() >= num_experts:
                raise ValueError(f"MoeRouter: the placement names experts outside 0..{num_experts - 1}")
            replicas = np.bincount(self.placement, minlength=num_experts)
            if (replicas == 0).any():
                raise ValueError("MoeRouter: the placement must hold every expert at least once")
            # which replica (slot order) of its expert each slot holds, and that expert's replica count
            seen = np.zeros(num_experts, dtype=np.int64)
            self._nth = np.empty(len(self.placement), dtype=np.int64)
            for i, e in enumerate(self.placement):
                self._nth[i] = seen[e]
                seen[e] += 1
            self._replicas = replicas[self.placement]

    @property
    def balanced(self) -> bool:
        return self.spec.kind == "balanced" and self.placement is None

    def slot_counts(self, tokens: int) -> np.ndarray:
        """Pairs per physical expert slot (rank-major), length ep x local."""
        counts = self.expert_counts(tokens)
        if self.placement is None:
            return counts
        per, rem = np.divmod(counts[self.placement], self._replicas)
        return per + (self._nth < rem)

    def expert_counts(self, tokens: int) -> np.ndarray:
        """Pairs per expert (global expert order), length num_experts."""
        if tokens < 1:
            raise ValueError(f"MoeRouter: tokens must be >= 1, got {tokens}")
        pairs, e = tokens * self.topk, self.num_experts
        if self.spec.kind == "balanced":
            base, rem = divmod(pairs, e)
            counts = np.full(e, base, dtype=np.int64)
            # remainder round-robin over ranks: local slot 0 of ranks 0..ep-1, then slot 1, ...
            order = (np.arange(e) % self.ep) * self.local + np.arange(e) // self.ep
            counts[order[:rem]] += 1
            return counts
        if self.spec.kind == "trace":
            return allocate_pairs(self._weights, pairs, tokens)
        rng = np.random.default_rng([self.seed, tokens, zlib.crc32(b"moe_routing")])
        if self.spec.kind == "random":
            if pairs <= RANDOM_EXACT_PAIRS:       # top-k distinct experts per token
                picks = np.argpartition(rng.random((tokens, e)), self.topk - 1, axis=1)[:, :self.topk]
                return np.bincount(picks.ravel(), minlength=e).astype(np.int64)
            return allocate_pairs(rng.multinomial(pairs, np.full(e, 1.0 / e)).astype(float), pairs, tokens)
        return power_law_loads(rng, tokens, e, self.topk, self.spec.alpha).astype(np.int64)

    def rank_pairs(self, tokens: int) -> np.ndarray:
        """Pairs per EP rank."""
        return self.slot_counts(tokens).reshape(self.ep, self.local).sum(axis=1)

    def rank_loads(self, tokens: int) -> tuple[tuple[int, ...], ...]:
        """Tokens per local expert slot of every EP rank, rank order (memoized per token count)."""
        got = self._memo.get(tokens)
        if got is None:
            per_rank = self.slot_counts(tokens).reshape(self.ep, self.local)
            got = tuple(tuple(int(c) for c in row) for row in per_rank)
            if len(self._memo) >= MAX_MEMO:
                self._memo.clear()
            self._memo[tokens] = got
        return got

    def slowest_rank(self, tokens: int) -> tuple[int, ...]:
        """Tokens per local expert on the rank with the most pairs (ties: more active experts)."""
        loads = self.rank_loads(tokens)
        return max(loads, key=lambda r: (sum(r), sum(1 for c in r if c)))


def make_router(routing: str, model, parallel, seed: int = 0, gpus_per_node: int = 8) -> MoeRouter | None:
    """The router of `model` under `parallel` for `--moe-routing`, None for dense models. With
    EPLB (``parallel.eplb``) the experts sit where vLLM's policy puts them for the routing's
    long-run loads: a trace's weights, else even ones (``simulator.eplb``); the EP group spans
    ceil(ep / gpus_per_node) nodes."""
    spec = RoutingSpec.parse(routing)
    if not model.is_moe:
        return None
    placement = None
    if parallel.eplb:
        from simulator.eplb import eplb_placement
        weights = (load_expert_weights(spec.path, model.num_experts) if spec.kind == "trace"
                   else np.ones(model.num_experts))
        nodes = -(-parallel.ep // gpus_per_node)
        placement = eplb_placement(weights, model.num_experts + parallel.redundant_experts, parallel.ep,
                                   model.num_expert_groups, nodes)
    return MoeRouter(spec, model.num_experts, model.num_experts_per_tok, parallel.ep, seed, placement)
