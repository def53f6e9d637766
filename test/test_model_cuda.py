"""The model pieces on a CUDA device agree with the CPU (skipped without CUDA)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import prompt_positions
from flashdrive_ros.model.preprocess import preprocess_images
from flashdrive_ros.model.vlm import VLM

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

IMAGE_TOKEN = 4000


def test_preprocess_on_cuda_matches_cpu():
    cfg = tiny()
    images = np.random.default_rng(0).integers(0, 256, size=(3, 90, 120, 3), dtype=np.uint8)
    cpu, grid_cpu = preprocess_images(images, cfg.vision, (48, 64))
    gpu, grid_gpu = preprocess_images(images, cfg.vision, (48, 64), device="cuda")
    assert gpu.is_cuda and torch.equal(grid_cpu, grid_gpu)
    assert torch.allclose(gpu.cpu(), cpu, atol=1e-4, rtol=0)


def test_vlm_prefill_on_cuda_matches_cpu():
    cfg = tiny()
    torch.manual_seed(0)
    model = VLM(cfg.vision, cfg.text).eval()
    images = np.random.default_rng(1).integers(0, 256, size=(2, 48, 64, 3), dtype=np.uint8)
    patches, grid = preprocess_images(images, cfg.vision, (48, 64))
    ids = torch.tensor([[5, 6] + [IMAGE_TOKEN] * 12 + [7, 8] + [IMAGE_TOKEN] * 12 + [9, 10]])
    positions = prompt_positions(ids, grid, IMAGE_TOKEN, cfg.vision.spatial_merge_size)
    t = ids.shape[1]
    logits = {}
    for device in ("cpu", "cuda"):
        model.to(device)
        cache = KVCache(cfg.text.num_hidden_layers, 1, cfg.text.num_key_value_heads, t,
                        cfg.text.head_dim, device=device)
        with torch.no_grad():
            embeds, mask, deepstack = model.embed(ids.to(device), patches.to(device), grid,
                                                  IMAGE_TOKEN)
            out = model.model.language_model(embeds, positions.to(device), cache,
                                             torch.arange(t, device=device),
                                             visual_mask=mask, deepstack=deepstack)
            logits[device] = model.logits(out.hidden).cpu()
    assert torch.allclose(logits["cpu"], logits["cuda"], atol=1e-3, rtol=0)
