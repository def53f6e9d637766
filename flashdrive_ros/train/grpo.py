"""Group-relative policy optimisation pieces for drafter RL: advantages within each prompt's
group of rollouts, the policy-gradient loss on the sampled positions, and the KL to a frozen
reference drafter on an anchor set of positions.

Anchor sets: "static" = positions the frozen reference (the SFT drafter) already gets right;
"policy" = positions the current policy gets right (changes as it learns).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from flashdrive_ros.train.drafter_data import IGNORE

ANCHORS = ("static", "policy")


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """rewards: [B, R] -> (r - group mean) / (group std + eps); 0 where a group's rewards are
    all equal."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True, correction=0)
    return torch.where(std > eps, (rewards - mean) / (std + eps), torch.zeros_like(rewards))


def anchor_positions(anchor: str, reference_logits: torch.Tensor, policy_logits: torch.Tensor,
                     labels: torch.Tensor) -> torch.Tensor:
    """[B, P] bool: the positions whose distribution is held to the reference."""
    if anchor not in ANCHORS:
        raise ValueError(f"anchor must be one of {ANCHORS}, got {anchor!r}")
    logits = reference_logits if anchor == "static" else policy_logits
    return (logits.argmax(-1) == labels) & (labels != IGNORE)


def kl_to_reference(policy_logits: torch.Tensor, reference_logits: torch.Tensor,
                    mask: torch.Tensor) -> torch.Tensor:
    """Mean over `mask` ([B, P]) of KL(policy || reference) per position (0 if empty)."""
    logp = F.log_softmax(policy_logits.float(), dim=-1)
    logq = F.log_softmax(reference_logits.float(), dim=-1)
    kl = (logp.exp() * (logp - logq)).sum(-1)  # kl: [B, P]
    return (kl * mask).sum() / mask.sum().clamp(min=1)


def policy_loss(policy_logits: torch.Tensor, tokens: torch.Tensor, stochastic: torch.Tensor,
                advantages: torch.Tensor) -> torch.Tensor:
    """-mean over rollouts of advantage x mean log-probability of the rollout's tokens at the
    stochastic positions. policy_logits: [B, P, V]; tokens: [B, R, P] (labels where not
    stochastic); stochastic: [B, P]; advantages: [B, R]."""
    logp = F.log_softmax(policy_logits.float(), dim=-1)  # logp: [B, P, V]
    safe = tokens.clamp(min=0)
    chosen = logp[:, None].expand(-1, tokens.shape[1], -1, -1).gather(
        -1, safe[..., None])[..., 0]  # chosen: [B, R, P]
    weight = stochastic[:, None].float()
    mean_logp = (chosen * weight).sum(-1) / weight.sum(-1).clamp(min=1)  # [B, R]
    return -(advantages.detach() * mean_logp).mean()
