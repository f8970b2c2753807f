"""Image requests: their layout in the prompt, and the vision tower's work in a step.

``place_images`` lays a request's images (``RequestSpec.images``: pixel sizes, as the workload
draws them) out for a model's vision tower (``frontier.vision``): after the request's text, as
``vllm bench serve``'s chat requests put them (text first, then the images, in order), each image
a placeholder run (``MmInput``) with the chat template's markers around it. The prompt grows by the
runs and markers; the chat template's own role tokens are not counted, as for text requests.

``encoder_ops`` are the tower's kernels for the images a step encodes (vLLM runs the tower, eager,
inside the step before the language model, over every item the scheduler scheduled:
``GPUModelRunner._execute_mm_encoder``), per rank:

* weights mode (``--mm-encoder-tp-mode weights``, vLLM's default): the tower's linear layers split
  by TP (column-parallel qkv and fc1, row-parallel proj and fc2, each row-parallel layer an
  all-reduce), every rank over every image;
* data mode (``data``, or Kimi-K2.5's MoonViT when TP does not divide its heads, which vLLM
  then runs whole on every rank): the images dealt to the TP ranks by patches, largest first to
  the least loaded (vLLM ``run_dp_sharded_mrope_vision_model``), the busiest rank's share priced,
  then an all-gather of the tokens.

Per block: two LayerNorms, fused qkv, the attention, the output projection, fc1, GELU, fc2
(Qwen3-VL also a 2-D rotary on q and k). Attention is bidirectional within each image
(``EncoderAttentionOp``: a calibrated bundle prices it from AIConfigurator's measured vLLM ViT
flash-attention tables, family ``encoder_attention``; the roofline otherwise). Qwen3-VL: the
patch embedding (a linear over 2 x 16 x 16 x 3 pixels), the position embedding's interpolation
(an elementwise pass), the merger (LayerNorm, fc1 over 4 merged patches, GELU, fc2 to the text
width) and each deepstack merger. Gemma 3: the patch embedding (14 x 14 x 3),
the position embedding, SigLIP's post-LayerNorm, the 4 x 4 average pool, the projector's RMSNorm
and matrix (replicated). All bf16.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from frontier.model_spec import ModelSpec
from frontier.ops import ElementwiseOp, EncoderAttentionOp, GemmOp
from frontier.vision import VisionTower
from simulator.encoder_cache import MmInput
from simulator.request import RequestSpec

IMAGE_TOKEN_ID = -2         # the ids a laid-out image puts in an explicit prompt (its placeholder run ...)
MARKER_TOKEN_ID = -3        # ... and the template's markers around it)


def place_images(spec: RequestSpec, tower: VisionTower) -> RequestSpec:
    """``spec`` with its images laid out for ``tower`` (module docstring): ``prompt_len`` grown,
    ``mm_inputs`` set (identifiers: ``image_ids``', else unique to the request, as the random
    images of ``vllm bench`` are), an explicit prompt extended with the runs' and markers' ids."""
    if not spec.images or spec.mm_inputs:
        return spec
    pos, ids, inputs = spec.prompt_len, [], []
    for i, (height, width) in enumerate(spec.images):
        item = tower.image(height, width)
        before = item.template_tokens // 2          # Qwen's vision start ...
        after = item.template_tokens - before       # ... and end
        pos += before
        ident = (spec.image_ids[i] if spec.image_ids else "") or f"{spec.request_id}/image{i}"
        inputs.append(MmInput(pos, item.length, item.num_embeds, item.patches, ident))
        ids += [MARKER_TOKEN_ID] * before + [IMAGE_TOKEN_ID] * item.length + [MARKER_TOKEN_ID] * after
        pos += item.length + after
    prompt = None if spec.prompt_token_ids is None else spec.prompt_token_ids + tuple(ids)
    return replace(spec, prompt_len=pos, mm_inputs=tuple(inputs), prompt_token_ids=prompt,
                   image_tokens=pos - spec.prompt_len)


def deal_images(patches: tuple[int, ...], ranks: int) -> list[tuple[int, ...]]:
    """The images (``patches`` each) each of ``ranks`` ranks encodes when they are dealt largest
    first to the least-loaded rank (data mode; ties to the lower rank)."""
    loads = [(0, r) for r in range(ranks)]
    dealt: list[list[int]] = [[] for _ in range(ranks)]
    for p in sorted(patches, reverse=True):
        load, r = heapq.heappop(loads)
        dealt[r].append(p)
        heapq.heappush(loads, (load + p, r))
    return [tuple(d) for d in dealt]


def encoder_ops(tower: VisionTower, patches: tuple[int, ...], tp: int) -> list[tuple[object, int]]:
    """(op, multiplicity) of the tower over images of ``patches`` patches each on one rank of a
    tower split ``tp`` ways (module docstring; the all-reduces are the caller's:
    ``encoder_all_reduces``)."""
    h, inter, ab = tower.hidden, tower.intermediate // tp, 2.0
    heads = tower.num_heads // tp
    total = sum(patches)
    qkv = 3 * h // tp
    block: list[object] = [
        ElementwiseOp("vit_norm", total, h, 2 * h * ab),
        GemmOp("vit_qkv", total, qkv, h),
        EncoderAttentionOp(patches, heads, tower.head_dim),
        GemmOp("vit_proj", total, h, h // tp),
        ElementwiseOp("vit_norm", total, h, 2 * h * ab),
        GemmOp("vit_fc1", total, inter, h),
        ElementwiseOp("vit_gelu", total, inter, 2 * inter * ab),
        GemmOp("vit_fc2", total, h, inter),
    ]
    if tower.kind == "qwen3_vl":
        block.append(ElementwiseOp("vit_rotary", total, h, 2 * (2 * h // tp) * ab))
    pixels = 3 * tower.temporal_patch * tower.patch_size ** 2
    ops: list[tuple[object, int]] = [(GemmOp("vit_patch_embed", total, h, pixels), 1),
                                     (ElementwiseOp("vit_pos_embed", total, h, 3 * h * ab), 1)]
    ops += [(op, tower.depth) for op in block]
    if tower.kind == "qwen3_vl":
        tokens, wide = total // tower.merge ** 2, h * tower.merge ** 2
        merger = [ElementwiseOp("vit_merger_norm", total, h, 2 * h * ab),
                  GemmOp("vit_merger_fc1", tokens, wide // tp, wide),
                  ElementwiseOp("vit_gelu", tokens, wide // tp, 2 * (wide // tp) * ab),
                  GemmOp("vit_merger_fc2", tokens, tower.out_hidden, wide // tp)]
        ops += [(op, 1 + tower.num_deepstack) for op in merger]
    else:           # SigLIP + Gemma 3's projector
        tokens = len(patches) * tower.tokens_per_image
        ops += [(ElementwiseOp("vit_post_norm", total, h, 2 * h * ab), 1),
                (ElementwiseOp("vit_pool", total, h, h * ab), 1),
                (ElementwiseOp("mm_projector_norm", tokens, h, 2 * h * ab), 1),
                (GemmOp("mm_projector", tokens, tower.out_hidden, h), 1)]
    return ops


def encoder_all_reduces(tower: VisionTower, patches: tuple[int, ...]) -> list[tuple[float, int]]:
    """(bytes, count) of the all-reduces of the weights-split tower over ``patches``: two per block
    (after proj and fc2) over the patches' hidden states, one per Qwen merger over its tokens."""
    total = sum(patches)
    out = [(2.0 * total * tower.hidden, 2 * tower.depth)]
    if tower.kind == "qwen3_vl":
        out.append((2.0 * (total // tower.merge ** 2) * tower.out_hidden, 1 + tower.num_deepstack))
    return out


def output_tokens(tower: VisionTower, patches: tuple[int, ...]) -> int:
    """Embeddings the tower outputs for images of ``patches`` patches (the all-gather's rows in
    data mode)."""
    if tower.kind == "siglip":
        return len(patches) * tower.tokens_per_image
    return sum(patches) // tower.merge ** 2


def layout_images(specs: list[RequestSpec], model: ModelSpec, image_limit: int) -> list[RequestSpec]:
    """``specs`` with their images laid out for the served ``model``'s tower (``place_images``);
    ValueError (one line, ``image_request_error``) for the first request the engine cannot serve."""
    if not any(s.images for s in specs):
        return specs
    sizes: dict[str, tuple[int, int]] = {}
    for s in specs:
        if (err := image_request_error(s, model, image_limit)) is not None:
            raise ValueError(err)
        for ident, size in zip(s.image_ids, s.images):
            if ident and sizes.setdefault(ident, size) != size:
                raise ValueError(f"image id {ident!r} names a {size[0]}x{size[1]} image in request {s.request_id!r} "
                                 f"and a {sizes[ident][0]}x{sizes[ident][1]} one before; an id is one image's content")
    return [place_images(s, model.vision) if s.images else s for s in specs]


def refuse_images(specs: list[RequestSpec], where: str) -> None:
    """ValueError (one line) when a request of ``specs`` carries images: ``where`` (an engine or
    architecture) does not simulate them."""
    first = next((s for s in specs if s.images), None)
    if first is not None:
        raise ValueError(f"request {first.request_id!r} carries images, which {where} does not simulate; images are "
                         "simulated on vLLM engines, co-located or P/D")


def encoder_summary(specs: list[RequestSpec], schedulers: list) -> dict[str, int]:
    """The images the requests carried, those the schedulers' towers encoded (a preempted request's
    are encoded again; an image in the encoder cache is not) and the cache entries evicted; {}
    without images."""
    encoders = [s.encoder for s in schedulers if s.encoder is not None]
    if not encoders or not any(s.images for s in specs):
        return {}
    return {"mm_images": sum(len(s.images) for s in specs),
            "mm_items_encoded": sum(e.num_encoded for e in encoders),
            "mm_encoder_cache_evictions": sum(e.num_evicted for e in encoders)}


def image_request_error(spec: RequestSpec, model: ModelSpec, image_limit: int) -> str | None:
    """Why an engine serving ``model`` cannot serve ``spec``'s images (None: it can): no vision
    tower (a text-only model, --language-model-only, image limit 0), a tower the simulator does not
    know or whose images it does not simulate, or more images than --limit-mm-per-prompt allows
    (vLLM rejects the request)."""
    if not spec.images:
        return None
    tower = model.vision
    if tower is not None and (err := tower.image_error()) is not None:
        return err
    if tower is None and model.has_vision_encoder:
        return (f"{model.name}'s vision tower is not one whose images are simulated (Qwen3-VL, Qwen3.5 / Qwen3.6, "
                "Gemma 3)")
    if tower is None or image_limit == 0:
        return (f"request {spec.request_id!r} carries {len(spec.images)} image(s) but the engine serves no images "
                "(a text-only model, --language-model-only, or --limit-mm-per-prompt image 0)")
    if len(spec.images) > image_limit:
        return (f"request {spec.request_id!r} carries {len(spec.images)} images; --limit-mm-per-prompt allows "
                f"{image_limit} (vLLM rejects it)")
    return None
