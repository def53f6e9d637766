"""Drafter rollouts for action-aware RL: stochastic only where the greedy drafter is wrong.

Per block (a prompt of the RL batch) the drafter's teacher-forced distributions over its
K - 1 drafted positions are known; the labels are the target's greedy tokens. A rollout keeps
the label wherever the drafter's argmax equals it and draws from the drafter elsewhere. The
rollout's *rejected* positions are where its token differs from the label (verification would
reject there); the contaminated CoC substitutes the rollout's tokens at the first N of them
into the target's greedy CoC, which the target's action expert then reads.
"""

from __future__ import annotations

import torch

from flashdrive_ros.train.drafter_data import IGNORE


def wrong_positions(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """logits: [B, P, V]; labels: [B, P] -> [B, P] bool: argmax differs from a real label."""
    return (logits.argmax(-1) != labels) & (labels != IGNORE)


def sample_rollouts(probs: torch.Tensor, labels: torch.Tensor, stochastic: torch.Tensor,
                    rollouts: int, generator: torch.Generator) -> torch.Tensor:
    """probs: [B, P, V]; labels, stochastic: [B, P] -> tokens [B, R, P]: a draw from probs
    where stochastic, the label elsewhere."""
    b, p, v = probs.shape
    draws = torch.multinomial(probs.reshape(b * p, v).float(), rollouts, replacement=True,
                              generator=generator)  # draws: [B * P, R]
    draws = draws.view(b, p, rollouts).transpose(1, 2)  # draws: [B, R, P]
    return torch.where(stochastic[:, None], draws, labels[:, None].expand(-1, rollouts, -1))


def rejected_positions(tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """tokens: [B, R, P]; labels: [B, P] -> [B, R, P] bool: a real label the token misses."""
    return (tokens != labels[:, None]) & (labels[:, None] != IGNORE)


def first_rejected(rejected: torch.Tensor, count: int) -> torch.Tensor:
    """[B, R, P] bool -> the first `count` True positions along P of every rollout."""
    return rejected & (rejected.long().cumsum(dim=-1) <= count)


def token_match(tokens: torch.Tensor, labels: torch.Tensor, stochastic: torch.Tensor
                ) -> torch.Tensor:
    """[B, R]: share of the stochastic positions where the rollout drew the label (1 when a
    block has none)."""
    hits = ((tokens == labels[:, None]) & stochastic[:, None]).sum(-1).float()
    total = stochastic.sum(-1, keepdim=True).float()  # total: [B, 1]
    return torch.where(total > 0, hits / total.clamp(min=1), torch.ones_like(hits))


def contaminated_cocs(coc: list[int], block_start: int, labels: list[int],
                      tokens: torch.Tensor, substitute: torch.Tensor, cot_end_id: int,
                      future_start_id: int) -> list[list[int]]:
    """The target's greedy CoC, then one contaminated copy per rollout.

    coc: greedy CoC tokens (committed, without <|traj_future_start|>); block_start: the CoC
    index of the first drafted position; labels: [P] its greedy tokens there (IGNORE past the
    end); tokens, substitute: [R, P] a rollout's tokens and where to put them. Every sequence
    stops at its first <|cot_end|> (added when missing) and ends with <|traj_future_start|>,
    as the engine writes it before the action expert runs.
    """
    sequences = [list(coc)]
    for row, where in zip(tokens.tolist(), substitute.tolist()):
        mixed = list(coc)
        for offset, (token, put) in enumerate(zip(row, where)):
            if put and labels[offset] != IGNORE:
                mixed[block_start + offset] = int(token)
        sequences.append(mixed)
    out = []
    for seq in sequences:
        cut = seq.index(cot_end_id) + 1 if cot_end_id in seq else len(seq)
        seq = seq[:cut] + ([] if cot_end_id in seq[:cut] else [cot_end_id])
        out.append(seq + [future_start_id])
    return out
