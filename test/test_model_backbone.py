"""Text backbone through the pre-RoPE KV cache: chunking, re-positioning, rollback, masks."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flashdrive_ros.model.backbone import TextBackbone
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.layers import RMSNorm
from flashdrive_ros.model.positions import next_position, text_positions

TOL = 1e-5


def _backbone(num_layers: int | None = None) -> TextBackbone:
    text = tiny().text
    if num_layers is not None:
        text = dataclasses.replace(text, num_hidden_layers=num_layers)
    torch.manual_seed(0)
    model = TextBackbone(text).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.05 * torch.randn_like(p))
    return model


def _cache(model: TextBackbone, capacity: int, batch: int = 1) -> KVCache:
    c = model.cfg
    return KVCache(c.num_hidden_layers, batch, c.num_key_value_heads, capacity, c.head_dim)


def _mixed_positions(t: int) -> torch.Tensor:
    """3D positions like a prompt with one 2x3 image after 4 text tokens: [3, 1, t]."""
    pos = text_positions(0, t)
    image = torch.tensor([[4, 4, 4, 4, 4, 4], [4, 4, 4, 5, 5, 5], [4, 5, 6, 4, 5, 6]])
    pos[:, 0, 4:10] = image
    pos[:, 0, 10:] = text_positions(7, t - 10)[:, 0]
    return pos


def _run(model, cache, embeds, positions, slots, **kw):
    with torch.no_grad():
        return model(embeds, positions, cache, slots, **kw).hidden


@pytest.fixture(scope="module")
def model():
    return _backbone()


def test_chunked_prefill_and_decode_match_single_call(model):
    torch.manual_seed(1)
    t = 20
    embeds = torch.randn(1, t + 1, model.cfg.hidden_size)
    positions = _mixed_positions(t + 1)
    full = _run(model, _cache(model, 32), embeds[:, :t], positions[:, :, :t], torch.arange(t))
    cache = _cache(model, 32)
    parts = []
    for start, end in ((0, 7), (7, 8), (8, 15), (15, 20)):
        parts.append(_run(model, cache, embeds[:, start:end], positions[:, :, start:end],
                          torch.arange(start, end)))
        assert cache.length == end
    assert torch.allclose(torch.cat(parts, dim=1), full, atol=TOL, rtol=0)
    decoded = _run(model, cache, embeds[:, t:], positions[:, :, t:], torch.tensor([t]))
    reference = _run(model, _cache(model, 32), embeds, positions, torch.arange(t + 1))
    assert torch.allclose(decoded, reference[:, t:], atol=TOL, rtol=0)


def test_cached_keys_rotate_with_new_positions_single_layer():
    model = _backbone(num_layers=1)
    torch.manual_seed(2)
    t = 12
    embeds = torch.randn(1, t + 1, model.cfg.hidden_size)
    old = _mixed_positions(t + 1)
    new = text_positions(3, t + 1)
    cache = _cache(model, 16)
    _run(model, cache, embeds[:, :t], old[:, :, :t], torch.arange(t))
    cache.set_positions(torch.arange(t), new[:, :, :t])
    moved = _run(model, cache, embeds[:, t:], new[:, :, t:], torch.tensor([t]))
    recomputed = _run(model, _cache(model, 16), embeds, new, torch.arange(t + 1))[:, t:]
    stale = _run(model, _cache(model, 16), embeds, torch.cat(
        [old[:, :, :t], new[:, :, t:]], dim=2), torch.arange(t + 1))[:, t:]
    assert torch.allclose(moved, recomputed, atol=TOL, rtol=0)
    assert not torch.allclose(moved, stale, atol=1e-3, rtol=0)


def test_uniform_position_shift_leaves_outputs_unchanged(model):
    torch.manual_seed(3)
    t = 15
    embeds = torch.randn(1, t, model.cfg.hidden_size)
    positions = _mixed_positions(t)
    base = _run(model, _cache(model, 16), embeds, positions, torch.arange(t))
    shifted = _run(model, _cache(model, 16), embeds, positions + 57, torch.arange(t))
    assert torch.allclose(base, shifted, atol=1e-4, rtol=0)


def test_rollback_then_redecode_matches_fresh_run(model):
    torch.manual_seed(4)
    t = 14
    embeds = torch.randn(1, t + 3, model.cfg.hidden_size)
    alt = torch.randn(1, 2, model.cfg.hidden_size)
    positions = _mixed_positions(t + 3)
    cache = _cache(model, 24)
    _run(model, cache, embeds[:, :t], positions[:, :, :t], torch.arange(t))
    _run(model, cache, embeds[:, t:], positions[:, :, t:], torch.arange(t, t + 3))
    assert cache.length == t + 3
    cache.rollback(t + 1)
    redo = _run(model, cache, alt, positions[:, :, t + 1:], torch.arange(t + 1, t + 3))
    fresh_embeds = torch.cat([embeds[:, :t + 1], alt], dim=1)
    fresh = _run(model, _cache(model, 24), fresh_embeds, positions, torch.arange(t + 3))
    assert cache.length == t + 3
    assert torch.allclose(redo, fresh[:, t + 1:], atol=TOL, rtol=0)


def test_explicit_mask_equals_default_causal_and_limits_attention(model):
    torch.manual_seed(5)
    t = 10
    embeds = torch.randn(1, t, model.cfg.hidden_size)
    positions = text_positions(0, t)
    causal = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
    default = _run(model, _cache(model, t), embeds, positions, torch.arange(t))
    explicit = _run(model, _cache(model, t), embeds, positions, torch.arange(t), attn_mask=causal)
    assert torch.allclose(default, explicit, atol=TOL, rtol=0)
    one_layer = _backbone(num_layers=1)
    full = torch.ones(1, 1, t, t, dtype=torch.bool)
    causal_one = _run(one_layer, _cache(one_layer, t), embeds, positions, torch.arange(t))
    bidirectional = _run(one_layer, _cache(one_layer, t), embeds, positions, torch.arange(t),
                         attn_mask=full)
    assert torch.allclose(bidirectional[:, -1], causal_one[:, -1], atol=TOL, rtol=0)
    assert not torch.allclose(bidirectional[:, 0], causal_one[:, 0], atol=1e-3, rtol=0)


def test_batch_rows_are_independent(model):
    torch.manual_seed(6)
    t = 9
    embeds = torch.randn(2, t, model.cfg.hidden_size)
    positions = torch.cat([_mixed_positions(t + 1)[:, :, :t], text_positions(5, t)], dim=1)
    both = _run(model, _cache(model, t, batch=2), embeds, positions, torch.arange(t))
    for row in range(2):
        alone = _run(model, _cache(model, t), embeds[row:row + 1], positions[:, row:row + 1],
                     torch.arange(t))
        assert torch.allclose(both[row:row + 1], alone, atol=TOL, rtol=0)


def test_deepstack_added_at_visual_positions_and_layer_outputs(model):
    torch.manual_seed(7)
    t = 12
    embeds = torch.randn(1, t, model.cfg.hidden_size)
    positions = _mixed_positions(t)
    visual = torch.zeros(1, t, dtype=torch.bool)
    visual[0, 4:10] = True
    deepstack = [torch.randn(6, model.cfg.hidden_size) for _ in range(2)]
    with torch.no_grad():
        plain = model(embeds, positions, _cache(model, t), torch.arange(t),
                      output_layers=(0, 3))
        injected = model(embeds, positions, _cache(model, t), torch.arange(t),
                         visual_mask=visual, deepstack=deepstack, output_layers=(0, 3))
    assert set(injected.layer_hidden) == {0, 3}
    assert torch.allclose(plain.layer_hidden[0], injected.layer_hidden[0], atol=TOL, rtol=0)
    assert torch.allclose(plain.hidden[:, :4], injected.hidden[:, :4], atol=TOL, rtol=0)
    assert not torch.allclose(plain.hidden[:, 4:], injected.hidden[:, 4:], atol=1e-3, rtol=0)
    assert torch.allclose(injected.hidden, model.norm(injected.layer_hidden[3]), atol=TOL)


def test_position_helpers():
    pos = _mixed_positions(12)
    assert next_position(pos).tolist() == [9]
    cont = text_positions(next_position(pos), 3)
    assert cont.shape == (3, 1, 3)
    assert cont[:, 0].tolist() == [[9, 10, 11]] * 3


def test_bad_inputs_raise_clear_errors(model):
    h = model.cfg.hidden_size
    embeds = torch.randn(1, 4, h)
    positions = text_positions(0, 4)
    with pytest.raises(ValueError, match="positions"):
        model(embeds, positions[:, :, :3], _cache(model, 8), torch.arange(4))
    with pytest.raises(ValueError, match="capacity"):
        model(embeds, positions, _cache(model, 3), torch.arange(4))
    with pytest.raises(ValueError, match="slots"):
        model(embeds, positions, _cache(model, 8), torch.arange(4).int())
    with pytest.raises(ValueError, match="cache"):
        model(embeds, positions, _cache(model, 8, batch=2), torch.arange(4))
    with pytest.raises(ValueError, match="attn_mask"):
        model(embeds, positions, _cache(model, 8), torch.arange(4),
              attn_mask=torch.ones(1, 1, 4, 5, dtype=torch.bool))
    blind = torch.ones(1, 1, 4, 4, dtype=torch.bool)
    blind[0, 0, 2] = False
    untouched = _cache(model, 4)
    with pytest.raises(ValueError, match="no slot"):
        model(embeds, positions, untouched, torch.arange(4), attn_mask=blind)
    assert untouched.length == 0
    with pytest.raises(ValueError, match="deepstack"):
        model(embeds, positions, _cache(model, 8), torch.arange(4),
              visual_mask=torch.ones(1, 4, dtype=torch.bool), deepstack=[torch.randn(3, h)])
    with pytest.raises(ValueError, match="output_layers"):
        model(embeds, positions, _cache(model, 8), torch.arange(4), output_layers=(9,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rms_norm_equals_unfused(dtype):
    torch.manual_seed(8)
    norm = RMSNorm(64, 1e-6)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.1 * torch.randn(64))
    norm.to(dtype)
    x = (3.0 * torch.randn(2, 5, 64)).to(dtype)
    tol = 1e-6 if dtype == torch.float32 else 2e-2
    assert torch.allclose(norm(x).float(), norm.unfused(x).float(), atol=tol, rtol=0)
