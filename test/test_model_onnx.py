"""The vision encoder and the text backbone trace to ONNX (opset 20) and match onnxruntime."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from flashdrive_ros.model.backbone import TextBackbone
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import prompt_positions
from flashdrive_ros.model.preprocess import preprocess_images
from flashdrive_ros.model.vision import VisionEncoder

ort = pytest.importorskip("onnxruntime")

OPSET = 20


class _Encode(torch.nn.Module):
    def __init__(self, encoder: VisionEncoder, grid_thw: torch.Tensor) -> None:
        super().__init__()
        self.encoder = encoder
        self.grid_thw = grid_thw

    def forward(self, pixel_patches: torch.Tensor) -> tuple[torch.Tensor, ...]:
        embeds, deepstack = self.encoder(pixel_patches, self.grid_thw)
        return (embeds, *deepstack)


class _Prefill(torch.nn.Module):
    """Backbone over a fresh cache whose keys/values come back as outputs."""

    def __init__(self, backbone: TextBackbone, length: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.length = length

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, visual_mask: torch.Tensor,
                deep0: torch.Tensor, deep1: torch.Tensor) -> tuple[torch.Tensor, ...]:
        c = self.backbone.cfg
        cache = KVCache(c.num_hidden_layers, 1, c.num_key_value_heads, self.length, c.head_dim)
        out = self.backbone(embeds, positions, cache, torch.arange(self.length),
                            visual_mask=visual_mask, deepstack=[deep0, deep1])
        return out.hidden, cache.k, cache.v


def _run_onnx(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], path) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, str(path), opset_version=OPSET, dynamo=False)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    feeds = {name: x.numpy() for name, x in zip(names, inputs)}
    return session.run(None, feeds)


def test_vision_and_backbone_export_match_onnxruntime(tmp_path):
    cfg = tiny()
    torch.manual_seed(0)
    encoder = VisionEncoder(cfg.vision).eval()
    backbone = TextBackbone(cfg.text).eval()
    images = np.random.default_rng(0).integers(0, 256, size=(2, 48, 64, 3), dtype=np.uint8)
    patches, grid = preprocess_images(images, cfg.vision, (48, 64))
    encode = _Encode(encoder, grid)
    with torch.no_grad():
        expected = encode(patches)
    got = _run_onnx(encode, (patches,), tmp_path / "vision.onnx")
    assert len(got) == len(expected) == 3
    for mine, theirs in zip(got, expected):
        np.testing.assert_allclose(mine, theirs.numpy(), atol=1e-4, rtol=0)

    ids = torch.tensor([[7, 8] + [4000] * 12 + [9] + [4000] * 12 + [10, 11]])
    positions = prompt_positions(ids, grid, 4000, cfg.vision.spatial_merge_size)
    embeds = torch.randn(1, ids.shape[1], cfg.text.hidden_size)
    embeds[ids == 4000] = expected[0]
    inputs = (embeds, positions, ids == 4000, expected[1], expected[2])
    prefill = _Prefill(backbone, ids.shape[1])
    with torch.no_grad():
        expected = prefill(*inputs)
    got = _run_onnx(prefill, inputs, tmp_path / "backbone.onnx")
    for mine, theirs in zip(got, expected):
        np.testing.assert_allclose(mine, theirs.numpy(), atol=1e-4, rtol=0)
