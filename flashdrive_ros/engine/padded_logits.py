"""lm_head logits of a few rows as weight @ rows^T, the row count padded to a multiple of 8.

At the Alpamayo shape (bf16, vocabulary 155697, hidden 4096) on an H200 this form reads the
weight at about 4 TB/s, where rows @ weight^T with 7 to 64 rows runs at 0.9 to 1.3 TB/s
(`scripts/decode_kernels.py`); a speculative round has two such products (verify, draft).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROW_MULTIPLE = 8


class PaddedRowLogits(nn.Module):
    """The same function as `lm_head` (a bias-free Linear), computed as weight @ rows^T."""

    def __init__(self, lm_head: nn.Linear) -> None:
        super().__init__()
        if lm_head.bias is not None:
            raise ValueError("PaddedRowLogits needs a bias-free lm_head")
        self.lm_head = lm_head

    @property
    def weight(self) -> torch.Tensor:
        return self.lm_head.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [..., H] -> logits [..., V]."""
        rows = hidden.reshape(-1, hidden.shape[-1])  # [N, H]
        count = rows.shape[0]
        rows = F.pad(rows, (0, 0, 0, -count % ROW_MULTIPLE))  # [N', H], N' % 8 == 0
        logits = torch.mm(self.lm_head.weight, rows.t()).t()  # [N', V]
        return logits[:count].reshape(*hidden.shape[:-1], -1)
