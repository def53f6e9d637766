"""The action expert over a batch of different prefixes, for training.

`ActionExpert.forward` serves K samples of one window from a batch-1 cache. Training needs B
windows, each with its own cached prefix of its own length; this runs the expert's own
modules (same weights, same math) over a batch-B cache with a per-window prefix mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from flashdrive_ros.model.expert import ActionExpert, ExpertAttention
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.rope import apply_rotary, mrope_cos_sin


def batched_expert_positions(cache: KVCache, prefix_lens: torch.Tensor,
                             num_tokens: int) -> torch.Tensor:
    """[3, B, num_tokens]: per window, the positions after its slot prefix_len - 1."""
    batch = torch.arange(cache.positions.shape[1], device=prefix_lens.device)
    last = cache.positions[:, batch, prefix_lens - 1]  # last: [3, B]
    start = last.amax(dim=0) + 1  # start: [B]
    steps = torch.arange(num_tokens, device=prefix_lens.device)
    return (start[:, None] + steps[None, :]).unsqueeze(0).expand(3, -1, -1).contiguous()


def _attention(attn: ExpertAttention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               prefix_k: torch.Tensor, prefix_v: torch.Tensor, key_mask: torch.Tensor
               ) -> torch.Tensor:
    """x: [B, N, H]; cos, sin: [B, N, D]; prefix_k (rotated), prefix_v: [B, Hkv, P, D];
    key_mask: [B, 1, 1, P + N] bool."""
    q = apply_rotary(attn.queries(x), cos, sin)  # q: [B, H, N, D]
    k = apply_rotary(attn.keys(x), cos, sin)  # k: [B, Hkv, N, D]
    keys = torch.cat([prefix_k, k], dim=2)
    values = torch.cat([prefix_v, attn.values(x)], dim=2)
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=key_mask,
                                         enable_gqa=attn.num_heads != attn.num_kv_heads)
    return attn.output(out)


def batched_expert(expert: ActionExpert, x: torch.Tensor, cache: KVCache,
                   prefix_lens: torch.Tensor, draws: int = 1,
                   bounds: tuple[int, int] | None = None,
                   hidden_slots: torch.Tensor | None = None) -> torch.Tensor:
    """x: [K * B, N, H_exp] (draw-major: row k * B + b reads window b); cache: batch B;
    prefix_lens: [B] long -> [K * B, N, H_exp]. `bounds` = (min, max) of prefix_lens when
    the caller knows them on the host (saves reading them back from the device).
    hidden_slots: [B, S] bool (S >= the longest prefix), prefix slots window b's expert
    does not read."""
    kb, n, _ = x.shape
    b = cache.k.shape[1]
    if draws < 1 or kb != draws * b or prefix_lens.shape != (b,):
        raise ValueError(f"cache batch {b} / prefix_lens {tuple(prefix_lens.shape)} / "
                         f"{draws} draws do not match the {kb} rows")
    low, length = bounds if bounds is not None else (int(prefix_lens.min()),
                                                     int(prefix_lens.max()))
    if low < 1 or length > cache.length:
        raise ValueError(f"prefix_lens outside [1, cache length {cache.length}]")
    positions = batched_expert_positions(cache, prefix_lens, n).repeat(1, draws, 1)
    cos, sin = mrope_cos_sin(positions, expert.inv_freq, expert.mrope_section,
                             expert.mrope_interleaved, dtype=x.dtype)  # cos: [K*B, N, D]
    p_cos, p_sin = mrope_cos_sin(cache.positions[:, :, :length], expert.inv_freq,
                                 expert.mrope_section, expert.mrope_interleaved, dtype=x.dtype)
    slots = torch.arange(length, device=x.device)
    prefix_ok = slots[None, :] < prefix_lens[:, None]  # prefix_ok: [B, P]
    if hidden_slots is not None:
        prefix_ok = prefix_ok & ~hidden_slots[:, :length]
    own_ok = torch.ones(b, n, dtype=torch.bool, device=x.device)
    key_mask = torch.cat([prefix_ok, own_ok], dim=1)[:, None, None, :].repeat(draws, 1, 1, 1)
    for i, layer in enumerate(expert.layers):
        k, v, _ = cache.layer_view(i, length)  # k, v: [B, Hkv, P, D]
        prefix_k = apply_rotary(k.to(x.dtype), p_cos, p_sin).repeat(draws, 1, 1, 1)
        v = v.repeat(draws, 1, 1, 1)  # v: [K*B, Hkv, P, D]
        h = layer.input_layernorm(x)
        x = x + _attention(layer.self_attn, h, cos, sin, prefix_k, v.to(x.dtype), key_mask)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return expert.norm(x)


def batched_velocity(expert: ActionExpert, in_proj: nn.Module, out_proj: nn.Module,
                     x_t: torch.Tensor, t: torch.Tensor, cache: KVCache,
                     prefix_lens: torch.Tensor, draws: int = 1,
                     bounds: tuple[int, int] | None = None,
                     hidden_slots: torch.Tensor | None = None) -> torch.Tensor:
    """x_t: [K * B, N, 2]; t: [K * B] -> v: [K * B, N, 2], row k * B + b reading window b's
    prefix but its `hidden_slots` ([B, S] bool)."""
    tokens = in_proj(x_t, t.to(x_t.dtype))  # tokens: [K*B, N, H_exp]
    return out_proj(batched_expert(expert, tokens, cache, prefix_lens, draws, bounds,
                                   hidden_slots))
