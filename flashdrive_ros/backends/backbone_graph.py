"""The backbone step as a pure function of an external fixed-capacity pre-RoPE KV cache.

One graph serves every step the engine runs (prefill chunk, verify block, decode one): T is
the only dynamic axis. The cache comes in whole ([L, 1, Hkv, C, D], keys before RoPE) with the
3D position of every slot; the step's new keys and values are placed at `slots` inside the
graph for attention and come back as outputs ([L, 1, Hkv, T, D]) for the caller to write at
the same slots, so no graph output is capacity-sized. The mask covers all C slots.
"""

from __future__ import annotations

import torch
from torch import nn

from flashdrive_ros.model.backbone import RotaryTables, TextBackbone

BACKBONE_INPUTS = ("inputs_embeds", "positions", "key_positions", "slots", "attn_mask",
                   "deepstack", "k_cache", "v_cache")


class _StepCache:
    """The step's per-layer caches: writes become one-hot placements, not copies; the new
    keys and values of every layer are kept for the graph's outputs."""

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor
                 ) -> None:
        capacity = k_cache.shape[3]
        self.k_cache = k_cache
        self.v_cache = v_cache
        hit = slots[:, None] == torch.arange(capacity, device=slots.device)[None, :]  # [T, C]
        self.placement = hit.to(k_cache.dtype).transpose(0, 1)  # [C, T]
        self.written = hit.any(dim=0)[None, None, :, None]  # [1, 1, C, 1]
        self.new_k: list[torch.Tensor] = []
        self.new_v: list[torch.Tensor] = []

    def layer(self, index: int) -> _StepLayer:
        return _StepLayer(self, self.k_cache[index], self.v_cache[index])


class _StepLayer:
    """One layer over all C slots, in the form of a LayerKV: after `write`, k and v hold the
    cache with the step's keys and values placed at their slots."""

    k_rot = None

    def __init__(self, step: _StepCache, k: torch.Tensor, v: torch.Tensor) -> None:
        self.step = step
        self.k = k  # k: [B, Hkv, C, D]
        self.v = v  # v: [B, Hkv, C, D]

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: [B, Hkv, T, D] for slots `slots`."""
        step = self.step
        k = k.to(self.k.dtype)
        v = v.to(self.v.dtype)
        step.new_k.append(k)
        step.new_v.append(v)
        self.k = torch.where(step.written, step.placement @ k, self.k)
        self.v = torch.where(step.written, step.placement @ v, self.v)

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys before RoPE, values) [B, Hkv, C, D]."""
        return self.k, self.v


class BackboneStepGraph(nn.Module):
    """forward(inputs_embeds [1, T, H], positions [3, 1, T] long, key_positions [3, 1, C] long,
    slots [T] long, attn_mask [1, 1, T, C] bool, deepstack [Ld, 1, T, H] (zero outside image
    tokens), k_cache, v_cache [L, 1, Hkv, C, D]) -> (hidden [1, T, H] after the final norm,
    [features [1, T, F * H] of `feature_layers`,] new_k, new_v [L, 1, Hkv, T, D]).

    key_positions must already hold `positions` at `slots`.
    """

    def __init__(self, backbone: TextBackbone, feature_layers: tuple[int, ...],
                 num_deepstack: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.feature_layers = tuple(feature_layers)
        self.num_deepstack = num_deepstack
        cfg = backbone.cfg
        self.group = cfg.num_attention_heads // cfg.num_key_value_heads

    @property
    def output_names(self) -> tuple[str, ...]:
        features = ("features",) if self.feature_layers else ()
        return ("hidden", *features, "new_k", "new_v")

    def forward(self, inputs_embeds: torch.Tensor, positions: torch.Tensor,
                key_positions: torch.Tensor, slots: torch.Tensor, attn_mask: torch.Tensor,
                deepstack: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        b, t, _ = inputs_embeds.shape
        capacity = k_cache.shape[3]
        dtype = inputs_embeds.dtype
        query_cos, query_sin = self.backbone.rotary_cos_sin(positions, dtype)
        key_cos, key_sin = self.backbone.rotary_cos_sin(key_positions, dtype)
        rotary = RotaryTables(query_cos, query_sin, key_cos, key_sin)
        mask = attn_mask[:, :, None].expand(b, 1, self.group, t, capacity)
        mask = mask.reshape(b, 1, self.group * t, capacity)  # [B, 1, G*T, C]
        cache = _StepCache(k_cache, v_cache, slots)
        x = inputs_embeds
        features = []
        for index, layer in enumerate(self.backbone.layers):
            x = layer(x, rotary, cache.layer(index), slots, mask)
            if index in self.feature_layers:
                features.append(x)
            if index < self.num_deepstack:
                x = x + deepstack[index].to(x.dtype)
        hidden = self.backbone.norm(x)
        new_k = torch.stack(cache.new_k)
        new_v = torch.stack(cache.new_v)
        if not self.feature_layers:
            return hidden, new_k, new_v
        ordered = [features[sorted(self.feature_layers).index(i)] for i in self.feature_layers]
        return hidden, torch.cat(ordered, dim=-1), new_k, new_v
