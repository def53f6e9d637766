"""Preallocated KV cache holding keys before RoPE, with rollback by length."""

from __future__ import annotations

import torch


class KVCache:
    """Per-layer pre-RoPE keys and values in one allocation, plus each slot's 3D position.

    Keys are stored before rotary embedding; attention rotates them with `positions` at use,
    so cached entries can be moved (re-positioned) without recomputation. `length` is the
    number of valid slots; rolling back is setting it lower.
    """

    def __init__(self, num_layers: int, batch: int, num_kv_heads: int, capacity: int,
                 head_dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        shape = (num_layers, batch, num_kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # k: [L, B, Hkv, C, D]
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # v: [L, B, Hkv, C, D]
        self.positions = torch.zeros(3, batch, capacity, dtype=torch.long,
                                     device=device)  # positions: [3, B, C]
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    @property
    def num_layers(self) -> int:
        return self.k.shape[0]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """k, v: [B, Hkv, T, D] written at cache slots `slots` ([T] long)."""
        self.k[layer].index_copy_(2, slots, k.to(self.k.dtype))
        self.v[layer].index_copy_(2, slots, v.to(self.v.dtype))

    def set_positions(self, slots: torch.Tensor, positions: torch.Tensor) -> None:
        """positions: [3, B, T] for the slots `slots` ([T] long)."""
        self.positions.index_copy_(2, slots, positions.to(torch.long))

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

    def layer_view(self, layer: int, end: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(k [B, Hkv, S, D] pre-RoPE, v [B, Hkv, S, D], positions [3, B, S]) for slots < end."""
        end = self.length if end is None else end
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end], self.positions[:, :, :end]
