"""Image requests: the towers' token counts, the prompt layout, the encoder budget and cache, the
encoder's price, and image workloads end to end (the scheduler's parity with vLLM:
tests/oracle/test_mm_parity.py)."""

from __future__ import annotations

import pytest

from frontier.model_spec import load_model_spec
from frontier.ops import EncoderAttentionOp, GemmOp
from frontier.vision import ImageItem, smart_resize
from simulator.batch_engine import BatchEngine
from simulator.cost_model import RooflineCostModel
from simulator.encoder_cache import EncoderScheduler, MmInput
from simulator.engine_args import EngineArgs
from simulator.multimodal import (IMAGE_TOKEN_ID, MARKER_TOKEN_ID, deal_images, encoder_all_reduces, encoder_ops,
                                  layout_images, place_images)
from simulator.request import Request, RequestSpec
from simulator.simulation import SimulationSpec, resolve_engine, run_simulation
from simulator.workload import WorkloadSpec, generate_requests

QWEN, GEMMA = "Qwen/Qwen3-VL-8B-Instruct", "google/gemma-3-27b-it"


# ---- the towers ------------------------------------------------------------------------------
def test_qwen3_vl_image_tokens_follow_smart_resize():
    tower = load_model_spec(QWEN).vision
    # 720 x 1280: rounded to 704 x 1280 (22.5 rounds to 22), 44 x 80 patches of 16, 4 a token
    assert tower.image(720, 1280) == ImageItem(720, 1280, 880, 880, 3520, 2)
    assert tower.image(256, 256) == ImageItem(256, 256, 64, 64, 256, 2)      # exactly min_pixels
    # below min_pixels: scaled up to 128 x 512 (ceil); above max_pixels: scaled down (floor)
    assert smart_resize(100, 400, 32, 65_536, 16_777_216) == (128, 512)
    assert tower.image(100, 400).num_embeds == 4 * 16
    assert smart_resize(8000, 8000, 32, 65_536, 16_777_216) == (4096, 4096)
    assert tower.image(8000, 8000).num_embeds == 16_384
    assert tower.max_tokens_per_item(("image", "video")) == 16_384
    assert tower.max_tokens_per_item(("video",)) == 12_288
    with pytest.raises(ValueError, match="aspect ratio over 200"):
        tower.image(10, 2100)
    with pytest.raises(ValueError, match="image size 0x5"):
        tower.image(0, 5)


def test_gemma3_image_is_256_tokens_in_a_260_token_run():
    tower = load_model_spec(GEMMA).vision
    assert (tower.kind, tower.merge, tower.image_size, tower.tokens_per_image) == ("siglip", 4, 896, 256)
    assert tower.image(720, 1280) == ImageItem(720, 1280, 260, 256, 4096, 0)
    assert tower.max_tokens_per_item(("image",)) == 256


def test_kimi_towers_images_are_refused():
    tower = load_model_spec("moonshotai/Kimi-K2.5").vision
    assert tower.kind == "moonvit"
    with pytest.raises(ValueError, match="MoonViT are not simulated"):
        tower.image(256, 256)


# ---- the prompt layout -----------------------------------------------------------------------
def test_place_images_after_the_text_with_the_template_markers():
    tower = load_model_spec(QWEN).vision
    spec = RequestSpec("7", 0.0, 100, 10, images=((256, 256), (720, 1280)))
    laid = place_images(spec, tower)
    # text [0, 100), vision start, run [101, 165), vision end, start, run [167, 1047), end
    assert laid.mm_inputs == (MmInput(101, 64, 64, 256, "7/image0"), MmInput(167, 880, 880, 3520, "7/image1"))
    assert (laid.prompt_len, laid.image_tokens) == (1048, 948)
    ids = place_images(RequestSpec("7", 0.0, 3, 10, prompt_token_ids=(5, 6, 7), images=((256, 256),)),
                       tower).prompt_token_ids
    assert ids == (5, 6, 7, MARKER_TOKEN_ID) + (IMAGE_TOKEN_ID,) * 64 + (MARKER_TOKEN_ID,)
    gemma = place_images(RequestSpec("g", 0.0, 10, 5, images=((50, 60),)), load_model_spec(GEMMA).vision)
    assert gemma.mm_inputs == (MmInput(10, 260, 256, 4096, "g/image0"),) and gemma.prompt_len == 270
    assert gemma.mm_inputs[0].lead == 2


def test_layout_refuses_what_the_engine_cannot_serve():
    spec = [RequestSpec("a", 0.0, 10, 5, images=((256, 256), (256, 256)))]
    qwen = load_model_spec(QWEN)
    with pytest.raises(ValueError, match="--limit-mm-per-prompt allows 1"):
        layout_images(spec, qwen, 1)
    assert layout_images(spec, qwen, 2)[0].prompt_len == 10 + 2 * 66
    with pytest.raises(ValueError, match="serves no images"):
        layout_images(spec, load_model_spec("meta-llama/Llama-3.1-8B"), 999)
    with pytest.raises(ValueError, match="Llama-4-Scout-17B-16E-Instruct's vision tower is not one"):
        layout_images(spec, load_model_spec("meta-llama/Llama-4-Scout-17B-16E-Instruct"), 999)
    text = [RequestSpec("b", 0.0, 10, 5)]
    assert layout_images(text, qwen, 0) is text


def test_image_blocks_hash_the_image():
    # explicit prompts: equal tokens but other images never share the blocks holding them
    def req(ident: str) -> Request:
        ids = tuple(range(16)) + (IMAGE_TOKEN_ID,) * 32
        return Request.from_spec(RequestSpec(ident, 0.0, 48, 1, prompt_token_ids=ids,
                                              mm_inputs=(MmInput(16, 32, 32, 128, ident[0]),)), 16)
    a1, a2, b = req("a1"), req("a2"), req("b1")
    assert a1.block_hashes == a2.block_hashes
    assert a1.block_hashes[0] == b.block_hashes[0] and a1.block_hashes[1:] != b.block_hashes[1:]
    assert a1.block_hashes[2] != b.block_hashes[2]


# ---- the encoder budget and cache ------------------------------------------------------------
def _items(*specs: tuple[int, int, str]) -> tuple[MmInput, ...]:
    return tuple(MmInput(o, n, n, 4 * n, i) for o, n, i in specs)


def test_try_schedule_stops_the_window_before_an_image_the_budget_cannot_take():
    enc = EncoderScheduler(300)
    items = _items((10, 200, "x"), (210, 200, "y"))
    # window [0, 400) covers both; the budget takes x only, so the window stops at y's start
    assert enc.try_schedule("r", items, 0, 400, 300) == ([0], 210, 100, [])
    enc.allocate("r", items, [0], [])
    assert (enc.num_free_slots, enc.num_encoded) == (100, 1)
    # next step [210, 410): y does not fit the cache (x still held) -> nothing, as vLLM
    assert enc.try_schedule("r", items, 210, 200, 300) == ([], 0, 300, [])
    enc.free_done("r", items, 210)      # x's run is computed: its entry becomes freeable
    assert enc.try_schedule("r", items, 210, 200, 300) == ([1], 200, 100, [])
    assert (enc.num_evicted, "x" in enc.cached) == (1, False)


def test_cached_and_repeated_images_are_not_encoded_again():
    enc = EncoderScheduler(1000)
    first, second = _items((0, 100, "cat")), _items((5, 100, "cat"), (105, 100, "cat"))
    enc.allocate("a", first, *enc.try_schedule("a", first, 0, 100, 1000)[::3])
    assert enc.try_schedule("b", second, 0, 300, 1000) == ([], 300, 1000, [])   # both hit the cache
    assert enc.cached["cat"] == {"a", "b"}
    enc.free("a", first)
    enc.free("b", second)
    assert enc.freeable == {"cat": 100} and enc.num_freeable_slots == 1000


def test_marker_only_windows_and_disable_chunked_mm_input():
    gemma = (MmInput(100, 260, 256, 4096, "g"),)
    enc = EncoderScheduler(512)
    assert enc.try_schedule("r", gemma, 0, 102, 512) == ([], 102, 512, [])      # only the two leading markers
    assert enc.try_schedule("r", gemma, 0, 103, 512) == ([0], 103, 256, [])
    strict = EncoderScheduler(512, disable_chunked_mm_input=True)
    assert strict.try_schedule("r", gemma, 0, 300, 512) == ([], 100, 512, [])   # would split the run
    assert strict.try_schedule("r", gemma, 100, 260, 512) == ([0], 260, 256, [])


def test_engine_encoder_budget_is_vllms():
    def resolved(**kw):
        return resolve_engine(EngineArgs(model=QWEN, gpu="H100", **kw))
    assert (resolved().encoder_budget, resolved().image_limit) == (16_384, 999)
    assert resolved(max_num_batched_tokens=32_768).encoder_budget == 32_768
    assert resolved(limit_mm_per_prompt='{"image": 0}').encoder_budget == 12_288    # video only
    assert resolved(limit_mm_per_prompt='{"image": 0}').image_limit == 0
    assert resolved(language_model_only=True).encoder_budget == 0
    assert resolved().scheduler_config().encoder_budget == 16_384
    with pytest.raises(ValueError, match=r"largest image item \(16384 tokens\) exceeds --max-num-batched-tokens"):
        resolved(disable_chunked_mm_input=True).scheduler_config()
    gemma = resolve_engine(EngineArgs(model=GEMMA, gpu="H100"))
    assert gemma.encoder_budget == gemma.max_num_batched_tokens == 8192


# ---- the encoder's price ---------------------------------------------------------------------
def test_encoder_ops_of_the_qwen_tower():
    tower = load_model_spec(QWEN).vision
    ops = dict((getattr(op, "name", type(op).__name__), (op, n)) for op, n in encoder_ops(tower, (256, 3520), 2))
    assert ops["vit_qkv"] == (GemmOp("vit_qkv", 3776, 1728, 1152), 27)
    assert ops["vit_fc2"] == (GemmOp("vit_fc2", 3776, 1152, 2152), 27)
    assert ops["EncoderAttentionOp"] == (EncoderAttentionOp((256, 3520), 8, 72), 27)
    assert ops["vit_patch_embed"] == (GemmOp("vit_patch_embed", 3776, 1152, 1536), 1)
    assert ops["vit_merger_fc1"] == (GemmOp("vit_merger_fc1", 944, 2304, 4608), 4)     # merger + 3 deepstack
    assert ops["vit_merger_fc2"] == (GemmOp("vit_merger_fc2", 944, 4096, 2304), 4)
    assert encoder_all_reduces(tower, (256, 3520)) == [(2.0 * 3776 * 1152, 54), (2.0 * 944 * 4096, 4)]
    # a non-causal attention over p patches: p^2 query-key pairs
    op = ops["EncoderAttentionOp"][0]
    assert (op.pairs, op.flops, op.bytes_moved) == (256 ** 2 + 3520 ** 2, 4.0 * 8 * 72 * (256 ** 2 + 3520 ** 2),
                                                   4.0 * 3776 * 8 * 72 * 2)


def test_data_mode_deals_images_largest_first():
    assert deal_images((100, 400, 300, 200), 2) == [(400, 100), (300, 200)]
    assert deal_images((5,), 4) == [(5,), (), (), ()]


def test_encoder_time_in_the_step_and_its_modes():
    def engine(**kw):
        r = resolve_engine(EngineArgs(model=QWEN, gpu="H100", **kw))
        return BatchEngine(r.model, r.parallel, r.gpu, RooflineCostModel(r.gpu), r.cudagraph_config())
    one, two, data = engine(), engine(tensor_parallel_size=2), engine(tensor_parallel_size=2, mm_encoder_tp_mode="data")
    from simulator.batch_engine import BatchShape
    plain = one.step_cost(BatchShape((500,), (0,))).duration_s
    with_image = one.step_cost(BatchShape((500,), (0,), encoder_patches=(3520,))).duration_s
    assert with_image == pytest.approx(plain + one.encoder_time_s((3520,)), rel=1e-12)
    assert two.encoder_time_s((3520,)) < one.encoder_time_s((3520,))
    # data mode: two images on two ranks cost one image's tower and the gather
    assert data.encoder_time_s((3520, 3520)) == pytest.approx(data.encoder_time_s((3520,)), rel=1e-3)
    assert data.encoder_time_s((3520, 3520)) < one.encoder_time_s((3520, 3520))


# ---- end to end ------------------------------------------------------------------------------
def _run(**workload) -> object:
    args = dict(dataset_name="random-mm", num_prompts=40, request_rate=8.0, random_input_len=300,
                random_output_len=20)
    return run_simulation(SimulationSpec(engine=EngineArgs(model=QWEN, gpu="H100"),
                                         workload=WorkloadSpec(**{**args, **workload})))


def test_random_mm_simulation_encodes_every_image_once():
    result = _run()
    s = result.summary
    assert (s["completed"], s["mm_images"], s["mm_items_encoded"]) == (40, 40, 40)
    specs = generate_requests(WorkloadSpec(dataset_name="random-mm", num_prompts=40, request_rate=8.0,
                                           random_input_len=300, random_output_len=20), 151_936)
    runs = {(256, 256): 66, (720, 1280): 882}
    assert sorted(r.image_tokens for r in result.records) == sorted(runs[s.images[0]] for s in specs)
    assert all(r.prompt_len == 300 for r in result.records)      # vllm bench counts the text
    assert s["total_input_tokens"] == 40 * 300
    text = _run(dataset_name="random")
    assert s["mean_ttft_ms"] > text.summary["mean_ttft_ms"]
    again = _run().summary
    assert {k: v for k, v in again.items() if k != "sim_wall_s"} == {k: v for k, v in s.items() if k != "sim_wall_s"}


def test_image_workloads_are_refused_where_not_simulated():
    with pytest.raises(ValueError, match="serves no images"):
        run_simulation(SimulationSpec(engine=EngineArgs(model="meta-llama/Llama-3.1-8B", gpu="H100"),
                                      workload=WorkloadSpec(dataset_name="random-mm", num_prompts=2)))
    with pytest.raises(ValueError, match="carries images, which --architecture afd does not simulate"):
        run_simulation(SimulationSpec(engine=EngineArgs(model=QWEN, gpu="H100"), architecture="afd",
                                      workload=WorkloadSpec(dataset_name="random-mm", num_prompts=2)))
    with pytest.raises(ValueError, match="video items are not simulated"):
        WorkloadSpec(dataset_name="random-mm", random_mm_bucket_config="{(256, 256, 4): 1.0}")


def test_trace_images_with_shared_contents(tmp_path):
    # a trace's images column: the same id is one image, encoded once while it stays cached
    path = tmp_path / "t.jsonl"
    rows = [{"arrival_time_s": 0.1 * i, "prompt_len": 200, "output_len": 5,
             "images": [[720, 1280, "logo"]] + ([[256, 256]] if i % 2 else [])} for i in range(6)]
    path.write_text("\n".join(__import__("json").dumps(r) for r in rows))
    result = run_simulation(SimulationSpec(engine=EngineArgs(model=QWEN, gpu="H100"),
                                           workload=WorkloadSpec(dataset_name="trace", dataset_path=str(path),
                                                                 num_prompts=6)))
    s = result.summary
    assert (s["completed"], s["mm_images"], s["mm_items_encoded"]) == (6, 9, 4)   # the logo once, 3 others
    assert sorted(r.image_tokens for r in result.records) == [882] * 3 + [948] * 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival_time_s": 0, "prompt_len": 5, "output_len": 1, "images": [[720, 1280, "x"]]}\n'
                   '{"arrival_time_s": 0, "prompt_len": 5, "output_len": 1, "images": [[256, 256, "x"]]}\n')
    with pytest.raises(ValueError, match="image id 'x' names a 256x256 image in request '1' and a 720x1280"):
        run_simulation(SimulationSpec(engine=EngineArgs(model=QWEN, gpu="H100"),
                                      workload=WorkloadSpec(dataset_name="trace", dataset_path=str(bad), num_prompts=2)))
    bad.write_text('{"arrival_time_s": 0, "prompt_len": 5, "output_len": 1, "images": [[720]]}\n')
    with pytest.raises(ValueError, match=r"trace row 0: image \[720\] is not \[height, width\]"):
        generate_requests(WorkloadSpec(dataset_name="trace", dataset_path=str(bad), num_prompts=1))


def test_mm_processor_kwargs_bound_qwen_images():
    r = resolve_engine(EngineArgs(model=QWEN, gpu="H100", mm_processor_kwargs='{"max_pixels": 200704}'))
    tower = r.model.vision
    assert (tower.min_pixels, tower.max_pixels, tower.video_max_pixels) == (65_536, 200_704, 200_704)
    assert tower.image(720, 1280) == ImageItem(720, 1280, 180, 180, 720, 2)      # 320 x 576 pixels
    assert tower.max_tokens_per_item(("image", "video")) == 196
    assert r.encoder_budget == 8192                                             # max_num_batched_tokens
    big = resolve_engine(EngineArgs(model=QWEN, gpu="H100", mm_processor_kwargs={"min_pixels": 1_000_000}))
    assert big.model.vision.image(256, 256).num_embeds == 1024                  # 1024 x 1024 pixels (ceil)
    for bad, match in (('{"do_resize": false}', r"not \['do_resize'\]"), ('{"max_pixels": 0}', "pixel count >= 1"),
                       ('{"min_pixels": 9, "max_pixels": 8}', "min_pixels=9 exceeds max_pixels=8"),
                       ("max_pixels=5", "is not JSON")):
        with pytest.raises(ValueError, match=match):
            resolve_engine(EngineArgs(model=QWEN, gpu="H100", mm_processor_kwargs=bad))
    with pytest.raises(ValueError, match="not the siglip tower"):
        resolve_engine(EngineArgs(model=GEMMA, gpu="H100", mm_processor_kwargs='{"max_pixels": 5000}'))


def test_images_alone_make_a_prompt():
    # random-mm with no text: the prompt is the images' runs (vllm bench counts 0 input tokens)
    result = _run(random_input_len=0, random_mm_base_items_per_request=2, num_prompts=10)
    assert (result.summary["completed"], result.summary["total_input_tokens"], result.summary["mm_images"]) == (10, 0, 20)
    with pytest.raises(ValueError, match="prompt_len=0 of '0'; must be >= 1"):
        _run(random_input_len=0, random_mm_base_items_per_request=0, num_prompts=2)


def test_sglang_refuses_image_requests(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_time_s": 0, "prompt_len": 50, "output_len": 5, "images": [[256, 256]]}\n')
    from simulator.sglang_layout import SglangArgs
    with pytest.raises(ValueError, match="carries images, which --engine sglang does not simulate"):
        run_simulation(SimulationSpec(engine=EngineArgs(model=QWEN, gpu="H100"), sglang=SglangArgs(),
                                      workload=WorkloadSpec(dataset_name="trace", dataset_path=str(path), num_prompts=1)))
