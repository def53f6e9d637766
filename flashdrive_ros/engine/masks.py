"""Attention masks over cache slots whose order differs from the prompt's token order.

In the streaming cache an image block can sit in a slot range that is not where its frame
falls in the prompt; every slot therefore carries its *prompt order* (the index the token has
in the full, view-major prompt). Causality is by prompt order: a query attends to every valid
key whose prompt order is not after its own. For the streaming prefill this gives exactly the
FlashDrive streaming mask: the new frame of view k sees the system prefix, every frame of views
before k, the earlier frames of view k and itself causally, and not views after k; the
recomputed tail sees everything before it and itself causally.

Masks are boolean, True = may attend, shaped [B, 1, T, S] for the backbone.
"""

from __future__ import annotations

import torch


def prompt_order_causal_mask(query_order: torch.Tensor, key_order: torch.Tensor,
                             batch: int = 1) -> torch.Tensor:
    """query_order: [T], key_order: [S] prompt-order indices -> mask [B, 1, T, S] bool."""
    if query_order.ndim != 1 or key_order.ndim != 1:
        raise ValueError(f"orders must be 1D, got {tuple(query_order.shape)} and "
                         f"{tuple(key_order.shape)}")
    allowed = key_order[None, :] <= query_order[:, None]  # allowed: [T, S]
    return allowed[None, None].expand(batch, 1, -1, -1)


def slot_mask(slot_order: torch.Tensor, query_slots: torch.Tensor, num_keys: int,
              batch: int = 1) -> torch.Tensor:
    """Mask for queries written at `query_slots` ([T]) over cache slots [0, num_keys).

    slot_order: [C] prompt order of every cache slot (C >= num_keys).
    """
    if num_keys > slot_order.shape[0]:
        raise ValueError(f"{num_keys} keys but slot_order covers {slot_order.shape[0]} slots")
    if query_slots.numel() and int(query_slots.max()) >= num_keys:
        raise ValueError(f"query slot {int(query_slots.max())} is not below num_keys "
                         f"{num_keys}: a query must see its own key")
    return prompt_order_causal_mask(slot_order[query_slots], slot_order[:num_keys], batch)


def is_plain_causal(slot_order: torch.Tensor, num_keys: int) -> bool:
    """True when slots [0, num_keys) are in prompt order, so slot-index causality suffices."""
    expected = torch.arange(num_keys, device=slot_order.device)
    return bool(torch.equal(slot_order[:num_keys], expected))
