"""Length-aware attention of a decode / verify block over the whole-capacity KV cache.

The fixed-shape steps attend over every cache slot with a dense additive mask (key slot <=
query slot), which the flash kernels do not take. `FlexCacheAttention` takes the block's
first slot instead: a FlexAttention block mask over the capacity, built once, whose number
of key blocks per query block follows the length (device tensors updated in place, so CUDA
graphs capture it), and a mask_mod for the causal edge. Query heads share kv heads in groups
(`enable_gqa`). Compiled (`torch.compile`) the kernel reads only the key blocks below the
length; eager, torch computes the same result through its unfused path.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

VERIFY_ATTENTION = ("masked", "flex")
KV_BLOCK = 128

_compiled_flex = None


def compiled_flex():
    """flex_attention compiled once per process (its fused kernel)."""
    global _compiled_flex
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


class FlexCacheAttention:
    """Attention of `block` query rows written at cache slots [start, start + block) over
    slots [0, start + block) of a `capacity`-slot cache, causal within the block."""

    def __init__(self, capacity: int, block: int, device: torch.device | str,
                 compiled: bool) -> None:
        if block < 1 or capacity < block:
            raise ValueError(f"need 1 <= block <= capacity, got {block} and {capacity}")
        self.capacity = capacity
        self.block = block
        self.compiled = compiled
        self.start = torch.zeros(1, dtype=torch.long, device=device)  # [1] first query slot
        kv_blocks = -(-capacity // KV_BLOCK)
        self.kv_num_blocks = torch.ones(1, 1, 1, dtype=torch.int32, device=device)  # [1,1,QB]
        kv_indices = torch.arange(kv_blocks, dtype=torch.int32, device=device)
        start = self.start

        def causal_by_slot(b, h, q_idx, kv_idx):
            return kv_idx <= start[0] + q_idx

        self.block_mask = BlockMask.from_kv_blocks(
            self.kv_num_blocks, kv_indices.view(1, 1, 1, kv_blocks), BLOCK_SIZE=KV_BLOCK,
            mask_mod=causal_by_slot, seq_lengths=(block, capacity))

    def update(self, slots: torch.Tensor) -> None:
        """slots: [T] long device, consecutive; sets the start and the key blocks to read
        (no host read)."""
        if slots.shape != (self.block,):
            raise ValueError(f"slots must be [{self.block}], got {tuple(slots.shape)}")
        self.start.copy_(slots[:1])
        end = slots[-1:] + 1
        self.kv_num_blocks.view(1).copy_(torch.div(end + KV_BLOCK - 1, KV_BLOCK,
                                                   rounding_mode="floor"))

    def __call__(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
                 ) -> torch.Tensor:
        """q: [B, Hq, T, D]; keys, values: [B, Hkv, C, D] -> [B, Hq, T, D]."""
        if keys.shape[2] != self.capacity or q.shape[2] != self.block:
            raise ValueError(f"flex cache attention is built for {self.block} queries over "
                             f"{self.capacity} slots, got {q.shape[2]} over {keys.shape[2]}")
        attend = compiled_flex() if self.compiled else flex_attention
        return attend(q, keys, values, block_mask=self.block_mask, enable_gqa=True)
