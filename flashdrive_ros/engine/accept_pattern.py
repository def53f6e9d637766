"""Drafts at a chosen acceptance: the target's own greedy tokens, cut where a pattern says.

`AcceptPatternProposer` runs the wrapped proposer every round (so a round costs what a
drafter round costs: draft forward, verify, commit) and replaces its drafts with the
recorded greedy tokens of the window (`recorded`: the decoded tokens of a greedy run over the
same cache state), right for the first c - 1 drafts and wrong at draft c, so the round
commits exactly c tokens (c - 1 accepted drafts and the target's token). The c of round r
come from `round_commits`: a mean of L tokens per round spread evenly (Bresenham), each in
[1, block size]. Verification is unchanged, so the output is still the greedy output; where
the target departs from `recorded` the drafts are simply rejected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from flashdrive_ros.engine.speculative import Proposal, ProposalRequest, Proposer


def round_commits(accepted_length: float, block_size: int, rounds: int) -> list[int]:
    """Tokens committed in each of `rounds` rounds: mean `accepted_length`, each round
    floor((r + 1) L) - floor(r L), in [1, block_size]."""
    if block_size < 2:
        raise ValueError(f"block_size must be >= 2, got {block_size}")
    if not 1 <= accepted_length <= block_size:
        raise ValueError(f"accepted length must be in [1, {block_size}] at block "
                         f"{block_size}, got {accepted_length}")
    return [math.floor((r + 1) * accepted_length + 1e-9) - math.floor(r * accepted_length + 1e-9)
            for r in range(rounds)]


def expected_rounds(accepted_length: float, block_size: int, tokens_after_first: int) -> int:
    """Rounds needed to commit `tokens_after_first` tokens (the first comes from the prefill)
    under `round_commits`."""
    done, rounds = 0, 0
    for commit in round_commits(accepted_length, block_size, max(tokens_after_first, 0)):
        if done >= tokens_after_first:
            break
        done += commit
        rounds += 1
    return rounds


def pattern_drafts(recorded: Sequence[int], commits: Sequence[int], block_size: int,
                   vocab_size: int) -> list[list[int]]:
    """Drafts [R][block_size - 1] of each round, assuming the target commits `recorded`:
    round r starts after 1 + sum(commits[:r]) tokens; drafts recorded[n : n + c - 1], then a
    token other than recorded[n + c - 1] (past the end of `recorded`: any token)."""
    rounds, start = [], 1
    for commit in commits:
        right = [int(t) for t in recorded[start:start + commit - 1]]
        nxt = recorded[start + commit - 1] if start + commit - 1 < len(recorded) else 0
        wrong = (int(nxt) + 1) % vocab_size
        drafts = right + [wrong] * (block_size - 1 - len(right))
        rounds.append(drafts[:block_size - 1])
        start += commit
    return rounds


class AcceptPatternProposer:
    """Runs `base` (for its cost) and drafts `recorded` so each round commits the tokens of
    `round_commits(accepted_length, ...)`; the drafts of all rounds go to `device` at once."""

    def __init__(self, base: Proposer, recorded: Sequence[int], accepted_length: float,
                 vocab_size: int, device: torch.device | str) -> None:
        self.base = base
        self.block_size = base.block_size
        self.context_len = base.context_len
        self.feature_layers = getattr(base, "feature_layers", None)
        self.recorded = [int(t) for t in recorded]
        rounds = max(len(self.recorded), 1)
        self.commits = round_commits(accepted_length, self.block_size, rounds)
        drafts = pattern_drafts(self.recorded, self.commits, self.block_size, vocab_size)
        self.drafts = torch.tensor(drafts, dtype=torch.long, device=device)  # [R, K - 1]
        self.round = 0

    def propose(self, request: ProposalRequest) -> Proposal:
        self.base.propose(request)
        if self.round >= self.drafts.shape[0]:
            raise ValueError(f"round {self.round} beyond the {self.drafts.shape[0]} rounds "
                             "the recorded tokens allow")
        drafts = self.drafts[self.round]
        self.round += 1
        return Proposal(drafts, None)
