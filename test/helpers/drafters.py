"""Drafters with weights moved off their initialisation, beside a target embedding and
lm_head of their own."""

import torch
from torch import nn

from flashdrive_ros.model.config import TextConfig


def with_target_head(drafter: nn.Module, text: TextConfig
                     ) -> tuple[nn.Module, nn.Embedding, nn.Linear]:
    """(drafter with 0.1 N(0, 1) added to every weight, embedding, lm_head) of `text`'s
    sizes, drawn from the global torch generator."""
    with torch.no_grad():
        for p in drafter.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    embed = nn.Embedding(text.vocab_size, text.hidden_size)
    head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)
    return drafter, embed, head
