"""The speculative proposer for a drafter of either kind."""

from __future__ import annotations

from torch import nn

from flashdrive_ros.engine.eagle_proposer import EagleProposer
from flashdrive_ros.engine.speculative import DFlashProposer
from flashdrive_ros.model.drafter_file import AnyDrafter
from flashdrive_ros.model.eagle_drafter import EagleDrafter


def make_proposer(drafter: AnyDrafter, embed_tokens: nn.Embedding, lm_head: nn.Module
                  ) -> DFlashProposer | EagleProposer:
    if isinstance(drafter, EagleDrafter):
        return EagleProposer(drafter, embed_tokens, lm_head)
    return DFlashProposer(drafter, embed_tokens, lm_head)
