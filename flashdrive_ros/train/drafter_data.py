"""DFlash training blocks cut from the target's own greedy CoC sequences.

A sequence is prompt + greedy CoC (through `<|traj_future_start|>`). The target's hidden
states at the drafter's layers are stored for the last C_s prompt tokens and every CoC token.
An anchor a is a committed CoC token: the block is [token a, mask x (K - 1)], the labels are
tokens a+1..a+K-1 (ignored past the sequence end), the context is the features and ids of
the C tokens a-C..a-1 (C defaults to C_s; entries before the first stored token are padding,
False in `context_mask`). Flat rotary takes the sequence indices, mrope the target's 3D
positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

IGNORE = -100


@dataclass
class DraftCorpus:
    """Everything drafter training needs, for N sequences.

    ids: [N, C + M] tokens from prompt index prompt_len - C on (padded past lengths);
    features: [N, C + M, L * H] target hidden states at the drafter's layers for those tokens;
    positions: [3, N, C + M] the target's 3D positions; lengths: [N] valid tokens per row
    (C + CoC length); prompt_len: the prompt length (index of the first CoC token);
    context_len: C, the prompt tokens stored; windows: [N] the training-set window of each
    row, where known.
    """

    ids: torch.Tensor
    features: torch.Tensor
    positions: torch.Tensor
    lengths: torch.Tensor
    prompt_len: int
    context_len: int
    windows: torch.Tensor | None = None

    def __post_init__(self) -> None:
        n, width = self.ids.shape
        if self.features.shape[:2] != (n, width) or self.positions.shape != (3, n, width):
            raise ValueError("ids, features and positions must cover the same [N, C + M]")
        if self.lengths.shape != (n,) or int(self.lengths.min()) < self.context_len + 2:
            raise ValueError("every row needs the context and at least two CoC tokens")

    def __len__(self) -> int:
        return self.ids.shape[0]


@dataclass
class DraftBatch:
    context: torch.Tensor  # [B, C, L * H]
    block_ids: torch.Tensor  # [B, K] anchor token then mask ids
    labels: torch.Tensor  # [B, K - 1] next tokens or IGNORE
    flat_positions: torch.Tensor  # [B, C + K]
    mrope_positions: torch.Tensor  # [3, B, C + K]
    context_ids: torch.Tensor  # [B, C] token ids of the context
    context_mask: torch.Tensor  # [B, C] bool, False = padding
    rows: torch.Tensor  # [B] corpus rows
    anchors: torch.Tensor  # [B] anchor index in the row's local coordinates

    def positions_for(self, rotary: str) -> torch.Tensor:
        return self.flat_positions if rotary == "flat" else self.mrope_positions

    def select(self, index: torch.Tensor) -> DraftBatch:
        """The blocks `index` ([B'] long) of this batch."""
        return DraftBatch(self.context[index], self.block_ids[index], self.labels[index],
                          self.flat_positions[index], self.mrope_positions[:, index],
                          self.context_ids[index], self.context_mask[index], self.rows[index],
                          self.anchors[index])


def concat_corpora(a: DraftCorpus, b: DraftCorpus) -> DraftCorpus:
    """The rows of `a` then those of `b` (windows dropped: they index different sets)."""
    if a.ids.shape[1] != b.ids.shape[1] or a.context_len != b.context_len:
        raise ValueError(f"draft corpora differ: widths {a.ids.shape[1]} vs {b.ids.shape[1]}, "
                         f"context {a.context_len} vs {b.context_len}")
    return DraftCorpus(torch.cat([a.ids, b.ids]), torch.cat([a.features, b.features]),
                       torch.cat([a.positions, b.positions], dim=1),
                       torch.cat([a.lengths, b.lengths]), a.prompt_len, a.context_len)


def sample_blocks(corpus: DraftCorpus, rows: torch.Tensor, block_size: int, mask_id: int,
                  generator: torch.Generator, context_len: int | None = None) -> DraftBatch:
    """One random anchor per row in `rows` ([B] long); `context_len` C (default: the
    corpus's stored prompt tokens)."""
    stored = corpus.context_len
    c = stored if context_len is None else context_len
    device = corpus.ids.device
    rows = rows.to(device)
    lengths = corpus.lengths[rows]
    # anchors in local coordinates: the first CoC token sits at local index `stored`
    span = (lengths - 1 - stored).clamp(min=1)
    draws = torch.rand(rows.shape[0], generator=generator, device=generator.device).to(device)
    anchor = stored + (draws * span).long().clamp(max=span - 1)  # anchor: [B]
    offsets = torch.arange(-c, block_size, device=device)  # offsets: [C + K]
    index = anchor[:, None] + offsets[None, :]  # index: [B, C + K]
    width = corpus.ids.shape[1]
    valid = (index >= 0) & (index < lengths[:, None])
    safe = index.clamp(min=0, max=width - 1)
    ids = corpus.ids[rows[:, None], safe]
    labels = ids[:, c + 1:].masked_fill(~valid[:, c + 1:], IGNORE)
    block_ids = torch.full((rows.shape[0], block_size), mask_id, dtype=torch.long, device=device)
    block_ids[:, 0] = ids[:, c]
    context = corpus.features[rows[:, None], safe[:, :c]]
    flat = index + (corpus.prompt_len - stored)
    context_pos = corpus.positions[:, rows[:, None], safe[:, :c]]  # [3, B, C]
    start = context_pos[:, :, -1].amax(dim=0) + 1  # start: [B]
    block_pos = start[:, None] + torch.arange(block_size, device=device)[None, :]
    mrope = torch.cat([context_pos, block_pos.unsqueeze(0).expand(3, -1, -1)], dim=2)
    return DraftBatch(context, block_ids, labels, flat, mrope, ids[:, :c], valid[:, :c], rows,
                      anchor)
