"""Qwen3-VL text backbone working through the shared pre-RoPE KV cache.

Module names match Hugging Face's `Qwen3VLTextModel` so checkpoint keys load unchanged.
Keys go into the cache after k_norm and before RoPE; at attention time the cached keys are
rotated with the cache's per-slot 3D positions and the queries with their own positions.
A cache with rotated keys also keeps the keys after RoPE: new keys are rotated once when
written and moved slots once per move, and attention reads them as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from flashdrive_ros.model.cache_attention import CACHE_ATTENTIONS, CacheAttention
from flashdrive_ros.model.config import TextConfig
from flashdrive_ros.model.kv_cache import CacheLayer, KVCache, LayerKV
from flashdrive_ros.model.layers import QKNormAttention, RMSNorm, SwiGLU
from flashdrive_ros.model.rope import apply_rotary, inverse_frequencies, mrope_cos_sin


CacheMask = torch.Tensor | CacheAttention | None
LayerCache = LayerKV | CacheLayer


class TextAttention(QKNormAttention):
    def forward(self, x: torch.Tensor, rotary: RotaryTables, kv: LayerCache,
                slots: torch.Tensor, mask: CacheMask) -> torch.Tensor:
        """x: [B, T, H] -> [B, T, H]; writes this layer's pre-RoPE k and v at `slots` of `kv`
        and attends over the S slots it reads. mask: additive [B, 1, G*T, S], None (no mask)
        or a length-aware attention."""
        k = self.keys(x)  # k: [B, Hkv, T, D]
        q = apply_rotary(self.queries(x), rotary.query_cos, rotary.query_sin)  # q: [B,Hq,T,D]
        if kv.k_rot is None:
            kv.write(slots, k, self.values(x))
            keys, values = kv.read()  # keys, values: [B, Hkv, S, D]
            keys = apply_rotary(keys.to(q.dtype), rotary.key_cos, rotary.key_sin)
        else:
            k_rotated = apply_rotary(k.to(q.dtype), rotary.query_cos, rotary.query_sin)
            kv.write(slots, k, self.values(x), k_rotated)
            keys, values = kv.read()  # keys, values: [B, Hkv, S, D]
            keys = keys.to(q.dtype)
        values = values.to(q.dtype)
        if isinstance(mask, CACHE_ATTENTIONS):
            return self.output(mask(q, keys, values))  # [B, Hq, T, D] heads
        return self.output(self.grouped_attention(q, keys, values, mask))


class TextDecoderLayer(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.self_attn = TextAttention(cfg)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, rotary: RotaryTables, kv: LayerCache,
                slots: torch.Tensor, mask: CacheMask) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rotary, kv, slots, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def run_decoder_layer(layer: TextDecoderLayer, x: torch.Tensor, rotary: RotaryTables,
                      kv: LayerCache, slots: torch.Tensor, mask: CacheMask) -> torch.Tensor:
    """One decoder layer over its cache slots: x: [B, T, H] -> [B, T, H]; writes the layer's
    keys and values at `slots` of `kv` in place."""
    return layer(x, rotary, kv, slots, mask)


@dataclass
class RotaryTables:
    """cos/sin for the new queries and keys ([B, T, D]) and, unless the cache keeps rotated
    keys, for all cached keys ([B, S, D])."""

    query_cos: torch.Tensor
    query_sin: torch.Tensor
    key_cos: torch.Tensor | None
    key_sin: torch.Tensor | None


@dataclass
class BackboneOutput:
    hidden: torch.Tensor  # [B, T, H] after the final norm
    layer_hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # i -> [B, T, H]


DecoderLayerCall = Callable[[TextDecoderLayer, torch.Tensor, RotaryTables, LayerCache,
                             torch.Tensor, CacheMask], torch.Tensor]


class TextBackbone(nn.Module):
    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(TextDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer("inv_freq", inverse_frequencies(cfg.head_dim, cfg.rope_theta),
                             persistent=False)  # [D / 2]

    def rotary_cos_sin(self, positions: torch.Tensor, dtype: torch.dtype
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: [3, B, T] -> cos, sin: [B, T, D]."""
        return mrope_cos_sin(positions, self.inv_freq, self.cfg.mrope_section,
                             self.cfg.mrope_interleaved, dtype)

    def forward(self, inputs_embeds: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                slots: torch.Tensor, attn_mask: torch.Tensor | None = None,
                visual_mask: torch.Tensor | None = None,
                deepstack: list[torch.Tensor] | None = None,
                output_layers: tuple[int, ...] = ()) -> BackboneOutput:
        """inputs_embeds: [B, T, H]; positions: [3, B, T]; slots: [T] cache slots to write.

        Attends over cache slots [0, cache.length) after advancing the length to cover
        `slots`. attn_mask: [B or 1, 1, T, S] bool, True = may attend; None = causal by slot.
        deepstack[i] ([N_visual, H]) is added at `visual_mask` ([B, T]) after layer i.
        layer_hidden[i] is the output of decoder layer i (before any deepstack addition).
        """
        self._check_inputs(inputs_embeds, positions, cache, slots, visual_mask, deepstack,
                           output_layers)
        length = max(cache.length, int(slots.max()) + 1)
        mask = self._grouped_mask(
            self._attention_mask(attn_mask, slots, inputs_embeds.shape[0], length),
            inputs_embeds.dtype)
        cache.write_positions(slots, positions)
        cache.advance_to(length)
        dtype = inputs_embeds.dtype
        self.rotate_moved_keys(cache, dtype)
        query_cos, query_sin = self.rotary_cos_sin(positions, dtype)
        key_cos, key_sin = self._key_cos_sin(cache, length, dtype)
        rotary = RotaryTables(query_cos, query_sin, key_cos, key_sin)
        layers_kv = [cache.layer(index, length) for index in range(len(self.layers))]
        return self._run_layers(inputs_embeds, rotary, layers_kv, slots, mask, visual_mask,
                                deepstack or [], output_layers)

    def forward_static(self, inputs_embeds: torch.Tensor, positions: torch.Tensor,
                       cache: KVCache, slots: torch.Tensor, output_layers: tuple[int, ...] = (),
                       attention: CacheAttention | None = None,
                       layer_call: DecoderLayerCall = run_decoder_layer) -> BackboneOutput:
        """Capture-safe text-only forward: no host reads, shapes fixed by T and the capacity.

        inputs_embeds: [B, T, H]; positions: [3, B, T]; slots: [T] device long. Attends over
        every cache slot [0, capacity) with the mask key slot <= query slot built on device,
        which equals `forward`'s causal-by-slot attention when the cache holds no valid slot
        at or after slots[0] (decode and verify). The caller checks the slots against the
        capacity and advances `cache.length` (host bookkeeping) itself. `attention`: the same
        attention by the block's first slot instead of the dense mask (slots consecutive).
        layer_call: how each decoder layer runs over its cache layer's views
        (`KVCache.layer_views`): `run_decoder_layer`, or a compiled form of it.
        """
        if cache.has_moved:
            raise ValueError("cache slots were moved: run `forward` (or rotate_moved_keys) "
                             "before a static step")
        capacity = cache.capacity
        if attention is not None:
            attention.update(slots)
            mask = attention
        else:
            key_slots = torch.arange(capacity, device=slots.device)
            mask = self._grouped_mask((key_slots[None, :] <= slots[:, None])[None, None],
                                      inputs_embeds.dtype)
        cache.write_positions(slots, positions)
        dtype = inputs_embeds.dtype
        query_cos, query_sin = self.rotary_cos_sin(positions, dtype)
        key_cos, key_sin = self._key_cos_sin(cache, capacity, dtype)
        rotary = RotaryTables(query_cos, query_sin, key_cos, key_sin)
        layers_kv = [cache.layer_views(index) for index in range(len(self.layers))]
        return self._run_layers(inputs_embeds, rotary, layers_kv, slots, mask, None, [],
                                output_layers, layer_call)

    def rotate_moved_keys(self, cache: KVCache, dtype: torch.dtype) -> None:
        """Re-rotates the rotated keys of the slots moved since the last forward (every
        layer at once per move; a no-op without rotated keys or moves)."""
        moved = cache.take_moved() if cache.k_rot is not None else None
        if moved is None:
            return
        cos, sin = self.rotary_cos_sin(cache.positions.index_select(2, moved), dtype)
        for layer in range(cache.num_layers):
            keys = cache.k[layer].index_select(2, moved).to(dtype)  # keys: [B, Hkv, M, D]
            cache.k_rot[layer].index_copy_(2, moved,
                                           apply_rotary(keys, cos, sin).to(cache.k_rot.dtype))

    def _key_cos_sin(self, cache: KVCache, length: int, dtype: torch.dtype
                     ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """cos, sin [B, S, D] of the cached keys' positions; None with rotated keys."""
        if cache.k_rot is not None:
            return None, None
        return self.rotary_cos_sin(cache.positions[:, :, :length], dtype)

    def _run_layers(self, x: torch.Tensor, rotary: RotaryTables, layers_kv: list[LayerCache],
                    slots: torch.Tensor, mask: CacheMask, visual_mask: torch.Tensor | None,
                    deepstack: list[torch.Tensor], output_layers: tuple[int, ...],
                    layer_call: DecoderLayerCall = run_decoder_layer) -> BackboneOutput:
        """Every decoder layer over its cache layer in `layers_kv`."""
        layer_hidden: dict[int, torch.Tensor] = {}
        for index, (layer, kv) in enumerate(zip(self.layers, layers_kv)):
            x = layer_call(layer, x, rotary, kv, slots, mask)
            if index in output_layers:
                layer_hidden[index] = x
            if index < len(deepstack):
                x = _add_at_mask(x, visual_mask, deepstack[index])
        return BackboneOutput(hidden=self.norm(x), layer_hidden=layer_hidden)

    def _attention_mask(self, attn_mask: torch.Tensor | None, slots: torch.Tensor, batch: int,
                        length: int) -> torch.Tensor | None:
        t = slots.shape[0]
        if attn_mask is not None:
            if (attn_mask.dtype != torch.bool or attn_mask.ndim != 4
                    or attn_mask.shape[0] not in (1, batch) or attn_mask.shape[1] != 1
                    or attn_mask.shape[2:] != (t, length)):
                raise ValueError(f"attn_mask must be bool [{batch} or 1, 1, {t}, {length}], got "
                                 f"{attn_mask.dtype} {tuple(attn_mask.shape)}")
            if not bool(attn_mask.any(dim=-1).all()):
                raise ValueError("attn_mask has a query that may attend to no slot")
            return attn_mask
        if t == 1 and int(slots[0]) == length - 1:
            return None
        key_slots = torch.arange(length, device=slots.device)
        return (key_slots[None, :] <= slots[:, None])[None, None]  # [1, 1, T, S]

    def _grouped_mask(self, mask: torch.Tensor | None, dtype: torch.dtype
                      ) -> torch.Tensor | None:
        """bool [B, 1, T, S] -> additive [B, 1, G*T, S] of `dtype` (0 = attend, -inf = not),
        made once for every layer: the G query heads sharing a kv head are stacked along the
        query axis, so attention needs no copy of the cached keys per head."""
        if mask is None:
            return None
        group = self.cfg.num_attention_heads // self.cfg.num_key_value_heads
        b, _, t, s = mask.shape
        additive = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
            ~mask, float("-inf"))
        return additive[:, :, None].expand(b, 1, group, t, s).reshape(b, 1, group * t, s)

    def _check_inputs(self, inputs_embeds: torch.Tensor, positions: torch.Tensor,
                      cache: KVCache, slots: torch.Tensor, visual_mask: torch.Tensor | None,
                      deepstack: list[torch.Tensor] | None, output_layers: tuple[int, ...]
                      ) -> None:
        cfg = self.cfg
        if inputs_embeds.ndim != 3 or inputs_embeds.shape[-1] != cfg.hidden_size:
            raise ValueError(f"inputs_embeds must be [B, T, {cfg.hidden_size}], got "
                             f"{tuple(inputs_embeds.shape)}")
        b, t, _ = inputs_embeds.shape
        if t == 0:
            raise ValueError("inputs_embeds holds no tokens")
        if positions.shape != (3, b, t):
            raise ValueError(f"positions must be [3, {b}, {t}], got {tuple(positions.shape)}")
        if slots.ndim != 1 or slots.shape[0] != t or slots.dtype != torch.long:
            raise ValueError(f"slots must be a long tensor [{t}], got {slots.dtype} "
                             f"{tuple(slots.shape)}")
        if int(slots.min()) < 0 or int(slots.max()) >= cache.capacity:
            raise ValueError(f"slots outside the cache capacity {cache.capacity}")
        expected = (cfg.num_hidden_layers, b, cfg.num_key_value_heads, cfg.head_dim)
        got = (cache.num_layers, cache.k.shape[1], cache.k.shape[2], cache.k.shape[4])
        if got != expected:
            raise ValueError(f"cache (layers, batch, kv heads, head_dim) = {got}, backbone "
                             f"needs {expected}")
        bad_layers = [i for i in output_layers if not 0 <= i < cfg.num_hidden_layers]
        if bad_layers:
            raise ValueError(f"output_layers {bad_layers} outside [0, {cfg.num_hidden_layers})")
        if deepstack:
            if len(deepstack) > cfg.num_hidden_layers:
                raise ValueError("more deepstack levels than layers")
            if (visual_mask is None or visual_mask.shape != (b, t)
                    or visual_mask.dtype != torch.bool):
                raise ValueError(f"deepstack needs a bool visual_mask [{b}, {t}]")
            count = int(visual_mask.sum())
            for level in deepstack:
                if level.shape != (count, cfg.hidden_size):
                    raise ValueError(f"deepstack features must be [{count}, {cfg.hidden_size}] "
                                     f"(visual tokens in visual_mask), got {tuple(level.shape)}")


def _add_at_mask(x: torch.Tensor, mask: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
    """x: [B, T, H]; mask: [B, T] bool; features: [mask.sum(), H] -> x with features added."""
    added = x[mask] + features.to(x.dtype)
    return x.masked_scatter(mask[..., None], added)
