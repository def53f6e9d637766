"""Preallocated KV cache holding keys before RoPE, with rollback by length; optionally also
the keys after RoPE, kept in step with the slots' positions."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LayerKV:
    """One layer's keys before RoPE, values and, with rotated keys, keys after RoPE, as views
    of the cache over all its slots ([B, Hkv, C, D] each): the layer without its index, so
    that one compiled function serves every layer."""

    k: torch.Tensor
    v: torch.Tensor
    k_rot: torch.Tensor | None

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              k_rotated: torch.Tensor | None = None) -> None:
        """k, v, k_rotated: [B, Hkv, T, D] written at slots `slots` ([T] long) in place;
        k_rotated (k after RoPE at the slots' positions) is required with rotated keys."""
        self.k.index_copy_(2, slots, k.to(self.k.dtype))
        self.v.index_copy_(2, slots, v.to(self.v.dtype))
        if self.k_rot is not None:
            if k_rotated is None:
                raise ValueError("a cache with rotated keys needs k_rotated on write")
            self.k_rot.index_copy_(2, slots, k_rotated.to(self.k_rot.dtype))

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) of every slot: the keys after RoPE where kept, else before."""
        return (self.k if self.k_rot is None else self.k_rot), self.v


@dataclass(frozen=True)
class CacheLayer:
    """Layer `index` of `cache`, written and read through the cache (views taken at each
    call, which ONNX tracing follows into the cache), attended over slots below `length`."""

    cache: KVCache
    index: int
    length: int

    @property
    def k_rot(self) -> torch.Tensor | None:
        return self.cache.k_rot

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              k_rotated: torch.Tensor | None = None) -> None:
        """`KVCache.write` of this layer."""
        self.cache.write(self.index, slots, k, v, k_rotated)

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(keys, values) [B, Hkv, S, D] of slots < length: the keys after RoPE where kept,
        else before."""
        if self.cache.k_rot is not None:
            return self.cache.rotated_view(self.index, self.length)
        keys, values, _ = self.cache.layer_view(self.index, self.length)
        return keys, values


class KVCache:
    """Per-layer pre-RoPE keys and values in one allocation, plus each slot's 3D position.

    Keys are stored before rotary embedding; attention rotates them with `positions` at use,
    so cached entries can be moved (re-positioned) without recomputation. `length` is the
    number of valid slots; rolling back is setting it lower.

    With `rotated_keys`, `k_rot` also holds every slot's key after RoPE at its current
    position: attention writes it with the new keys, and slots moved by `set_positions` are
    listed until the backbone re-rotates them (`take_moved`), once per move instead of at
    every attention call.
    """

    def __init__(self, num_layers: int, batch: int, num_kv_heads: int, capacity: int,
                 head_dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu", rotated_keys: bool = False) -> None:
        shape = (num_layers, batch, num_kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # k: [L, B, Hkv, C, D]
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # v: [L, B, Hkv, C, D]
        self.k_rot = (torch.zeros(shape, dtype=dtype, device=device) if rotated_keys
                      else None)  # k_rot: [L, B, Hkv, C, D]
        self.positions = torch.zeros(3, batch, capacity, dtype=torch.long,
                                     device=device)  # positions: [3, B, C]
        self.length = 0
        self._moved: list[torch.Tensor] = []

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    @property
    def num_layers(self) -> int:
        return self.k.shape[0]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              k_rotated: torch.Tensor | None = None) -> None:
        """k, v, k_rotated: [B, Hkv, T, D] written at cache slots `slots` ([T] long);
        k_rotated (k after RoPE at the slots' positions) is required with rotated keys."""
        self.k[layer].index_copy_(2, slots, k.to(self.k.dtype))
        self.v[layer].index_copy_(2, slots, v.to(self.v.dtype))
        if self.k_rot is not None:
            if k_rotated is None:
                raise ValueError("a cache with rotated keys needs k_rotated on write")
            self.k_rot[layer].index_copy_(2, slots, k_rotated.to(self.k_rot.dtype))

    def write_positions(self, slots: torch.Tensor, positions: torch.Tensor) -> None:
        """positions: [3, B, T] of the slots ([T] long) whose keys the next forward writes."""
        self.positions.index_copy_(2, slots, positions.to(torch.long))

    def set_positions(self, slots: torch.Tensor, positions: torch.Tensor) -> None:
        """Moves cached slots ([T] long) to positions [3, B, T]; with rotated keys their
        rotated keys are stale until `take_moved` hands them to the backbone."""
        self.write_positions(slots, positions)
        if self.k_rot is not None:
            self._moved.append(slots)

    @property
    def has_moved(self) -> bool:
        return bool(self._moved)

    def take_moved(self) -> torch.Tensor | None:
        """The slots moved since the last call ([M] long, possibly repeated), or None."""
        if not self._moved:
            return None
        moved, self._moved = torch.cat(self._moved), []
        return moved

    def advance_to(self, length: int) -> None:
        if not 0 <= length <= self.capacity:
            raise ValueError(f"cache length {length} outside [0, {self.capacity}]")
        self.length = max(self.length, length)

    def rollback(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"rollback to {length} but cache holds {self.length}")
        self.length = length

    def reset(self) -> None:
        self.length = 0
        self._moved = []

    def layer(self, layer: int, length: int) -> CacheLayer:
        """Layer `layer`, attended over slots below `length`, written and read through the
        cache."""
        return CacheLayer(self, layer, length)

    def layer_views(self, layer: int) -> LayerKV:
        """Layer `layer`'s tensors as views over every slot."""
        rotated = None if self.k_rot is None else self.k_rot[layer]
        return LayerKV(self.k[layer], self.v[layer], rotated)

    def layer_view(self, layer: int, end: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(k [B, Hkv, S, D] pre-RoPE, v [B, Hkv, S, D], positions [3, B, S]) for slots < end."""
        end = self.length if end is None else end
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end], self.positions[:, :, :end]

    def rotated_view(self, layer: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(k after RoPE [B, Hkv, S, D], v [B, Hkv, S, D]) for slots < end."""
        return self.k_rot[layer, :, :, :end], self.v[layer, :, :, :end]
