"""A multimodal checkpoint's vision tower: its shape, and what an image becomes in the prompt.

vLLM turns every image of a request into a run of placeholder tokens in the prompt (a
``PlaceholderRange``: offset, length) whose embeddings (``get_num_embeds``) the vision tower
computes from the image's patches. This module gives, per tower kind, the counts vLLM 0.33's
multimodal processors give:

* ``qwen3_vl`` (Qwen3-VL, Qwen3.5 / Qwen3.6: ``Qwen3_VisionTransformer``): the image is resized by
  ``smart_resize`` (transformers ``qwen2_vl.image_processing_qwen2_vl``; vLLM
  ``Qwen3VLProcessingInfo._get_vision_info``) to multiples of ``patch_size x spatial_merge_size``
  within [min_pixels, max_pixels] (the hub checkpoints' ``preprocessor_config.json``: 65,536 and
  16,777,216 pixels), giving ``grid_h x grid_w`` patches of 16 x 16 (one temporal patch of two
  copies of the frame); every ``spatial_merge_size``^2 = 4 patches become one token. The chat
  template wraps the ``<|image_pad|>`` run in ``<|vision_start|>`` / ``<|vision_end|>`` (2 prompt
  tokens outside the placeholder). The largest item: ``max_pixels / 32^2`` = 16,384 tokens
  (``get_image_size_with_most_features``).
* ``siglip`` (Gemma 3: ``SiglipVisionModel`` + ``Gemma3MultiModalProjector``): every image is
  resized to ``image_size`` square (896: 64 x 64 = 4,096 patches of 14 x 14), average-pooled to
  ``mm_tokens_per_image`` (256) tokens; the placeholder is ``"\\n\\n<start_of_image>" + 256 x
  <image_soft_token> + "<end_of_image>\\n\\n"`` (260 tokens, 256 embeddings; vLLM's
  ``Gemma3ProcessingInfo.get_image_repl``, pan-and-scan off as by default; the newline merging
  with neighbouring text is not modelled) in place of the template's ``<start_of_image>``.

Kimi-K2.5's MoonViT is counted for its weights (``frontier.model_spec``) but its images are not
simulated (``image_error``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

TOWER_KINDS = ("qwen3_vl", "siglip", "moonvit")
QWEN_MIN_PIXELS = 65_536            # hub preprocessor_config.json "size": shortest_edge (Qwen3-VL, Qwen3.5)
QWEN_MAX_PIXELS = 16_777_216        # ... longest_edge
QWEN_MAX_VIDEO_PIXELS = 25_165_824  # hub video_preprocessor_config.json longest_edge (two frames a temporal patch)
MAX_ASPECT_RATIO = 200              # smart_resize refuses a more extreme image


@dataclass(frozen=True)
class ImageItem:
    """One image in a request's prompt: the placeholder run vLLM puts in the prompt and the work
    the tower does for it.

    length: placeholder tokens in the prompt (vLLM ``PlaceholderRange.length``).
    num_embeds: of them, those carrying the tower's embeddings (``get_num_embeds``; the encoder
        budget and the encoder cache count these).
    patches: patches the tower's blocks run over (tokens before the merge / pooling).
    template_tokens: prompt tokens the chat template adds around the run (Qwen's vision start /
        end; Gemma 3's run replaces the template's ``<start_of_image>``: none).
    """

    height: int
    width: int
    length: int
    num_embeds: int
    patches: int
    template_tokens: int


@dataclass(frozen=True)
class VisionTower:
    """The vision tower's shape as vLLM builds it (module docstring for the kinds).

    hidden / intermediate / depth / num_heads: the ViT blocks (fused qkv, output projection, a
    GELU MLP of ``intermediate`` and two LayerNorms each). patch_size: pixels per patch side;
    in_channels x temporal_patch x patch_size^2 is the patch embedding's input width.
    merge: Qwen's spatial merge (2: 2 x 2 patches a token); SigLIP's pooling side (4 x 4).
    out_hidden: the text model's width the tower's tokens are projected to. num_deepstack:
    Qwen3-VL's deepstack mergers (each a merger MLP over some block's output). image_size:
    SigLIP's fixed input side (pixels). tokens_per_image: Gemma 3's tokens an image (256).
    min_pixels / max_pixels: Qwen's resize bounds (the hub's, or ``--mm-processor-kwargs``'
    min_pixels / max_pixels: ``with_pixel_bounds``); they bound videos' frames too.
    """

    kind: str
    hidden: int
    intermediate: int
    depth: int
    num_heads: int
    patch_size: int
    merge: int
    out_hidden: int
    temporal_patch: int = 1
    num_deepstack: int = 0
    image_size: int = 0
    tokens_per_image: int = 0
    min_pixels: int = QWEN_MIN_PIXELS
    max_pixels: int = QWEN_MAX_PIXELS
    video_max_pixels: int = QWEN_MAX_VIDEO_PIXELS

    def __post_init__(self) -> None:
        if self.kind not in TOWER_KINDS:
            raise ValueError(f"vision tower kind={self.kind!r}; valid: {', '.join(TOWER_KINDS)}")
        for name in ("hidden", "intermediate", "depth", "num_heads", "patch_size", "merge", "out_hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"vision tower {name}={getattr(self, name)}; must be >= 1")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.num_heads

    def image_error(self) -> str | None:
        """Why images cannot be simulated for this tower (None: they can)."""
        if self.kind == "moonvit":
            return ("images for Kimi-K2.5's MoonViT are not simulated (its patch-count rules are not built); "
                    "serve it text-only or pick Qwen3-VL / Qwen3.5 / Gemma 3")
        return None

    def image(self, height: int, width: int) -> ImageItem:
        """The placeholder and tower work of one ``height`` x ``width`` pixel image."""
        if not (isinstance(height, int) and isinstance(width, int)) or height < 1 or width < 1:
            raise ValueError(f"image size {height}x{width}; need whole pixel counts >= 1")
        if (err := self.image_error()) is not None:
            raise ValueError(err)
        if self.kind == "siglip":
            side = self.image_size // self.patch_size
            n = self.tokens_per_image
            return ImageItem(height, width, n + 4, n, side * side, 0)
        if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
            raise ValueError(f"image {height}x{width}: aspect ratio over {MAX_ASPECT_RATIO}, which the Qwen "
                             "image processor refuses")
        h, w = smart_resize(height, width, self.patch_size * self.merge, self.min_pixels, self.max_pixels)
        patches = (h // self.patch_size) * (w // self.patch_size)
        n = patches // (self.merge * self.merge)
        return ImageItem(height, width, n, n, patches, 2)

    def max_tokens_per_item(self, modalities: tuple[str, ...]) -> int:
        """vLLM's ``get_mm_max_tokens_per_item`` over the enabled ``modalities``: the most embeddings
        one item can have (the encoder budget and cache are at least this)."""
        if self.kind == "siglip":
            return self.tokens_per_image
        unit = self.patch_size * self.merge
        image = _most_features(self.max_pixels // (unit * unit))
        video = _most_features(self.video_max_pixels // self.temporal_patch // (unit * unit))
        return max([image if m == "image" else video for m in modalities] or [0])


def with_pixel_bounds(tower: VisionTower, kwargs: dict) -> VisionTower:
    """``tower`` as ``--mm-processor-kwargs`` sets it: Qwen's flat ``min_pixels`` / ``max_pixels``
    (vLLM routes them to the image and the video processor: the video's per-clip bound too);
    ValueError (one line) for another key or tower."""
    if not kwargs:
        return tower
    bad = sorted(set(kwargs) - {"min_pixels", "max_pixels"})
    if bad or tower.kind != "qwen3_vl":
        raise ValueError(f"--mm-processor-kwargs {sorted(kwargs)}: only min_pixels / max_pixels of Qwen's vision "
                         f"towers are simulated{f' (not {bad})' if bad else f', not the {tower.kind} tower'}")
    values = {k: kwargs[k] for k in ("min_pixels", "max_pixels") if k in kwargs}
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"--mm-processor-kwargs {k}={v!r}; need a pixel count >= 1")
    low, high = values.get("min_pixels", tower.min_pixels), values.get("max_pixels", tower.max_pixels)
    if low > high:
        raise ValueError(f"--mm-processor-kwargs min_pixels={low} exceeds max_pixels={high}")
    return replace(tower, min_pixels=low, max_pixels=high,
                   video_max_pixels=values.get("max_pixels", tower.video_max_pixels))


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' ``qwen2_vl`` ``smart_resize``: (height, width) rounded to multiples of
    ``factor``, scaled into [min_pixels, max_pixels] keeping the aspect ratio."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _most_features(max_seq_len: int) -> int:
    """vLLM ``Qwen2VLProcessingInfo.get_image_size_with_most_features``' token count: the largest
    n <= max_seq_len whose closest factor pair has an aspect ratio <= 200."""
    for n in range(max_seq_len, 0, -1):
        d = next(d for d in range(math.isqrt(n), 0, -1) if n % d == 0)
        if (n // d) / d <= MAX_ASPECT_RATIO:
            return n
    return 0
