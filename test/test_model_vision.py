"""Image preprocessing, vision encoder per-image independence, prompt positions, VLM.embed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.positions import prompt_positions
from flashdrive_ros.model.preprocess import (
    IMAGE_MEAN,
    IMAGE_STD,
    fit_image_size,
    preprocess_images,
    resize_images,
)
from flashdrive_ros.model.vision import VisionEncoder
from flashdrive_ros.model.vlm import VLM

IMAGE_TOKEN = 4000
TOL = 1e-5


@pytest.fixture(scope="module")
def cfg():
    return tiny()


@pytest.fixture(scope="module")
def encoder(cfg):
    torch.manual_seed(0)
    return VisionEncoder(cfg.vision).eval()


def _images(n: int, h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)


def test_patch_order_matches_hf_image_processor(cfg):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    v = cfg.vision
    images = _images(2, 48, 64)
    processor = Qwen2VLImageProcessorPil(
        do_resize=False, image_mean=list(IMAGE_MEAN), image_std=list(IMAGE_STD),
        patch_size=v.patch_size, temporal_patch_size=v.temporal_patch_size,
        merge_size=v.spatial_merge_size)
    ref = processor(images=list(images), return_tensors="pt")
    patches, grid = preprocess_images(images, v, (48, 64))
    assert torch.equal(grid, ref["image_grid_thw"])
    assert torch.allclose(patches, ref["pixel_values"].float(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("size", [(1080, 1920), (320, 576), (50, 40), (4000, 3000), (33, 2000)])
def test_fit_image_size_matches_qwen_smart_resize(size):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    h, w = size
    for factor, lo, hi in ((32, 256 * 256, 4096 * 4096), (32, 32 * 32, 576 * 320),
                           (16, 16 * 16, 64 * 48)):
        fitted = fit_image_size(h, w, factor, lo, hi)
        assert fitted == smart_resize(h, w, factor, lo, hi)
        assert fitted[0] % factor == 0 and fitted[1] % factor == 0


def test_resize_keeps_constant_image_and_shape():
    images = np.full((2, 37, 53, 3), 77, dtype=np.uint8)
    out = resize_images(images, (32, 48))
    assert out.shape == (2, 3, 32, 48)
    assert torch.allclose(out, torch.full_like(out, 77.0), atol=1e-3, rtol=0)
    same = resize_images(_images(1, 32, 48), (32, 48))
    assert torch.equal(same, torch.from_numpy(_images(1, 32, 48)).permute(0, 3, 1, 2).float())


def test_preprocess_rejects_bad_input(cfg):
    v = cfg.vision
    with pytest.raises(TypeError, match="uint8"):
        preprocess_images(_images(1, 48, 64).astype(np.float32), v, (48, 64))
    with pytest.raises(ValueError, match=r"\[N, H, W, 3\]"):
        preprocess_images(_images(1, 48, 64)[..., :2], v, (48, 64))
    with pytest.raises(ValueError, match="multiple"):
        preprocess_images(_images(1, 48, 64), v, (40, 64))
    with pytest.raises(ValueError):
        fit_image_size(0, 10, 32)


def test_each_image_encodes_independently(cfg, encoder):
    v = cfg.vision
    patches_a, grid_a = preprocess_images(_images(3, 48, 64, seed=1), v, (48, 64))
    patches_b, grid_b = preprocess_images(_images(1, 30, 30, seed=2), v, (32, 64))
    with torch.no_grad():
        together, deep_together = encoder(torch.cat([patches_a, patches_b]),
                                          torch.cat([grid_a, grid_b]))
        singles = []
        for i in range(3):
            n = int(grid_a[i].prod())
            singles.append(encoder(patches_a[i * n:(i + 1) * n], grid_a[i:i + 1]))
        singles.append(encoder(patches_b, grid_b))
    assert together.shape == (3 * 12 + 8, v.out_hidden_size)
    assert len(deep_together) == len(v.deepstack_visual_indexes)
    assert torch.allclose(together, torch.cat([s[0] for s in singles]), atol=TOL, rtol=0)
    for level in range(len(deep_together)):
        expected = torch.cat([s[1][level] for s in singles])
        assert torch.allclose(deep_together[level], expected, atol=TOL, rtol=0)
    assert not torch.allclose(singles[0][0], singles[1][0], atol=1e-3)


def test_encoder_rejects_inconsistent_grid(cfg, encoder):
    patches, grid = preprocess_images(_images(1, 48, 64), cfg.vision, (48, 64))
    with pytest.raises(ValueError, match="patches"):
        encoder(patches[:-4], grid)
    with pytest.raises(ValueError, match="grid"):
        encoder(patches, torch.tensor([[1, 6, 7]]))
    with pytest.raises(ValueError, match="pixel_patches"):
        encoder(patches[:, :-1], grid)


def test_adjacent_images_and_count_errors():
    grid = torch.tensor([[1, 4, 4], [1, 4, 6]])
    ids = torch.tensor([[1, 2] + [IMAGE_TOKEN] * 10 + [3]])
    pos = prompt_positions(ids, grid, IMAGE_TOKEN, 2)
    assert pos[:, 0, :6].tolist() == [[0, 1, 2, 2, 2, 2], [0, 1, 2, 2, 3, 3],
                                      [0, 1, 2, 3, 2, 3]]
    assert pos[:, 0, 6:12].tolist() == [[4] * 6, [4, 4, 4, 5, 5, 5], [4, 5, 6, 4, 5, 6]]
    assert pos[:, 0, 12].tolist() == [7, 7, 7]
    with pytest.raises(ValueError, match="images in grid_thw"):
        prompt_positions(ids, grid[:1], IMAGE_TOKEN, 2)
    with pytest.raises(ValueError, match="prompt holds"):
        prompt_positions(ids[:, :6], grid[:1].repeat(2, 1), IMAGE_TOKEN, 2)
    with pytest.raises(ValueError, match="needs"):
        prompt_positions(ids[:, :9], grid, IMAGE_TOKEN, 2)


def test_vlm_embed_places_images_in_order(cfg):
    torch.manual_seed(0)
    vlm = VLM(cfg.vision, cfg.text).eval()
    patches, grid = preprocess_images(_images(2, 48, 64, seed=3), cfg.vision, (48, 64))
    ids = torch.tensor([[5] + [IMAGE_TOKEN] * 12 + [6, 7] + [IMAGE_TOKEN] * 12 + [8]])
    with torch.no_grad():
        embeds, mask, deepstack = vlm.embed(ids, patches, grid, IMAGE_TOKEN)
        image_embeds, _ = vlm.model.visual(patches, grid)
        text_only, empty_mask, no_deepstack = vlm.embed(ids[:, :1], None, None, IMAGE_TOKEN)
    assert torch.equal(mask, ids == IMAGE_TOKEN)
    assert torch.allclose(embeds[0, 1:13], image_embeds[:12])
    assert torch.allclose(embeds[0, 15:27], image_embeds[12:])
    assert torch.equal(embeds[0, 13], vlm.model.language_model.embed_tokens.weight[6])
    assert len(deepstack) == 2 and deepstack[0].shape == (24, cfg.text.hidden_size)
    assert not empty_mask.any() and no_deepstack == [] and text_only.shape == (1, 1, 128)
    with pytest.raises(ValueError, match="image tokens"):
        vlm.embed(ids[:, :14], patches, grid, IMAGE_TOKEN)
    with pytest.raises(ValueError, match="vocabulary"):
        vlm.embed(torch.tensor([[cfg.text.vocab_size]]), None, None, IMAGE_TOKEN)
