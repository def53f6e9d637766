"""A KV cache whose writes are out of place, so gradients flow through cached keys and values.

The inference `KVCache` writes into one preallocated tensor in place, which autograd cannot
differentiate through across layers; training forwards use this subclass instead.
"""

from __future__ import annotations

import torch

from flashdrive_ros.model.kv_cache import KVCache


class GradKVCache(KVCache):
    def __init__(self, num_layers: int, batch: int, num_kv_heads: int, capacity: int,
                 head_dim: int, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(num_layers, batch, num_kv_heads, capacity, head_dim, dtype, device)
        self.layer_k: list[torch.Tensor] = [self.k[i] for i in range(num_layers)]
        self.layer_v: list[torch.Tensor] = [self.v[i] for i in range(num_layers)]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              k_rotated: torch.Tensor | None = None) -> None:
        """k, v: [B, Hkv, T, D] written at cache slots `slots` ([T] long), out of place."""
        if k_rotated is not None:
            raise ValueError("a GradKVCache keeps no rotated keys")
        self.layer_k[layer] = self.layer_k[layer].index_copy(2, slots, k.to(self.k.dtype))
        self.layer_v[layer] = self.layer_v[layer].index_copy(2, slots, v.to(self.v.dtype))

    def layer_view(self, layer: int, end: int | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        end = self.length if end is None else end
        return (self.layer_k[layer][:, :, :end], self.layer_v[layer][:, :, :end],
                self.positions[:, :, :end])
