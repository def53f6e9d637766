"""Parity of our Qwen3-VL (vision, positions, backbone, lm_head) with HF transformers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flashdrive_ros.model.config import preset, tiny
from flashdrive_ros.model.history import HistoryTokenizer
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import next_position, prompt_positions, text_positions
from flashdrive_ros.model.preprocess import preprocess_images
from flashdrive_ros.model.prompt import PromptBuilder
from flashdrive_ros.model.tokenizer import build_tokenizer
from flashdrive_ros.model.vlm import VLM

transformers = pytest.importorskip("transformers")

IMAGE_TOKEN = 4000
VISION_START = 4001
VISION_END = 4002
VIDEO_TOKEN = 4003
HISTORY_TOKEN = 4010
TOL = 1e-4
CORPUS = ["Front camera: frame 0 the lead car brakes, so the ego vehicle slows down.",
          "output the chain-of-thought reasoning of the driving process, then output the "
          "future trajectory. You are a driving assistant that generates safe and accurate "
          "actions."] * 10


def _hf_model(cfg, image_token: int = IMAGE_TOKEN, video_token: int = VIDEO_TOKEN,
              vision_start: int = VISION_START, vision_end: int = VISION_END
              ) -> torch.nn.Module:
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    v, t = cfg.vision, cfg.text
    hf_cfg = Qwen3VLConfig(
        vision_config=dict(
            depth=v.depth, hidden_size=v.hidden_size, hidden_act=v.hidden_act,
            intermediate_size=v.intermediate_size, num_heads=v.num_heads,
            in_channels=v.in_channels, patch_size=v.patch_size,
            spatial_merge_size=v.spatial_merge_size, temporal_patch_size=v.temporal_patch_size,
            out_hidden_size=v.out_hidden_size, num_position_embeddings=v.num_position_embeddings,
            deepstack_visual_indexes=list(v.deepstack_visual_indexes),
            rope_parameters={"rope_type": "axial", "rope_theta": v.rope_theta}),
        text_config=dict(
            vocab_size=t.vocab_size, hidden_size=t.hidden_size,
            intermediate_size=t.intermediate_size, num_hidden_layers=t.num_hidden_layers,
            num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
            head_dim=t.head_dim, hidden_act=t.hidden_act, rms_norm_eps=t.rms_norm_eps,
            max_position_embeddings=t.max_position_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": t.rope_theta,
                             "mrope_section": list(t.mrope_section),
                             "mrope_interleaved": True}),
        image_token_id=image_token, video_token_id=video_token,
        vision_start_token_id=vision_start, vision_end_token_id=vision_end,
        tie_word_embeddings=False)
    hf_cfg._attn_implementation = "eager"
    hf_cfg.vision_config._attn_implementation = "eager"
    hf_cfg.text_config._attn_implementation = "eager"
    return Qwen3VLForConditionalGeneration(hf_cfg).eval()


def _ours(cfg) -> VLM:
    torch.manual_seed(0)
    model = VLM(cfg.vision, cfg.text).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))
    return model


def _load_into_hf(ours: VLM, hf: torch.nn.Module) -> None:
    ours_sd = ours.state_dict()
    hf_keys = set(hf.state_dict())
    assert set(ours_sd) == hf_keys, (sorted(set(ours_sd) ^ hf_keys))[:10]
    missing, unexpected = hf.load_state_dict(ours_sd, strict=True)
    assert not missing and not unexpected


def _prompt(tokens_per_image: list[int], rng: np.random.Generator) -> torch.Tensor:
    """View-major prompt: per camera a label, per frame 'frame i' + an image; history; text."""
    ids = [int(x) for x in rng.integers(10, 3000, size=5)]
    image = 0
    for camera in range(2):
        ids += [3100 + camera, 3200]
        for frame in range(2):
            ids += [3300 + frame, VISION_START] + [IMAGE_TOKEN] * tokens_per_image[image]
            ids += [VISION_END]
            image += 1
    ids += [3400] + [HISTORY_TOKEN + int(x) for x in rng.integers(0, 40, size=12)] + [3401]
    ids += [int(x) for x in rng.integers(10, 3000, size=7)]
    return torch.tensor([ids], dtype=torch.long)


@pytest.fixture(scope="module")
def setup():
    cfg = tiny()
    ours = _ours(cfg)
    hf = _hf_model(cfg)
    _load_into_hf(ours, hf)
    rng = np.random.default_rng(0)
    cam_a = rng.integers(0, 256, size=(2, 60, 90, 3), dtype=np.uint8)
    cam_b = rng.integers(0, 256, size=(2, 50, 40, 3), dtype=np.uint8)
    patches_a, grid_a = preprocess_images(cam_a, cfg.vision, (48, 64))
    patches_b, grid_b = preprocess_images(cam_b, cfg.vision, (64, 32))
    patches = torch.cat([patches_a, patches_b])
    grid = torch.cat([grid_a, grid_b])
    per_image = ours.model.visual.tokens_per_image(grid)
    input_ids = _prompt(per_image, rng)
    return cfg, ours, hf, patches, grid, input_ids


def test_state_dict_keys_match_hf(setup):
    _, ours, hf, *_ = setup
    assert set(ours.state_dict()) == set(hf.state_dict())
    assert any(k.startswith("model.visual.deepstack_merger_list.") for k in ours.state_dict())


@pytest.mark.parametrize("name", ["alpamayo-r1-10b", "alpamayo-1.5-10b"])
def test_release_size_state_dict_names_and_shapes_match_hf(name):
    cfg = preset(name)
    with torch.device("meta"):
        ours = VLM(cfg.vision, cfg.text)
        hf = _hf_model(cfg)
    mine = {k: tuple(v.shape) for k, v in ours.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in hf.state_dict().items()}
    assert mine == theirs


@pytest.mark.parametrize("uniform", [True, False])
def test_vision_encoder_matches_hf(setup, uniform):
    _, ours, hf, patches, grid, _ = setup
    if uniform:
        n = int(grid[:2].prod(-1).sum())
        patches, grid = patches[:n], grid[:2]
    with torch.no_grad():
        embeds, deepstack = ours.model.visual(patches, grid)
        ref = hf.model.visual(patches, grid_thw=grid, return_dict=True)
    assert torch.allclose(embeds, ref.pooler_output, atol=TOL, rtol=0)
    assert len(deepstack) == len(ref.deepstack_features) == 2
    for mine, theirs in zip(deepstack, ref.deepstack_features):
        assert torch.allclose(mine, theirs, atol=TOL, rtol=0)


def test_positions_match_hf_rope_index(setup):
    cfg, ours, hf, _, grid, input_ids = setup
    mm_types = (input_ids == IMAGE_TOKEN).int()
    ref, _ = hf.model.get_rope_index(input_ids, mm_types, image_grid_thw=grid)
    mine = prompt_positions(input_ids, grid, IMAGE_TOKEN, cfg.vision.spatial_merge_size)
    assert torch.equal(mine, ref)


def test_prefill_matches_hf_hidden_states_and_logits(setup):
    cfg, ours, hf, patches, grid, input_ids = setup
    t = input_ids.shape[1]
    layers = cfg.text.num_hidden_layers
    with torch.no_grad():
        ref = hf(input_ids=input_ids, pixel_values=patches, image_grid_thw=grid,
                 mm_token_type_ids=(input_ids == IMAGE_TOKEN).int(),
                 output_hidden_states=True, return_dict=True)
        embeds, visual_mask, deepstack = ours.embed(input_ids, patches, grid, IMAGE_TOKEN)
        positions = prompt_positions(input_ids, grid, IMAGE_TOKEN,
                                     cfg.vision.spatial_merge_size)
        cache = KVCache(layers, 1, cfg.text.num_key_value_heads, t + 8, cfg.text.head_dim)
        out = ours.model.language_model(
            embeds, positions, cache, torch.arange(t), visual_mask=visual_mask,
            deepstack=deepstack, output_layers=tuple(range(layers)))
        logits = ours.logits(out.hidden)
    assert cache.length == t
    assert torch.allclose(out.hidden, ref.hidden_states[-1], atol=TOL, rtol=0)
    for i in range(layers - 1):
        assert torch.allclose(out.layer_hidden[i], ref.hidden_states[i + 1], atol=TOL, rtol=0), i
    assert torch.allclose(logits, ref.logits, atol=TOL, rtol=0)
    assert (logits - ref.logits).abs().max() < TOL


def test_chunked_prefill_and_decode_match_hf(setup):
    cfg, ours, hf, patches, grid, input_ids = setup
    next_token = torch.tensor([[1234]])
    full_ids = torch.cat([input_ids, next_token], dim=1)
    t = input_ids.shape[1]
    with torch.no_grad():
        ref = hf(input_ids=full_ids, pixel_values=patches, image_grid_thw=grid,
                 mm_token_type_ids=(full_ids == IMAGE_TOKEN).int(), return_dict=True).logits
        embeds, visual_mask, deepstack = ours.embed(input_ids, patches, grid, IMAGE_TOKEN)
        positions = prompt_positions(input_ids, grid, IMAGE_TOKEN,
                                     cfg.vision.spatial_merge_size)
        cache = KVCache(cfg.text.num_hidden_layers, 1, cfg.text.num_key_value_heads, t + 4,
                        cfg.text.head_dim)
        backbone = ours.model.language_model
        chunk_logits = []
        seen_visual = 0
        for start, end in ((0, 17), (17, 40), (40, t)):
            mask = visual_mask[:, start:end]
            count = int(mask.sum())
            levels = [d[seen_visual:seen_visual + count] for d in deepstack]
            seen_visual += count
            out = backbone(embeds[:, start:end], positions[:, :, start:end], cache,
                           torch.arange(start, end), visual_mask=mask, deepstack=levels)
            chunk_logits.append(ours.logits(out.hidden))
        step_embeds, _, _ = ours.embed(next_token, None, None, IMAGE_TOKEN)
        step_pos = text_positions(next_position(positions), 1)
        step = backbone(step_embeds, step_pos, cache, torch.tensor([t]))
        step_logits = ours.logits(step.hidden)
    assert torch.allclose(torch.cat(chunk_logits, dim=1), ref[:, :t], atol=TOL, rtol=0)
    assert torch.allclose(step_logits, ref[:, t:], atol=TOL, rtol=0)


def _prefill_logits(vlm: VLM, cfg, input_ids: torch.Tensor, patches: torch.Tensor,
                    grid: torch.Tensor, image_token: int) -> torch.Tensor:
    """Our prompt prefill: logits [1, T, V]."""
    t, text = input_ids.shape[1], cfg.text
    embeds, visual_mask, deepstack = vlm.embed(input_ids, patches, grid, image_token)
    positions = prompt_positions(input_ids, grid, image_token, cfg.vision.spatial_merge_size)
    cache = KVCache(text.num_hidden_layers, 1, text.num_key_value_heads, t, text.head_dim)
    out = vlm.model.language_model(embeds, positions, cache, torch.arange(t),
                                   visual_mask=visual_mask, deepstack=deepstack)
    return vlm.logits(out.hidden)


@pytest.mark.parametrize("layout", ["alpamayo-1", "alpamayo-1.5"])
def test_built_alpamayo_prompt_matches_hf(layout):
    tok = build_tokenizer(CORPUS, vocab_size=4600)
    cfg = tiny(vocab_size=tok.vocab_size)
    cfg = dataclasses.replace(cfg, prompt=dataclasses.replace(cfg.prompt, layout=layout))
    image_token = tok.token_id("<|image_pad|>")
    ours = _ours(cfg)
    hf = _hf_model(cfg, image_token, tok.token_id("<|video_pad|>"),
                   tok.token_id("<|vision_start|>"), tok.token_id("<|vision_end|>"))
    _load_into_hf(ours, hf)
    history = HistoryTokenizer(cfg.action, tok.traj_token_start)
    t = np.arange(-15, 1)[:, None] * 0.1
    history_ids = history.encode(np.concatenate([4 * t, 0.2 * t * t, 0 * t], axis=1))
    input_ids = torch.tensor([PromptBuilder(cfg, tok).build(history_ids).token_ids])
    p = cfg.prompt
    frames = np.random.default_rng(1).integers(
        0, 256, size=(len(p.camera_names) * p.num_frames, 60, 80, 3), dtype=np.uint8)
    patches, grid = preprocess_images(frames, cfg.vision, (p.image_height, p.image_width))
    mm_types = (input_ids == image_token).int()
    with torch.no_grad():
        ref_positions, _ = hf.model.get_rope_index(input_ids, mm_types, image_grid_thw=grid)
        ref = hf(input_ids=input_ids, pixel_values=patches, image_grid_thw=grid,
                 mm_token_type_ids=mm_types, return_dict=True).logits
        logits = _prefill_logits(ours, cfg, input_ids, patches, grid, image_token)
    positions = prompt_positions(input_ids, grid, image_token, cfg.vision.spatial_merge_size)
    assert torch.equal(positions, ref_positions)
    assert (logits - ref).abs().max() <= TOL


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_bf16_on_cuda_close_to_hf(setup):
    cfg, ours, hf, patches, grid, input_ids = setup
    t = input_ids.shape[1]
    ours_gpu = VLM(cfg.vision, cfg.text).eval()
    ours_gpu.load_state_dict(ours.state_dict())
    ours_gpu.to("cuda", torch.bfloat16)
    hf_gpu = _hf_model(cfg)
    hf_gpu.load_state_dict(ours.state_dict())
    hf_gpu.to("cuda", torch.bfloat16)
    ids, pix, grid_gpu = input_ids.cuda(), patches.cuda(), grid.cuda()
    with torch.no_grad():
        ref32 = hf(input_ids=input_ids, pixel_values=patches, image_grid_thw=grid,
                   mm_token_type_ids=(input_ids == IMAGE_TOKEN).int()).logits
        ref16 = hf_gpu(input_ids=ids, pixel_values=pix.bfloat16(), image_grid_thw=grid_gpu,
                       mm_token_type_ids=(ids == IMAGE_TOKEN).int()).logits.float().cpu()
        embeds, mask, deepstack = ours_gpu.embed(ids, pix.bfloat16(), grid_gpu, IMAGE_TOKEN)
        positions = prompt_positions(ids, grid_gpu, IMAGE_TOKEN, cfg.vision.spatial_merge_size)
        cache = KVCache(cfg.text.num_hidden_layers, 1, cfg.text.num_key_value_heads, t,
                        cfg.text.head_dim, dtype=torch.bfloat16, device="cuda")
        out = ours_gpu.model.language_model(embeds, positions, cache,
                                            torch.arange(t, device="cuda"),
                                            visual_mask=mask, deepstack=deepstack)
        mine16 = ours_gpu.logits(out.hidden).float().cpu()
    hf_error = (ref16 - ref32).abs().max().item()
    my_error = (mine16 - ref32).abs().max().item()
    assert my_error <= max(2.0 * hf_error, 0.05), (my_error, hf_error)
