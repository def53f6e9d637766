"""Attention budget of a DFlash drafter's first layer: the share of attention mass from the
block's queries onto context keys of each token type (vision, ego history, other prompt text,
generated CoC) and onto the block itself, averaged over heads, queries and blocks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import nn

from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.train.drafter_data import DraftBatch, DraftCorpus, sample_blocks

TOKEN_TYPES = ("vision", "history", "prompt_text", "generated")
PADDING = -1


def context_token_types(batch: DraftBatch, prompt_len: int, image_token_id: int,
                        history: range) -> torch.Tensor:
    """[B, C] long: index into TOKEN_TYPES per context entry, PADDING where masked."""
    c = batch.context_ids.shape[1]
    index = batch.flat_positions[:, :c]  # prompt-order index of every context token
    types = torch.full_like(index, TOKEN_TYPES.index("prompt_text"))
    types[(index >= history.start) & (index < history.stop)] = TOKEN_TYPES.index("history")
    types[batch.context_ids == image_token_id] = TOKEN_TYPES.index("vision")
    types[index >= prompt_len] = TOKEN_TYPES.index("generated")
    return types.masked_fill(~batch.context_mask, PADDING)


def budget_of_weights(weights: torch.Tensor, types: torch.Tensor) -> dict[str, torch.Tensor]:
    """weights: [B, H, K, C + K] softmax rows; types: [B, C] -> per row [B] shares."""
    c = types.shape[1]
    mass = weights.float().mean(dim=(1, 2))  # mass: [B, C + K]
    shares = {name: (mass[:, :c] * (types == i)).sum(dim=1)
              for i, name in enumerate(TOKEN_TYPES)}
    shares["block"] = mass[:, c:].sum(dim=1)
    return shares


@torch.no_grad()
def attention_budget(drafter: Drafter, corpus: DraftCorpus, rows: torch.Tensor,
                     embed_tokens: nn.Embedding, prompt_len: int, image_token_id: int,
                     history: range, seed: int,
                     autocast: Callable[[], contextlib.AbstractContextManager],
                     block_size: int | None = None, batch_size: int = 64) -> dict[str, float]:
    """Mean shares over one random block per row of `rows` (they sum to 1)."""
    drafter.eval()
    block_size = block_size or drafter.cfg.block_size
    gen = torch.Generator(device=corpus.ids.device).manual_seed(seed)
    totals = {name: 0.0 for name in (*TOKEN_TYPES, "block")}
    for start in range(0, len(rows), batch_size):
        batch = sample_blocks(corpus, rows[start:start + batch_size], block_size,
                              drafter.mask_token_id, gen, drafter.cfg.context_len)
        with autocast():
            weights = drafter.first_layer_attention(
                batch.context, drafter.embed_block(batch.block_ids, embed_tokens),
                batch.positions_for(drafter.cfg.rotary), batch.context_mask)
        types = context_token_types(batch, prompt_len, image_token_id, history)
        for name, share in budget_of_weights(weights, types).items():
            totals[name] += float(share.sum())
    return {name: value / max(len(rows), 1) for name, value in totals.items()}
