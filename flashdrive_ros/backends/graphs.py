"""Export wrappers with fixed signatures: the vision encoder for one view, the drafter block
and the action expert step reading the backbone's fixed-capacity pre-RoPE KV cache."""

from __future__ import annotations

import torch
from torch import nn

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.expert import ExpertAttention
from flashdrive_ros.model.rope import apply_rotary, mrope_cos_sin
from flashdrive_ros.model.vision import VisionEncoder


class VisionGraph(nn.Module):
    """forward(pixel_patches [h*w, C*Tp*P*P]) -> (embeds [h*w/m^2, H], *deepstack levels)
    for one image of h x w patches (a static shape)."""

    def __init__(self, encoder: VisionEncoder, grid_hw: tuple[int, int]) -> None:
        super().__init__()
        self.encoder = encoder
        self.register_buffer("grid_thw", torch.tensor([[1, *grid_hw]]), persistent=False)

    @property
    def output_names(self) -> tuple[str, ...]:
        levels = len(self.encoder.cfg.deepstack_visual_indexes)
        return ("image_embeds", *(f"deepstack_{i}" for i in range(levels)))

    def forward(self, pixel_patches: torch.Tensor) -> tuple[torch.Tensor, ...]:
        embeds, deepstack = self.encoder(pixel_patches, self.grid_thw)
        return (embeds, *deepstack)


class DrafterGraph(nn.Module):
    """forward(context_features [1, C, L*H_t], block_embeds [1, K, H], positions [1, C + K]
    (flat) or [3, 1, C + K] (mrope)) -> hidden [1, K, H] (normed, before the lm_head)."""

    def __init__(self, drafter: Drafter) -> None:
        super().__init__()
        self.drafter = drafter

    def forward(self, context_features: torch.Tensor, block_embeds: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        return self.drafter(context_features, block_embeds, positions)


class ExpertStepGraph(nn.Module):
    """One flow-matching velocity evaluation over the whole backbone cache.

    forward(x_t [K, N, 2], t [K], positions [3, 1, N] long, key_positions [3, 1, C] long,
    key_valid [C] bool (the prefix slots), k_cache, v_cache [L, 1, Hkv, C, D] pre-RoPE)
    -> velocity [K, N, 2].
    """

    def __init__(self, model: AlpamayoModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, positions: torch.Tensor,
                key_positions: torch.Tensor, key_valid: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> torch.Tensor:
        model = self.model
        expert = model.expert
        x = model.action_in_proj(x_t, t)  # x: [K, N, H_exp]
        dtype = x.dtype
        cos, sin = mrope_cos_sin(positions, expert.inv_freq, expert.mrope_section,
                                 expert.mrope_interleaved, dtype)  # cos: [1, N, D]
        key_cos, key_sin = mrope_cos_sin(key_positions, expert.inv_freq, expert.mrope_section,
                                         expert.mrope_interleaved, dtype)  # [1, C, D]
        for index, layer in enumerate(expert.layers):
            prefix_k = apply_rotary(k_cache[index].to(dtype), key_cos, key_sin)
            prefix_v = v_cache[index].to(dtype)
            h = layer.input_layernorm(x)
            x = x + _masked_attention(layer.self_attn, h, cos, sin, prefix_k, prefix_v,
                                      key_valid)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return model.action_out_proj(expert.norm(x)).to(x_t.dtype)


def _masked_attention(attn: ExpertAttention, x: torch.Tensor, cos: torch.Tensor,
                      sin: torch.Tensor, prefix_k: torch.Tensor, prefix_v: torch.Tensor,
                      key_valid: torch.Tensor) -> torch.Tensor:
    """x: [K, N, H_exp]; prefix_k (rotated), prefix_v: [1, Hkv, C, D]; key_valid: [C] bool."""
    samples, n, _ = x.shape
    heads, kv_heads, dim = attn.num_heads, attn.num_kv_heads, attn.head_dim
    group = heads // kv_heads
    q = apply_rotary(attn.queries(x), cos, sin)  # q: [K, H, N, D]
    k = apply_rotary(attn.keys(x), cos, sin)  # k: [K, Hkv, N, D]
    v = attn.values(x)  # v: [K, Hkv, N, D]
    q = q.reshape(samples, kv_heads, group * n, dim)  # q: [K, Hkv, G*N, D]
    scale = dim ** -0.5
    s_prefix = (q @ prefix_k.transpose(-1, -2)) * scale  # [K, Hkv, G*N, C]
    s_prefix = torch.where(key_valid, s_prefix, torch.finfo(s_prefix.dtype).min)
    s_own = (q @ k.transpose(-1, -2)) * scale  # [K, Hkv, G*N, N]
    probs = torch.cat([s_prefix, s_own], dim=-1).float().softmax(dim=-1).to(q.dtype)
    capacity = prefix_k.shape[2]
    out = probs[..., :capacity] @ prefix_v + probs[..., capacity:] @ v  # [K, Hkv, G*N, D]
    return attn.output(out.reshape(samples, heads, n, dim))
