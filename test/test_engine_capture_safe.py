"""The capture-safe steps behind the CUDA graphs, run eagerly on the CPU, against the plain
paths: backbone attention over the whole cache with a device mask, the expert's masked prefix,
and an engine running every graphed step eagerly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.windows import window

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.flow_cached import FlowSchedule, euler_cached
from flashdrive_ros.engine.graphed_steps import GraphedFlow
from flashdrive_ros.engine.streaming import encode_frames
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.expert import ActionExpert, expert_positions
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import image_positions, text_positions
from flashdrive_ros.model.vlm import VLM

CFG = tiny(vocab_size=512)
FEATURE_LAYERS = (1, 2, 3)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def vlm() -> VLM:
    torch.manual_seed(0)
    return VLM(CFG.vision, CFG.text).eval()


def _cache(capacity: int) -> KVCache:
    t = CFG.text
    return KVCache(t.num_hidden_layers, 1, t.num_key_value_heads, capacity, t.head_dim)


def _prompt(vlm: VLM) -> tuple[torch.Tensor, torch.Tensor]:
    """embeds [1, N, H] and positions [3, 1, N] of text, one 4x6 image, text (N = 12)."""
    img = image_positions(3, (1, 4, 6), 2)[:, None]
    positions = torch.cat([text_positions(0, 3), img, text_positions(6, 3)], dim=2)
    with torch.no_grad():
        embeds = vlm.language_model.embed_tokens(torch.arange(100, 100 + positions.shape[2]))
    return embeds[None], positions


def _prefilled(vlm: VLM, capacity: int) -> KVCache:
    embeds, positions = _prompt(vlm)
    cache = _cache(capacity)
    with torch.no_grad():
        vlm.language_model(embeds, positions, cache, torch.arange(embeds.shape[1]))
    return cache


def _block(vlm: VLM, start: int, count: int):
    with torch.no_grad():
        embeds = vlm.language_model.embed_tokens(torch.arange(200, 200 + count))[None]
    return embeds, text_positions(9 + start, count), torch.arange(start, start + count)


@pytest.mark.parametrize("count", [1, 3, 8])
def test_static_backbone_equals_forward_when_the_block_ends_the_cache(vlm, count):
    backbone = vlm.language_model
    n = _prompt(vlm)[0].shape[1]
    plain, static = _prefilled(vlm, n + count), _prefilled(vlm, n + count)
    embeds, positions, slots = _block(vlm, n, count)
    with torch.no_grad():
        want = backbone(embeds, positions, plain, slots, output_layers=FEATURE_LAYERS)
        got = backbone.forward_static(embeds, positions, static, slots, FEATURE_LAYERS)
    assert torch.equal(got.hidden, want.hidden)
    for i in FEATURE_LAYERS:
        assert torch.equal(got.layer_hidden[i], want.layer_hidden[i])
    assert torch.equal(static.k, plain.k) and torch.equal(static.v, plain.v)
    assert torch.equal(static.positions, plain.positions)
    assert static.length == n and plain.length == n + count


def test_static_backbone_ignores_every_slot_after_the_block(vlm):
    backbone = vlm.language_model
    n = _prompt(vlm)[0].shape[1]
    embeds, positions, slots = _block(vlm, n, 8)
    plain = _prefilled(vlm, n + 8)
    with torch.no_grad():
        want = backbone(embeds, positions, plain, slots).hidden
    outputs = []
    for seed in (1, 2):
        cache = _prefilled(vlm, n + 30)
        generator = torch.Generator().manual_seed(seed)
        stale = 1e3 * torch.randn(cache.k[..., n:, :].shape, generator=generator)
        cache.k[..., n:, :] = stale
        cache.v[..., n:, :] = -stale
        cache.positions[:, :, n:] = torch.randint(0, 500, (3, 1, 30), generator=generator)
        with torch.no_grad():
            outputs.append(backbone.forward_static(embeds, positions, cache, slots).hidden)
    assert torch.equal(outputs[0], outputs[1])
    torch.testing.assert_close(outputs[0], want, rtol=0, atol=1e-5)


def test_expert_prefix_mask_equals_a_shorter_prefix():
    torch.manual_seed(0)
    expert = ActionExpert(CFG.expert, CFG.text).eval()
    cache = _cache(48)
    cache.k.normal_()
    cache.v.normal_()
    cache.positions[:] = torch.arange(48)
    cache.advance_to(30)
    x = torch.randn(2, 64, CFG.expert.hidden_size)
    positions = expert_positions(cache, 26, 64)
    mask = torch.arange(48) < 26
    with torch.no_grad():
        want = expert(x, positions, cache, 26)
        got = expert.forward_prefix(x, positions, expert.rotated_prefix(cache, 48, x.dtype), mask)
        cache.k[..., 26:, :] = 1e3
        cache.v[..., 26:, :] = -1e3
        again = expert.forward_prefix(x, positions, expert.rotated_prefix(cache, 48, x.dtype),
                                      mask)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert torch.equal(again, got)


def _engine(parts, **changes) -> Engine:
    model, tok, drafter = parts
    return Engine(model, tok, drafter, EngineConfig(max_coc_tokens=6, num_samples=2,
                                                    **changes))


def test_eager_graphed_encoder_and_flow_equal_the_plain_steps(parts):
    eng = _engine(parts)
    steps = eng.graphed_steps()
    images = window(0).images
    for frames in (((0, 3), (1, 3), (2, 3), (3, 3)), ((1, 0), (0, 2))):
        embeds, deepstack = steps.encoder(images, frames)
        want, want_deepstack = encode_frames(eng.model.vlm, images, frames, eng.image_size)
        assert torch.equal(embeds, want)
        assert all(torch.equal(a, b) for a, b in zip(deepstack, want_deepstack, strict=True))
    eng.step(window(0))
    cache = eng.stream.cache
    assert cache.length < cache.capacity
    schedule = FlowSchedule.plain(1)
    x0 = torch.randn(2, 64, 2)
    with torch.no_grad():
        got = GraphedFlow(eng.model, cache, schedule)(x0, cache.length)
        staged = GraphedFlow(eng.model, cache, schedule, staged=True)(x0, cache.length)
        flex = GraphedFlow(eng.model, cache, schedule, staged=True,
                           action_attention="flex")(x0, cache.length)
        gemm = GraphedFlow(eng.model, cache, schedule, staged=True,
                           action_attention="gemm")(x0, cache.length)
        want = euler_cached(eng.model.velocity_fn(cache, cache.length), x0, schedule)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert torch.equal(staged, got)
    torch.testing.assert_close(flex, got, rtol=0, atol=1e-5)
    torch.testing.assert_close(gemm, got, rtol=0, atol=1e-5)
    for attention in ("flex", "gemm"):
        with pytest.raises(ValueError, match="set staged"):
            GraphedFlow(eng.model, cache, schedule, action_attention=attention)


@pytest.mark.parametrize("speculative,temperature", [(True, 0.0), (False, 0.0), (True, 1.0)])
def test_engine_with_eager_graphed_steps_matches_the_plain_engine(parts, speculative,
                                                                  temperature):
    # One Euler step: the random tiny expert amplifies float rounding over many steps.
    changes = dict(speculative=speculative, cached_velocity=False, baseline_flow_steps=1,
                   temperature=temperature)
    plain, graphed = _engine(parts, **changes), _engine(parts, **changes)
    graphed.graphs = graphed.graphed_steps()
    for step in (0, 1, 2, 4):
        a, b = plain.step(window(step)), graphed.step(window(step))
        assert a.coc_token_ids == b.coc_token_ids and a.full_prefill == b.full_prefill
        assert a.accepted_lengths == b.accepted_lengths
        ca, cb = plain.stream.cache, graphed.stream.cache
        assert ca.length == cb.length
        torch.testing.assert_close(cb.k[..., :cb.length, :], ca.k[..., :ca.length, :],
                                   rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(b.trajectories, a.trajectories, rtol=0, atol=1e-3)
    assert graphed.graphs.captured_graphs == 0
