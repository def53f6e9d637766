"""Drafts from the previous window's CoC (`coc_reuse`).

At 10 Hz consecutive windows mostly explain the same scene, so the CoC decoded for the last
window is usually the CoC of this one, or shares long runs with it. The committed tokens are
looked up in the previous window's decoded tokens (CoC, <|cot_end|>, <|traj_future_start|>):
when they are its prefix, or their last `min_match` or more tokens occur in it, the tokens that
followed there are the drafts; otherwise the wrapped proposer (the drafter) drafts. Drafts from
the lookup are fixed tokens (no draft distribution), so greedy verification still gives the
greedy output and speculative sampling keeps the target's distribution.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from flashdrive_ros.engine.speculative import Proposal, ProposalRequest, Proposer


def lookup_drafts(sequence: Sequence[int], previous: Sequence[int], count: int,
                  min_match: int = 2) -> list[int] | None:
    """`count` drafts continuing `sequence` from `previous`, or None without a match.

    A match is `sequence` as a prefix of `previous`, else the longest suffix of `sequence`
    of at least `min_match` tokens found in `previous` (its first occurrence) with a token after
    it. A continuation shorter than `count` is padded with its last token. Linear in
    len(previous) times the match length."""
    n, m = len(sequence), len(previous)
    if count < 1 or n == 0:
        return None
    start = None
    if n < m and all(previous[i] == sequence[i] for i in range(n)):
        start = n
    else:
        best = min_match - 1
        for end in range(1, m):
            length = 0
            while (length < n and length < end
                   and previous[end - 1 - length] == sequence[n - 1 - length]):
                length += 1
            if length > best:
                best, start = length, end
    if start is None:
        return None
    drafts = [int(t) for t in previous[start:start + count]]
    return drafts + [drafts[-1]] * (count - len(drafts))


class CoCReuseProposer:
    """Drafts from `previous` (the last window's decoded tokens) where the committed tokens
    match it, else from `base`; block size and context length are `base`'s. Lookup drafts are
    made on `device` (the target's)."""

    def __init__(self, base: Proposer, previous: Sequence[int], device: torch.device | str,
                 min_match: int = 2) -> None:
        self.base = base
        self.device = torch.device(device)
        self.previous = [int(t) for t in previous]
        self.min_match = min_match
        self.block_size = base.block_size
        self.context_len = base.context_len
        self.feature_layers = getattr(base, "feature_layers", None)
        self.lookup_rounds = 0

    def propose(self, request: ProposalRequest) -> Proposal:
        drafts = lookup_drafts(request.generated, self.previous, self.block_size - 1,
                               self.min_match)
        if drafts is None:
            return self.base.propose(request)
        self.lookup_rounds += 1
        return Proposal(torch.tensor(drafts, dtype=torch.long, device=self.device), None)
