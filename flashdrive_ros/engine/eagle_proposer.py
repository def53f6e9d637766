"""Speculative proposals from the EAGLE-3-style drafter: a K - 1 step chain per round."""

from __future__ import annotations

import torch

from flashdrive_ros.engine.decoding import sampling_probs
from flashdrive_ros.engine.speculative import (
    Proposal,
    ProposalRequest,
    TargetSharingProposer,
    proposal_positions,
)
from flashdrive_ros.model.eagle_drafter import EagleDrafter


class EagleProposer(TargetSharingProposer):
    """Drafts with an `EagleDrafter`, reusing the target's embedding and lm_head. Needs the
    context's token ids (`ProposalRequest.feature_ids`) besides its features."""

    drafter: EagleDrafter

    @torch.no_grad()
    def propose(self, request: ProposalRequest) -> Proposal:
        if request.features is None or request.feature_ids is None:
            raise ValueError("the eagle3 drafter needs target features and their token ids: "
                             "build the Target with feature_layers = drafter target_layer_ids "
                             "and prefill with context_len and token_ids")
        device = request.features.device
        positions = proposal_positions(request, self.drafter.cfg.rotary, self.block_size)
        pending = torch.tensor([request.pending_token], dtype=torch.long, device=device)
        draft_probs: list[torch.Tensor] = []

        def next_tokens(step: int, logits: torch.Tensor) -> torch.Tensor:
            """logits: [1, V] -> [1]: argmax, or a draw from the sampling distribution."""
            if request.sampling is None:
                return torch.argmax(logits, dim=-1)
            probs = sampling_probs(logits[0], request.sampling)
            draft_probs.append(probs)
            return torch.multinomial(probs, 1, generator=request.generator)

        _, tokens = self.drafter.chain_logits(
            request.features[None], request.feature_ids[None].to(device), pending, positions,
            self.embed_tokens, self.lm_head, next_tokens)
        probs = torch.stack(draft_probs) if draft_probs else None  # probs: [K - 1, V]
        return Proposal(tokens[0], probs)
