import dataclasses
import math

import pytest
import torch
from helpers.drafters import with_target_head
from torch import nn

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter

CFG = tiny(vocab_size=300)
C, K = 5, 4


def _drafter(rotary: str = "flat", seed: int = 0) -> tuple[Drafter, nn.Embedding, nn.Linear]:
    torch.manual_seed(seed)
    cfg = dataclasses.replace(CFG.drafter, rotary=rotary, context_len=C, block_size=K)
    return with_target_head(Drafter(cfg, CFG.text).eval(), CFG.text)


def _inputs(drafter: Drafter, batch: int = 2, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, C, drafter.feature_size, generator=g)
    ids = torch.full((batch, K), drafter.mask_token_id, dtype=torch.long)
    ids[:, 0] = torch.randint(0, CFG.text.vocab_size, (batch,), generator=g)
    flat = (torch.arange(C + K) + 37).expand(batch, -1).clone()
    return features, ids, flat


def _rms(x, w, eps):
    return w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _rotate(x, pos, inv_freq):
    ang = pos[..., None].double() * inv_freq.double()  # [B, S, D/2]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def _reference_hidden(drafter: Drafter, features, block_embeds, flat_pos):
    """Explicit per-head loops, float64, flat rotary."""
    d = drafter.double()
    eps = d.cfg.rms_norm_eps
    hq, hkv, hd = d.cfg.num_attention_heads, d.cfg.num_key_value_heads, d.cfg.head_dim
    ctx = _rms(features.double() @ d.fc.weight.T, d.hidden_norm.weight, eps)
    x = block_embeds.double()
    for layer in d.layers:
        a = layer.self_attn
        h = _rms(x, layer.input_layernorm.weight, eps)
        both = torch.cat([ctx, h], dim=1)
        b, s, _ = both.shape
        q = _rms((h @ a.q_proj.weight.T).view(b, K, hq, hd), a.q_norm.weight, eps)
        k = _rms((both @ a.k_proj.weight.T).view(b, s, hkv, hd), a.k_norm.weight, eps)
        v = (both @ a.v_proj.weight.T).view(b, s, hkv, hd)
        heads = []
        for head in range(hq):
            kv = head // (hq // hkv)
            qh = _rotate(q[:, :, head], flat_pos[:, -K:], d.inv_freq)
            kh = _rotate(k[:, :, kv], flat_pos, d.inv_freq)
            w = torch.softmax(qh @ kh.transpose(1, 2) / math.sqrt(hd), dim=-1)
            heads.append(w @ v[:, :, kv])
        x = x + torch.cat(heads, dim=-1) @ a.o_proj.weight.T
        m = layer.mlp
        h = _rms(x, layer.post_attention_layernorm.weight, eps)
        x = x + (torch.nn.functional.silu(h @ m.gate_proj.weight.T) * (h @ m.up_proj.weight.T)
                 ) @ m.down_proj.weight.T
    out = _rms(x, d.norm.weight, eps)
    drafter.float()
    return out


def test_forward_matches_explicit_reference():
    drafter, embed, _ = _drafter("flat")
    features, ids, flat = _inputs(drafter)
    with torch.no_grad():
        block = drafter.embed_block(ids, embed)
        ours = drafter(features, block, flat).double()
        ref = _reference_hidden(drafter, features, block, flat)
    torch.testing.assert_close(ours, ref, atol=2e-4, rtol=2e-4)


def test_propose_logits_reuses_target_head_and_embedding():
    drafter, embed, head = _drafter()
    features, ids, flat = _inputs(drafter)
    with torch.no_grad():
        logits = drafter.propose_logits(features, ids, flat, embed, head)
        assert logits.shape == (2, K - 1, CFG.text.vocab_size)
        head.weight.mul_(2.0)
        torch.testing.assert_close(drafter.propose_logits(features, ids, flat, embed, head),
                                   2.0 * logits)
        embed.weight[ids[0, 0]] += 1.0
        changed = drafter.propose_logits(features, ids, flat, embed, head)
    assert not torch.allclose(changed[0], 2.0 * logits[0])
    torch.testing.assert_close(changed[1], 2.0 * logits[1])
    names = set(drafter.state_dict())
    assert not any("embed" in n.replace("mask_embedding", "") or "lm_head" in n for n in names)


def test_mask_embedding_and_block_ids():
    drafter, embed, _ = _drafter()
    ids = torch.tensor([[3, drafter.mask_token_id, 7]])
    block = drafter.embed_block(ids, embed)
    torch.testing.assert_close(block[0, 1], drafter.mask_embedding)
    torch.testing.assert_close(block[0, 2], embed.weight[7])
    with pytest.raises(ValueError, match="outside"):
        drafter.embed_block(torch.tensor([[drafter.mask_token_id + 1]]), embed)
    with pytest.raises(ValueError, match="long"):
        drafter.embed_block(torch.tensor([[1.0]]), embed)


def test_block_is_not_causal_and_context_matters():
    drafter, embed, _ = _drafter()
    features, ids, flat = _inputs(drafter, batch=1)
    with torch.no_grad():
        block = drafter.embed_block(ids, embed)
        base = drafter(features, block, flat)
        later = block.clone()
        later[0, -1] += 1.0
        assert not torch.allclose(drafter(features, later, flat)[0, 0], base[0, 0])
        other = features.clone()
        other[0, 0] += 1.0
        assert not torch.allclose(drafter(other, block, flat), base)


@pytest.mark.parametrize("rotary", ["flat", "mrope"])
def test_rotary_is_relative(rotary):
    drafter, embed, _ = _drafter(rotary)
    features, ids, flat = _inputs(drafter)
    pos = flat if rotary == "flat" else torch.stack([flat, flat // 2, flat % 7])
    with torch.no_grad():
        block = drafter.embed_block(ids, embed)
        base = drafter(features, block, pos)
        torch.testing.assert_close(drafter(features, block, pos + 100), base,
                                   atol=1e-4, rtol=1e-4)
        moved = pos.clone()
        moved[..., 0] += 3
        assert not torch.allclose(drafter(features, block, moved), base, atol=1e-4)


def test_flat_equals_mrope_on_equal_axes_only():
    flat_d, embed, _ = _drafter("flat")
    mrope_d, _, _ = _drafter("mrope")
    features, ids, flat = _inputs(flat_d)
    with torch.no_grad():
        block = flat_d.embed_block(ids, embed)
        a = flat_d(features, block, flat)
        torch.testing.assert_close(mrope_d(features, block, flat.expand(3, -1, -1)), a)
        spatial = torch.stack([flat, flat // 3, flat // 5])
        assert not torch.allclose(mrope_d(features, block, spatial), a, atol=1e-4)


def test_bad_inputs_raise():
    drafter, embed, _ = _drafter("flat")
    features, ids, flat = _inputs(drafter)
    block = drafter.embed_block(ids, embed)
    with pytest.raises(ValueError, match="flat drafter positions"):
        drafter(features, block, flat.expand(3, -1, -1))
    with pytest.raises(ValueError, match="context_features"):
        drafter(features[..., :-1], block, flat)
    with pytest.raises(ValueError, match="block_embeds"):
        drafter(features, block[:1], flat)


def test_config_validation():
    with pytest.raises(ValueError, match="hidden_size"):
        Drafter(dataclasses.replace(CFG.drafter, hidden_size=64), CFG.text)
    with pytest.raises(ValueError, match="dflash"):
        Drafter(dataclasses.replace(CFG.drafter, kind="eagle3"), CFG.text)
    with pytest.raises(ValueError, match="target_layer_ids"):
        Drafter(dataclasses.replace(CFG.drafter, target_layer_ids=(1, 9)), CFG.text)


def test_safetensors_round_trip(tmp_path):
    drafter, embed, head = _drafter(seed=0)
    path = tmp_path / "drafter.safetensors"
    drafter.save_safetensors(path)
    from safetensors.torch import load_file
    tensors = load_file(str(path))
    assert all(name.startswith("drafter.") for name in tensors)
    assert "drafter.fc.weight" in tensors and "drafter.mask_embedding" in tensors
    other, _, _ = _drafter(seed=5)
    other.load_safetensors(path)
    features, ids, flat = _inputs(drafter)
    with torch.no_grad():
        torch.testing.assert_close(other.propose_logits(features, ids, flat, embed, head),
                                   drafter.propose_logits(features, ids, flat, embed, head))
    missing = dict(tensors)
    missing.pop("drafter.norm.weight")
    with pytest.raises(ValueError, match="missing"):
        other.load_weights(missing)
    wrong = dict(tensors)
    wrong["drafter.fc.weight"] = wrong["drafter.fc.weight"][:, :-1]
    with pytest.raises(ValueError, match="shape"):
        other.load_weights(wrong)


@pytest.mark.parametrize("masked", [False, True])
def test_first_layer_attention_weights_reproduce_the_layer(masked):
    drafter, embed, _ = _drafter("mrope")
    features, ids, flat = _inputs(drafter)
    pos = torch.stack([flat, flat // 2, flat % 3])
    mask = torch.ones(2, C, dtype=torch.bool)
    if masked:
        mask[0, :2] = False
    with torch.no_grad():
        block = drafter.embed_block(ids, embed)
        weights = drafter.first_layer_attention(features, block, pos, mask)
        layer = drafter.layers[0]
        attn = layer.self_attn
        x = layer.input_layernorm(block)
        context = drafter.context_vectors(features)
        cos, sin = drafter.rotary_cos_sin(pos, x.dtype)
        _, _, v = attn.projections(x, context, cos, sin)
        v = v.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)
        out = attn.o_proj((weights @ v).transpose(1, 2).reshape(2, K, -1))
        torch.testing.assert_close(out, attn(x, context, cos, sin, mask), atol=1e-5, rtol=1e-5)
    assert weights.shape == (2, CFG.drafter.num_attention_heads, K, C + K)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, weights.shape[1], K))
    assert bool((weights[0, :, :, :2] == 0).all()) == masked


def test_context_mask_equals_a_shorter_context():
    drafter, embed, head = _drafter("flat")
    features, ids, flat = _inputs(drafter, batch=1)
    mask = torch.ones(1, C, dtype=torch.bool)
    mask[0, :3] = False
    with torch.no_grad():
        padded = drafter.propose_logits(features, ids, flat, embed, head, mask)
        short = drafter.propose_logits(features[:, 3:], ids, flat[:, 3:], embed, head)
    torch.testing.assert_close(padded, short, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="context_mask"):
        drafter.propose_logits(features, ids, flat, embed, head, mask[:, 1:])
