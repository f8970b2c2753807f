"""`ParallelSpec`: how one model replica set is laid out over GPUs.

Two domains share the same tp*dp GPUs of a pipeline stage:

    attention:  tp-way tensor parallel  x  dp-way data parallel   (tp * dp GPUs)
    FFN / MoE:  ffn_tp-way tensor parallel x ep-way expert parallel (ffn_tp * ep GPUs, same GPUs)

so tp * dp == ffn_tp * ep. vLLM: `--enable-expert-parallel` gives ep = tp*dp, ffn_tp = 1;
without it experts are tensor-parallel over all tp*dp GPUs (ffn_tp = tp*dp, ep = 1).
world_size = pp * tp * dp. `eplb` (vLLM's --enable-eplb) places the experts by load
(``simulator.eplb``) in E + `redundant_experts` physical slots, (E + R) / ep per EP rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from frontier.model_spec import ModelSpec


@dataclass(frozen=True)
class ParallelSpec:
    """tp: attention tensor parallel; pp: pipeline stages; dp: attention data parallel;
    ep: expert parallel; ffn_tp: tensor parallel of the FFN/MoE domain (None -> tp*dp // ep)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    ffn_tp: int | None = None
    eplb: bool = False
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ParallelSpec.{name}={value!r} must be an integer >= 1")
        if not isinstance(self.redundant_experts, int) or isinstance(self.redundant_experts, bool) \
                or self.redundant_experts < 0:
            raise ValueError(f"num_redundant_experts={self.redundant_experts!r} must be an integer >= 0")
        if self.redundant_experts and not self.eplb:
            raise ValueError(f"num_redundant_experts is set to {self.redundant_experts} but EPLB is not enabled; "
                             "add --enable-eplb or drop num_redundant_experts")
        if self.eplb and self.ep < 2:
            raise ValueError("EPLB needs expert parallelism over more than one rank: --enable-expert-parallel "
                             "with tensor x data parallel size > 1")
        if self.ffn_tp is None:
            if (self.tp * self.dp) % self.ep:
                raise ValueError(f"ep={self.ep} must divide tp*dp={self.tp}*{self.dp}={self.tp * self.dp}")
            object.__setattr__(self, "ffn_tp", self.tp * self.dp // self.ep)
        if not isinstance(self.ffn_tp, int) or self.ffn_tp < 1:
            raise ValueError(f"ParallelSpec.ffn_tp={self.ffn_tp!r} must be an integer >= 1")
        if self.tp * self.dp != self.ffn_tp * self.ep:
            raise ValueError(f"tp*dp={self.tp}*{self.dp}={self.tp * self.dp} must equal "
                             f"ffn_tp*ep={self.ffn_tp}*{self.ep}={self.ffn_tp * self.ep}")

    @property
    def world_size(self) -> int:
        """GPUs used: pp * tp * dp."""
        return self.pp * self.tp * self.dp

    @property
    def moe_tp(self) -> int:
        """Tensor-parallel size of the FFN/MoE domain (== ffn_tp)."""
        assert self.ffn_tp is not None
        return self.ffn_tp

    def local_experts(self, num_experts: int) -> int:
        """Expert slots on one EP rank: ceil((num_experts + redundant_experts) / ep)."""
        return -(-(num_experts + self.redundant_experts) // self.ep)

    @classmethod
    def from_vllm(cls, tp: int = 1, pp: int = 1, dp: int = 1, enable_expert_parallel: bool = False,
                  enable_eplb: bool = False, num_redundant_experts: int = 0) -> ParallelSpec:
        """Layout vLLM builds from --tensor/--pipeline/--data-parallel-size, --enable-expert-parallel
        and --enable-eplb (--eplb-config's num_redundant_experts)."""
        if enable_eplb and not enable_expert_parallel:
            raise ValueError("--enable-eplb needs --enable-expert-parallel (vLLM: enable_expert_parallel must be "
                             "True to use EPLB)")
        if enable_expert_parallel:
            return cls(tp=tp, pp=pp, dp=dp, ep=tp * dp, ffn_tp=1, eplb=enable_eplb,
                       redundant_experts=num_redundant_experts)
        return cls(tp=tp, pp=pp, dp=dp, ep=1, ffn_tp=tp * dp, redundant_experts=num_redundant_experts)

    def check_model(self, model: ModelSpec) -> None:
        """Raise ValueError when vLLM could not shard `model` this way.

        Heads: tp divides num_attention_heads. KV heads (vLLM QKVParallelLinear): kv_heads % tp == 0
        when tp < kv_heads, else tp % kv_heads == 0 (each KV head replicated tp // kv_heads times;
        MLA has a single latent "head", replicated). Experts: ep divides num_experts.
        Dense MLP: tp divides intermediate_size. Pipeline: pp <= num_layers. Block-scaled
        weights (``quant.weight_block_size``): vLLM's ``validate_fp8_block_shape_moe`` and
        ``validate_fp8_block_shape`` need every rank's share of the routed experts' and of the
        dense MLP's intermediate width to be a multiple of block_n (and of block_k when it is
        split): e.g. MiniMax-M2.5 (1536) or Qwen3-235B-A22B-FP8 (1536) at moe_tp 8 = 192 is
        refused, so is Qwen3-30B-A3B-FP8 (768) at 8; expert parallel keeps every expert whole.
        """
        heads, kv = model.num_attention_heads, model.num_kv_heads
        if heads % self.tp:
            raise ValueError(f"tp={self.tp} must divide num_attention_heads={heads} of {model.name}")
        if not model.is_mla:
            if self.tp < kv and kv % self.tp:
                raise ValueError(f"tp={self.tp} must divide num_kv_heads={kv} of {model.name}")
            if self.tp >= kv and self.tp % kv:
                raise ValueError(f"tp={self.tp} must be a multiple of num_kv_heads={kv} of {model.name} when tp >= kv heads")
        if model.intermediate_size and model.intermediate_size % self.tp:
            raise ValueError(f"tp={self.tp} must divide intermediate_size={model.intermediate_size} of {model.name}")
        if model.is_moe and (model.num_experts + self.redundant_experts) % self.ep:
            physical = model.num_experts + self.redundant_experts
            valid = [d for d in range(1, physical + 1) if physical % d == 0]
            extra = f" + {self.redundant_experts} redundant" if self.redundant_experts else ""
            raise ValueError(f"ep={self.ep} must divide num_experts={model.num_experts}{extra} of {model.name} "
                             f"(ep = tensor x data parallel size with --enable-expert-parallel, or --*-ep); "
                             f"valid ep: {', '.join(map(str, valid))}")
        block_error = self.block_split_error(model)
        if block_error is not None:
            raise ValueError(block_error)
        if self.pp > model.num_layers:
            raise ValueError(f"pp={self.pp} exceeds num_layers={model.num_layers} of {model.name}")

    def block_split_error(self, model: ModelSpec, engine: str = "vllm") -> str | None:
        """Why vLLM (``engine`` "sglang": SGLang, the same rule in ``moe_ep_setup.py`` and its fp8
        linear method) refuses to split ``model``'s block-scaled weights this way (a rank's share of
        the routed experts' or the dense MLP's intermediate width is not whole blocks), or None."""
        block = model.quant.weight_block_size
        if block is None:
            return None
        widths = []
        if model.is_moe and "routed_experts" in model.quant.quantized_parts:
            widths.append(("routed experts' moe_intermediate_size", model.moe_intermediate_size, self.moe_tp))
        if model.intermediate_size and model.num_layers > model.num_moe_layers \
                and "dense_mlp" in model.quant.quantized_parts:
            widths.append(("dense MLP's intermediate_size", model.intermediate_size, self.tp))
        for what, width, split in widths:
            share = width // split
            if share % block[0] or (split > 1 and share % block[1]):
                if engine == "sglang":
                    hint = (" (use a larger --ep-size, which keeps each expert whole over tp / ep-size ranks, or a "
                            "smaller tensor parallel size)" if "experts" in what else
                            " (use a smaller tensor parallel size)")
                else:
                    hint = (" (use --enable-expert-parallel, which keeps every expert whole, or a smaller "
                            "tensor parallel size)" if "experts" in what else " (use a smaller tensor parallel size)")
                return (f"{model.name}: the {what} {width} / {split} ranks = {share} is not a multiple of the "
                        f"weight quantization block {block[0]}x{block[1]}; "
                        f"{'SGLang' if engine == 'sglang' else 'vLLM'} refuses this layout{hint}")
        return None
