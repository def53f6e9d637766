"""Exported graphs (opset 20) run by onnxruntime match the torch model within 1e-4 (fp32),
including a prefill -> verify -> decode sequence passing the external KV cache along."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from flashdrive_ros.backends.graph_backend import GraphBackbone, GraphEncoder
from flashdrive_ros.backends.model_specs import drafter_spec, model_specs
from flashdrive_ros.backends.onnx_export import export_all, export_graph
from flashdrive_ros.backends.specs import EngineShapes
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.expert import expert_positions
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions

ort = pytest.importorskip("onnxruntime")
from flashdrive_ros.backends.ort_runner import OrtGraph  # noqa: E402

ATOL = 1e-4
SHAPES = EngineShapes(capacity=80, prompt_length=60, streaming_length=20, block_size=8,
                      context_len=8, grid_hw=(6, 8), num_samples=2, feature_layers=(3, 1))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    cfg = tiny()
    torch.manual_seed(0)
    model = AlpamayoModel(cfg).eval()
    drafter = Drafter(cfg.drafter, cfg.text).eval()
    out = tmp_path_factory.mktemp("onnx")
    manifest = export_all(model_specs(model, drafter, SHAPES), out)
    graphs = {g["name"]: OrtGraph(out / g["file"]) for g in manifest["graphs"]}
    return model, drafter, graphs


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), atol=ATOL, rtol=0)


def _cache(model: AlpamayoModel) -> KVCache:
    t = model.cfg.text
    return KVCache(t.num_hidden_layers, 1, t.num_key_value_heads, SHAPES.capacity, t.head_dim)


def _same_cache(a: KVCache, b: KVCache) -> None:
    assert a.length == b.length
    assert torch.equal(a.positions, b.positions)
    _close(a.k[:, :, :, :a.length], b.k[:, :, :, :b.length])
    _close(a.v[:, :, :, :a.length], b.v[:, :, :, :b.length])


def test_vision_graph_matches_torch(exported):
    model, _, graphs = exported
    h, w = SHAPES.grid_hw
    grid = torch.tensor([[1, h, w]] * 3)
    patch_dim = graphs["vision"].session.get_inputs()[0].shape[1]
    patches = torch.randn(3 * h * w, patch_dim)
    levels = len(model.cfg.vision.deepstack_visual_indexes)
    got = GraphEncoder(graphs["vision"], SHAPES.grid_hw, levels)(patches, grid)
    with torch.no_grad():
        want = model.vlm.visual(patches, grid)
    _close(got[0], want[0])
    assert len(got[1]) == len(want[1]) == levels
    for mine, theirs in zip(got[1], want[1]):
        _close(mine, theirs)


def _step(backbone, cache, embeds, positions, slots, **kwargs):
    with torch.no_grad():
        return backbone(embeds, positions, cache, slots, output_layers=(1, 3), **kwargs)


def test_backbone_prefill_verify_decode_sequence_matches_torch(exported):
    model, _, graphs = exported
    torch_backbone = model.vlm.language_model
    levels = len(model.cfg.vision.deepstack_visual_indexes)
    graph_backbone = GraphBackbone(graphs["backbone_step"], torch_backbone,
                                   SHAPES.feature_layers, levels)
    ref, ext = _cache(model), _cache(model)
    hidden = model.cfg.text.hidden_size
    n = SHAPES.prompt_length
    embeds = torch.randn(1, n, hidden)
    positions = text_positions(0, n)
    positions[1:, :, 10:22] += torch.arange(12) % 3  # an image-like block of 3D positions
    visual = torch.zeros(1, n, dtype=torch.bool)
    visual[:, 10:22] = True
    deepstack = [torch.randn(12, hidden) for _ in range(levels)]
    full = dict(visual_mask=visual, deepstack=deepstack)
    steps = [(embeds, positions, torch.arange(n), full)]
    k = SHAPES.block_size
    steps.append((torch.randn(1, k, hidden), text_positions(n, k), torch.arange(n, n + k), {}))
    for embeds, positions, slots, kwargs in steps:
        want = _step(torch_backbone, ref, embeds, positions, slots, **kwargs)
        got = _step(graph_backbone, ext, embeds, positions, slots, **kwargs)
        _close(got.hidden, want.hidden)
        for layer in (1, 3):
            _close(got.layer_hidden[layer], want.layer_hidden[layer])
        _same_cache(ext, ref)
    for cache in (ref, ext):
        cache.rollback(n + 3)
    one = (torch.randn(1, 1, hidden), text_positions(n + 3, 1), torch.tensor([n + 3]))
    want = _step(torch_backbone, ref, *one)
    got = _step(graph_backbone, ext, *one)
    _close(got.hidden, want.hidden)
    _same_cache(ext, ref)


def test_backbone_prefill_chunk_with_streaming_mask_matches_torch(exported):
    model, _, graphs = exported
    torch_backbone = model.vlm.language_model
    levels = len(model.cfg.vision.deepstack_visual_indexes)
    graph_backbone = GraphBackbone(graphs["backbone_step"], torch_backbone,
                                   SHAPES.feature_layers, levels)
    ref, ext = _cache(model), _cache(model)
    hidden, n, s = model.cfg.text.hidden_size, SHAPES.prompt_length, SHAPES.streaming_length
    prompt = (torch.randn(1, n, hidden), text_positions(0, n), torch.arange(n))
    _step(torch_backbone, ref, *prompt)
    _step(graph_backbone, ext, *prompt)
    for cache in (ref, ext):
        cache.rollback(n - s)
    generator = torch.Generator().manual_seed(1)
    mask = torch.rand(1, 1, s, n, generator=generator) < 0.5
    mask[0, 0, torch.arange(s), torch.arange(n - s, n)] = True
    chunk = (torch.randn(1, s, hidden), text_positions(n - s, s), torch.arange(n - s, n))
    want = _step(torch_backbone, ref, *chunk, attn_mask=mask)
    got = _step(graph_backbone, ext, *chunk, attn_mask=mask)
    _close(got.hidden, want.hidden)
    _same_cache(ext, ref)


def test_drafter_graph_matches_torch(exported):
    _, drafter, graphs = exported
    ctx, k = drafter.cfg.context_len, drafter.cfg.block_size
    features = torch.randn(1, ctx, drafter.feature_size)
    block = torch.randn(1, k, drafter.cfg.hidden_size)
    positions = torch.arange(30, 30 + ctx + k)[None]
    got = graphs["drafter"]({"context_features": features, "block_embeds": block,
                             "positions": positions})["hidden"]
    with torch.no_grad():
        _close(got, drafter(features, block, positions))


def test_mrope_drafter_graph_matches_torch(tmp_path):
    cfg = tiny()
    torch.manual_seed(1)
    drafter = Drafter(dataclasses.replace(cfg.drafter, rotary="mrope"), cfg.text).eval()
    graph = OrtGraph(export_graph(drafter_spec(drafter, SHAPES), tmp_path))
    ctx, k = drafter.cfg.context_len, drafter.cfg.block_size
    features = torch.randn(1, ctx, drafter.feature_size)
    block = torch.randn(1, k, drafter.cfg.hidden_size)
    positions = text_positions(30, ctx + k)
    positions[1:, :, :6] += torch.arange(6) % 3  # image-like context: axes differ
    got = graph({"context_features": features, "block_embeds": block,
                 "positions": positions})["hidden"]
    with torch.no_grad():
        _close(got, drafter(features, block, positions))


def test_expert_step_reads_only_the_valid_prefix_of_the_cache(exported):
    model, _, graphs = exported
    cache = _cache(model)
    torch.manual_seed(3)
    cache.k.normal_()
    cache.v.normal_()
    cache.positions.copy_(text_positions(0, SHAPES.capacity))
    prefix_len = 57
    cache.advance_to(prefix_len)
    a = model.cfg.action
    x = torch.randn(SHAPES.num_samples, a.num_waypoints, a.action_dim)
    t = torch.tensor([0.25, 0.5])
    positions = expert_positions(cache, prefix_len, a.num_waypoints)
    feeds = {"x_t": x, "t": t, "positions": positions, "key_positions": cache.positions,
             "key_valid": torch.arange(SHAPES.capacity) < prefix_len,
             "k_cache": cache.k, "v_cache": cache.v}
    got = graphs["expert_step"](feeds)["velocity"]
    with torch.no_grad():
        _close(got, model.velocity(x, t, cache, prefix_len))
