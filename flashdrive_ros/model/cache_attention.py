"""Length-aware attention over the whole-capacity KV cache: a decode / verify block over the
cache, and the action tokens over the staged prefix.

The fixed-shape steps attend over every cache slot with a dense additive mask (key slot <=
query slot), which the flash kernels do not take. `FlexCacheAttention` takes the block's
first slot instead: a FlexAttention block mask over the capacity, built once, whose number
of key blocks per query block follows the length (device tensors updated in place, so CUDA
graphs capture it), and a mask_mod for the causal edge. Query heads share kv heads in groups
(`enable_gqa`). Compiled (`torch.compile`) the kernel reads only the key blocks below the
length; eager, torch computes the same result through its unfused path.

`GemmCacheAttention` / `GemmPrefixAttention` take the same places with the dense mask kept
and the fused kernel left out: scores by one batched GEMM over every slot, a masked float32
softmax, the output by a second GEMM. A fused kernel over a short query block runs one
thread block per kv head and query tile (8 at Alpamayo shape), each reading the whole cache;
the GEMMs spread the slots over the whole GPU.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

VERIFY_ATTENTION = ("masked", "flex", "gemm")
ACTION_ATTENTION = ("masked", "flex", "gemm")
KV_BLOCK = 128

_compiled_flex = None


def compiled_flex():
    """flex_attention compiled once per process (its fused kernel)."""
    global _compiled_flex
    if _compiled_flex is None:
        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


def flex_kernel(compiled: bool):
    """`compiled_flex()` where `compiled`, else flex_attention as it is; flex_attention itself
    inside a region being compiled, whose graph takes it in."""
    if compiled and not torch.compiler.is_compiling():
        return compiled_flex()
    return flex_attention


def check_block_shapes(kind: str, q: torch.Tensor, keys: torch.Tensor, block: int,
                       capacity: int) -> None:
    """Refuses a call whose query block or cache differs from the shapes built for."""
    if keys.shape[2] != capacity or q.shape[2] != block:
        raise ValueError(f"{kind} cache attention is built for {block} queries over "
                         f"{capacity} slots, got {q.shape[2]} over {keys.shape[2]}")


def check_prefix_shapes(kind: str, q: torch.Tensor, keys: torch.Tensor, num_tokens: int,
                        prefix_slots: int) -> None:
    """Refuses a call whose action tokens or staged slots differ from the shapes built for."""
    if q.shape[2] != num_tokens or keys.shape[2] != prefix_slots + num_tokens:
        raise ValueError(f"{kind} prefix attention is built for {num_tokens} tokens over "
                         f"{prefix_slots} + {num_tokens} slots, got {q.shape[2]} over "
                         f"{keys.shape[2]}")


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
        check_block_shapes("flex", q, keys, self.block, self.capacity)
        attend = flex_kernel(self.compiled)
        return attend(q, keys, values, block_mask=self.block_mask, enable_gqa=True)


class FlexPrefixAttention:
    """Attention of `num_tokens` action tokens over a staged prefix: keys and values laid out
    as [prefix_slots + num_tokens] (StagedKV with `prefix_slots`, the cache capacity rounded
    up to KV_BLOCK), the first `length` prefix slots and every action token attended. The
    block mask reads the prefix's key blocks below the length, then the action tokens'
    (device tensors updated in place, so CUDA graphs capture it)."""

    def __init__(self, capacity: int, num_tokens: int, device: torch.device | str,
                 compiled: bool) -> None:
        if capacity < 1 or num_tokens < 1:
            raise ValueError(f"need capacity, num_tokens >= 1, got {capacity} and {num_tokens}")
        self.capacity = capacity
        self.num_tokens = num_tokens
        self.compiled = compiled
        prefix_blocks = -(-capacity // KV_BLOCK)
        own_blocks = -(-num_tokens // KV_BLOCK)
        self.prefix_slots = prefix_blocks * KV_BLOCK
        self.length = torch.ones(1, dtype=torch.long, device=device)  # [1] prefix slots read
        self._prefix_blocks = prefix_blocks
        self._own_blocks = own_blocks
        self._block_ids = torch.arange(prefix_blocks + own_blocks, dtype=torch.int32,
                                       device=device)  # [KB]
        self.kv_num_blocks = torch.ones(1, 1, 1, dtype=torch.int32, device=device)  # [1,1,1]
        self.kv_indices = self._block_ids.clone().view(1, 1, 1, -1)  # [1, 1, 1, KB]
        length, prefix_slots = self.length, self.prefix_slots

        def prefix_or_own(b, h, q_idx, kv_idx):
            return (kv_idx < length[0]) | (kv_idx >= prefix_slots)

        self.block_mask = BlockMask.from_kv_blocks(
            self.kv_num_blocks, self.kv_indices, BLOCK_SIZE=KV_BLOCK, mask_mod=prefix_or_own,
            seq_lengths=(num_tokens, self.prefix_slots + num_tokens))

    def update(self, prefix_len: torch.Tensor) -> None:
        """prefix_len: [1] long device, in [1, capacity]; sets the key blocks to read (no host
        read)."""
        if prefix_len.shape != (1,):
            raise ValueError(f"prefix_len must be [1], got {tuple(prefix_len.shape)}")
        self.length.copy_(prefix_len)
        used = torch.div(prefix_len + KV_BLOCK - 1, KV_BLOCK, rounding_mode="floor").to(
            torch.int32)  # [1] prefix blocks read
        ids = self._block_ids
        order = torch.where(ids < used, ids, ids - used + self._prefix_blocks)
        self.kv_indices.view(-1).copy_(order.clamp(max=int(ids.numel()) - 1))
        self.kv_num_blocks.view(1).copy_(used + self._own_blocks)

    def __call__(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
                 ) -> torch.Tensor:
        """q: [K, Hq, N, D]; keys, values: [K, Hkv, prefix_slots + N, D] -> [K, Hq, N, D]."""
        check_prefix_shapes("flex", q, keys, self.num_tokens, self.prefix_slots)
        attend = flex_kernel(self.compiled)
        return attend(q, keys, values, block_mask=self.block_mask, enable_gqa=True)


def gemm_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                   valid: torch.Tensor) -> torch.Tensor:
    """q: [B, Hq, T, D]; keys, values: [B, Hkv, S, D]; valid: bool [T, S] or [1, S], True
    where a query attends a slot -> [B, Hq, T, D]. Query heads share kv heads in groups of
    Hq / Hkv; the scores leave the first GEMM in q's dtype, the softmax runs in float32."""
    b, hq, t, d = q.shape
    hkv, s = keys.shape[1], keys.shape[2]
    group = hq // hkv
    grouped = q.reshape(b, hkv, group * t, d)  # grouped: [B, Hkv, G*T, D]
    scores = torch.matmul(grouped, keys.transpose(-1, -2)).view(b, hkv, group, t, s)
    scores = scores.float() * d ** -0.5  # scores: [B, Hkv, G, T, S]
    scores = scores.masked_fill(~valid, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(values.dtype).view(b, hkv, group * t, s)
    return torch.matmul(probs, values).view(b, hq, t, d)


class GemmCacheAttention:
    """`FlexCacheAttention`'s place (the same update and call) through `gemm_attention`
    over the dense causal-by-slot mask."""

    def __init__(self, capacity: int, block: int, device: torch.device | str) -> None:
        if block < 1 or capacity < block:
            raise ValueError(f"need 1 <= block <= capacity, got {block} and {capacity}")
        self.capacity = capacity
        self.block = block
        self._key_slots = torch.arange(capacity, device=device)  # [C]
        self.valid = torch.zeros(block, capacity, dtype=torch.bool, device=device)  # [T, C]

    def update(self, slots: torch.Tensor) -> None:
        """slots: [T] long device; sets the keys each query attends (no host read)."""
        if slots.shape != (self.block,):
            raise ValueError(f"slots must be [{self.block}], got {tuple(slots.shape)}")
        self.valid.copy_(self._key_slots[None, :] <= slots[:, None])

    def __call__(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
                 ) -> torch.Tensor:
        """q: [B, Hq, T, D]; keys, values: [B, Hkv, C, D] -> [B, Hq, T, D]."""
        check_block_shapes("gemm", q, keys, self.block, self.capacity)
        return gemm_attention(q, keys, values, self.valid)


class GemmPrefixAttention:
    """`FlexPrefixAttention`'s place (the same update and call) through `gemm_attention`:
    the action tokens over a StagedKV of `capacity` prefix slots (no rounding) and their
    own, the prefix slots below the length and every action token attended."""

    def __init__(self, capacity: int, num_tokens: int, device: torch.device | str) -> None:
        if capacity < 1 or num_tokens < 1:
            raise ValueError(f"need capacity, num_tokens >= 1, got {capacity} and {num_tokens}")
        self.num_tokens = num_tokens
        self.prefix_slots = capacity
        self._slots = torch.arange(capacity + num_tokens, device=device)  # [C + N]
        self.valid = torch.ones(1, capacity + num_tokens, dtype=torch.bool,
                                device=device)  # [1, C + N]

    def update(self, prefix_len: torch.Tensor) -> None:
        """prefix_len: [1] long device, in [1, capacity]; sets the slots read (no host read)."""
        if prefix_len.shape != (1,):
            raise ValueError(f"prefix_len must be [1], got {tuple(prefix_len.shape)}")
        self.valid.copy_(((self._slots < prefix_len) | (self._slots >= self.prefix_slots))[None])

    def __call__(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
                 ) -> torch.Tensor:
        """q: [K, Hq, N, D]; keys, values: [K, Hkv, prefix_slots + N, D] -> [K, Hq, N, D]."""
        check_prefix_shapes("gemm", q, keys, self.num_tokens, self.prefix_slots)
        return gemm_attention(q, keys, values, self.valid)


CACHE_ATTENTIONS = (FlexCacheAttention, GemmCacheAttention)
PREFIX_ATTENTIONS = (FlexPrefixAttention, GemmPrefixAttention)
CacheAttention = FlexCacheAttention | GemmCacheAttention
PrefixAttention = FlexPrefixAttention | GemmPrefixAttention
