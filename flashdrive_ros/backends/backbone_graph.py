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
    """Duck-typed KVCache for one graph step: writes become one-hot placements, not copies."""

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor, slots: torch.Tensor
                 ) -> None:
        capacity = k_cache.shape[3]
        self.k_cache = k_cache
        self.v_cache = v_cache
        hit = slots[:, None] == torch.arange(capacity, device=slots.device)[None, :]  # [T, C]
        self.placement = hit.to(k_cache.dtype).transpose(0, 1)  # [C, T]
        self.written = hit.any(dim=0)[None, None, :, None]  # [1, 1, C, 1]
        self.k_rot = None
        self.new_k: list[torch.Tensor] = []
        self.new_v: list[torch.Tensor] = []
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: [B, Hkv, T, D] for slots `slots`."""
        k = k.to(self.k_cache.dtype)
        v = v.to(self.v_cache.dtype)
        self.new_k.append(k)
        self.new_v.append(v)
        self.keys.append(torch.where(self.written, self.placement @ k, self.k_cache[layer]))
        self.values.append(torch.where(self.written, self.placement @ v, self.v_cache[layer]))

    def layer_view(self, layer: int, end: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, None]:
        return self.keys[layer], self.values[layer], None


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
        rotary = RotaryTables(query_cos, query_sin, key_cos, key_sin, capacity)
        mask = attn_mask[:, :, None].expand(b, 1, self.group, t, capacity)
        mask = mask.reshape(b, 1, self.group * t, capacity)  # [B, 1, G*T, C]
        cache = _StepCache(k_cache, v_cache, slots)
        x = inputs_embeds
        features = []
        for index, layer in enumerate(self.backbone.layers):
            x = layer(x, rotary, cache, slots, mask)
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
