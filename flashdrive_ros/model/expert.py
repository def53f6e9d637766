"""Action expert: a Qwen3-style decoder stack without embeddings over the action tokens.

Layer i attends to the backbone's KV cache layer i (slots [0, prefix_len), batch 1, shared
by all K samples) plus the K samples' own action tokens, bidirectionally. The prefix reaches a
layer either as its rotated keys and values, concatenated with the action tokens' at every
call, or staged (`StagedKV`): copied once per plan into buffers behind which each call writes
the action tokens' keys and values. Module names mirror the release checkpoint
(`expert.layers.{i}.self_attn.q_proj`, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from flashdrive_ros.model.cache_attention import PREFIX_ATTENTIONS, PrefixAttention
from flashdrive_ros.model.config import ExpertConfig, TextConfig
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.layers import QKNormAttention, RMSNorm, SwiGLU
from flashdrive_ros.model.rope import apply_rotary, inverse_frequencies, mrope_cos_sin


@dataclass(frozen=True)
class StagedKV:
    """One expert layer's keys and values for the velocity calls of a plan: keys (rotated),
    values: [K, Hkv, S + N, D]; slots [0, P) the backbone prefix, copied in once, slots
    [P, S) zeros (S >= P: the prefix slots, rounded up for a block-wise kernel), slots
    [S, S + N) the action tokens', written by every call."""

    keys: torch.Tensor
    values: torch.Tensor
    prefix_slots: int

    @classmethod
    def stage(cls, prefix_k: torch.Tensor, prefix_v: torch.Tensor, k_samples: int,
              num_tokens: int, prefix_slots: int | None = None) -> StagedKV:
        """prefix_k, prefix_v: [1, Hkv, P, D] -> buffers for k_samples samples of num_tokens
        action tokens behind prefix_slots (default P) prefix slots."""
        _, heads, prefix_len, dim = prefix_k.shape
        slots = prefix_len if prefix_slots is None else prefix_slots
        if slots < prefix_len:
            raise ValueError(f"prefix_slots {slots} < prefix length {prefix_len}")
        keys = prefix_k.new_empty(k_samples, heads, slots + num_tokens, dim)
        values = prefix_v.new_empty(k_samples, heads, slots + num_tokens, dim)
        keys[:, :, :prefix_len] = prefix_k
        values[:, :, :prefix_len] = prefix_v
        keys[:, :, prefix_len:slots] = 0
        values[:, :, prefix_len:slots] = 0
        return cls(keys, values, slots)

    def write(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k, v: [K, Hkv, N, D] of the action tokens -> the whole keys and values."""
        self.keys[:, :, self.prefix_slots:] = k
        self.values[:, :, self.prefix_slots:] = v
        return self.keys, self.values


LayerPrefix = tuple[torch.Tensor, torch.Tensor] | StagedKV
PrefixMask = torch.Tensor | PrefixAttention | None


class ExpertAttention(QKNormAttention):
    def __init__(self, cfg: ExpertConfig) -> None:
        super().__init__(cfg, fused_norm=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                prefix: LayerPrefix, mask: PrefixMask = None) -> torch.Tensor:
        """x: [K, N, H_exp]; cos, sin: [1, N, D]; prefix: (keys (rotated), values)
        [1, Hkv, P, D] each, or the layer's StagedKV; mask: optional [1, 1, 1, P + N] bool,
        False = slot not attended, or a PrefixAttention over the StagedKV."""
        k_samples = x.shape[0]
        q = apply_rotary(self.queries(x), cos, sin)  # q: [K, H, N, D]
        k = apply_rotary(self.keys(x), cos, sin)  # k: [K, Hkv, N, D]
        v = self.values(x)  # v: [K, Hkv, N, D]
        if isinstance(prefix, StagedKV):
            keys, values = prefix.write(k, v)  # keys, values: [K, Hkv, P + N, D]
        else:
            prefix_k, prefix_v = prefix
            keys = torch.cat([prefix_k.expand(k_samples, -1, -1, -1), k], dim=2)
            values = torch.cat([prefix_v.expand(k_samples, -1, -1, -1), v], dim=2)
        if isinstance(mask, PREFIX_ATTENTIONS):
            return self.output(mask(q, keys, values))
        return self.output(self.grouped_attention(q, keys, values, mask))


class ExpertLayer(nn.Module):
    def __init__(self, cfg: ExpertConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, fused=False)
        self.self_attn = ExpertAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, fused=False)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                prefix: LayerPrefix, mask: PrefixMask = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, prefix, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def run_layer(layer: ExpertLayer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              prefix: LayerPrefix, mask: PrefixMask = None) -> torch.Tensor:
    """One expert layer over its prefix: x: [K, N, H_exp] -> [K, N, H_exp]."""
    return layer(x, cos, sin, prefix, mask)


LayerCall = Callable[[ExpertLayer, torch.Tensor, torch.Tensor, torch.Tensor, LayerPrefix,
                      PrefixMask], torch.Tensor]


class ActionExpert(nn.Module):
    def __init__(self, cfg: ExpertConfig, text: TextConfig) -> None:
        """`text` gives the rotary settings (theta, mrope_section) of the backbone's cache."""
        super().__init__()
        if text.head_dim != cfg.head_dim:
            raise ValueError(f"expert head_dim {cfg.head_dim} != text head_dim {text.head_dim}")
        self.cfg = cfg
        self.mrope_section = text.mrope_section
        self.mrope_interleaved = text.mrope_interleaved
        self.register_buffer("inv_freq", inverse_frequencies(cfg.head_dim, text.rope_theta),
                             persistent=False)
        self.layers = nn.ModuleList(ExpertLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, fused=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                prefix_len: int, prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None
                ) -> torch.Tensor:
        """x: [K, N_wp, H_exp]; positions: [3, 1, N_wp]; cache: batch 1 -> [K, N_wp, H_exp].

        prefix: optional `rotated_prefix(cache, prefix_len, dtype)`, reused across flow steps.
        """
        self._check(x, positions, cache, prefix_len)
        if prefix is None:
            prefix = self.rotated_prefix(cache, prefix_len, x.dtype)
        elif len(prefix) != len(self.layers) or prefix[0][0].shape[2] != prefix_len:
            raise ValueError("prefix was not made for this expert and prefix_len")
        return self.forward_prefix(x, positions, prefix)

    def forward_prefix(self, x: torch.Tensor, positions: torch.Tensor,
                       prefix: list[LayerPrefix],
                       prefix_mask: torch.Tensor | PrefixAttention | None = None,
                       layer_call: LayerCall = run_layer) -> torch.Tensor:
        """Capture-safe core of `forward` (no checks, no host reads): x: [K, N_wp, H_exp];
        positions: [3, 1, N_wp]; prefix: per layer [1, Hkv, P, D] rotated keys and values, or
        `stage(...)` of them; prefix_mask: optional [P] bool of the prefix slots to attend, or
        a PrefixAttention (with `stage(..., prefix_slots=its prefix_slots)`); layer_call:
        how each layer runs (`run_layer`, or a compiled form of it) -> [K, N_wp, H_exp]."""
        cos, sin = mrope_cos_sin(positions, self.inv_freq, self.mrope_section,
                                 self.mrope_interleaved, dtype=x.dtype)  # cos: [1, N, D]
        mask = prefix_mask if isinstance(prefix_mask, PREFIX_ATTENTIONS) else None
        if isinstance(prefix_mask, torch.Tensor):
            own = torch.ones(x.shape[1], dtype=torch.bool, device=prefix_mask.device)
            mask = torch.cat([prefix_mask, own])[None, None, None]  # mask: [1, 1, 1, P + N]
        for layer, layer_prefix in zip(self.layers, prefix):
            x = layer_call(layer, x, cos, sin, layer_prefix, mask)
        return self.norm(x)

    @staticmethod
    def stage(prefix: list[tuple[torch.Tensor, torch.Tensor]], k_samples: int,
              num_tokens: int, prefix_slots: int | None = None) -> list[StagedKV]:
        """Per layer, `rotated_prefix`'s keys and values copied into the buffers of k_samples
        samples of num_tokens action tokens (StagedKV): one copy of the prefix per plan."""
        return [StagedKV.stage(k, v, k_samples, num_tokens, prefix_slots) for k, v in prefix]

    def rotated_prefix(self, cache: KVCache, prefix_len: int, dtype: torch.dtype
                       ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per layer (keys with RoPE applied, values): [1, Hkv, prefix_len, D] each; read as
        they are from a cache that keeps rotated keys."""
        if cache.k_rot is not None and not cache.has_moved:
            return [tuple(t.to(dtype) for t in cache.rotated_view(i, prefix_len))
                    for i in range(len(self.layers))]
        p_cos, p_sin = mrope_cos_sin(cache.positions[:, :, :prefix_len], self.inv_freq,
                                     self.mrope_section, self.mrope_interleaved, dtype=dtype)
        out = []
        for i in range(len(self.layers)):
            k, v, _ = cache.layer_view(i, prefix_len)  # k, v: [1, Hkv, P, D]
            out.append((apply_rotary(k.to(dtype), p_cos, p_sin), v.to(dtype)))
        return out

    def _check(self, x: torch.Tensor, positions: torch.Tensor, cache: KVCache,
               prefix_len: int) -> None:
        if x.ndim != 3 or x.shape[-1] != self.cfg.hidden_size:
            raise ValueError(f"expert input must be [K, N, {self.cfg.hidden_size}], "
                             f"got {tuple(x.shape)}")
        if positions.shape != (3, 1, x.shape[1]):
            raise ValueError(f"expert positions must be [3, 1, {x.shape[1]}], "
                             f"got {tuple(positions.shape)}")
        if cache.k.shape[1] != 1:
            raise ValueError(f"expert expects a batch-1 cache shared by the samples, "
                             f"got batch {cache.k.shape[1]}")
        if cache.num_layers != len(self.layers):
            raise ValueError(f"cache has {cache.num_layers} layers, expert has "
                             f"{len(self.layers)}")
        if cache.k.shape[2] != self.cfg.num_key_value_heads or cache.k.shape[4] != \
                self.cfg.head_dim:
            raise ValueError("cache kv heads / head_dim do not match the expert")
        if not 0 < prefix_len <= cache.length:
            raise ValueError(f"prefix_len {prefix_len} outside (0, cache length "
                             f"{cache.length}]")


def expert_positions(cache: KVCache, prefix_len: int, num_tokens: int) -> torch.Tensor:
    """[3, 1, num_tokens]: the positions following cache slot prefix_len - 1 on all axes."""
    if not 0 < prefix_len <= cache.length:
        raise ValueError(f"prefix_len {prefix_len} outside (0, cache length {cache.length}]")
    start = cache.positions[:, 0, prefix_len - 1].max() + 1
    steps = torch.arange(num_tokens, device=cache.positions.device) + start
    return steps.view(1, 1, -1).expand(3, 1, -1).clone()
