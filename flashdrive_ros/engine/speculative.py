"""Speculative CoC decoding: a proposer drafts a block, the target verifies it in one forward.

A round: `propose_block` (proposer drafts K - 1 tokens after the pending token),
`verify_block` (one target forward over [pending, drafts] writing their keys and values),
`commit` (keep the longest accepted prefix plus one target token, roll the cache back to the
kept tokens). Greedy: a draft is accepted while it equals the target's argmax, so the output is
the greedy autoregressive output. Sampling: the speculative-sampling rule (accept draft d with
probability min(1, p(d) / q(d)), else draw from max(p - q, 0) renormalised) keeps the target's
sampling distribution. `accepted_lengths` records tokens committed per round (accepted + 1,
less where the stop rule cuts the round short). The stop rule is that of decoding.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from flashdrive_ros.engine.decoding import (
    DecodeResult,
    DecodeState,
    PrefillOutput,
    Sampling,
    StopRule,
    Target,
    TargetStep,
    commit_tokens,
    finish,
    sampling_probs,
    start_state,
)
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions


@dataclass
class ProposalRequest:
    """What a proposer may read: the pending token (block position 0), all committed tokens,
    the target features of the last cached tokens with their cache slots, 3D positions and
    (where known) token ids, and where the block starts (cache slot and text position of the
    pending token)."""

    pending_token: int
    generated: list[int]
    features: torch.Tensor | None  # [C, L * H]
    feature_slots: torch.Tensor | None  # [C]
    feature_positions: torch.Tensor | None  # [3, 1, C]
    block_start_slot: int
    block_start_position: int
    sampling: Sampling | None
    generator: torch.Generator | None
    feature_ids: torch.Tensor | None = None  # [C] long


@dataclass
class Proposal:
    tokens: torch.Tensor  # [K - 1] long, the drafts after the pending token
    probs: torch.Tensor | None  # [K - 1, V] distribution each draft was drawn from; None = fixed


class Proposer(Protocol):
    block_size: int
    context_len: int

    def propose(self, request: ProposalRequest) -> Proposal: ...


class TargetSharingProposer:
    """A proposer over a drafter that reuses the target's embedding and lm_head; block size,
    context length and the target layers it reads come from the drafter's config."""

    def __init__(self, drafter: nn.Module, embed_tokens: nn.Embedding,
                 lm_head: nn.Module) -> None:
        self.drafter = drafter
        self.embed_tokens = embed_tokens
        self.lm_head = lm_head
        self.block_size = drafter.cfg.block_size
        self.context_len = drafter.cfg.context_len
        self.feature_layers = drafter.cfg.target_layer_ids


class DFlashProposer(TargetSharingProposer):
    """Drafts with a `Drafter`, reusing the target's embedding and lm_head."""

    drafter: Drafter

    @torch.no_grad()
    def propose(self, request: ProposalRequest) -> Proposal:
        if request.features is None:
            raise ValueError("the DFlash drafter needs target features: build the Target with "
                             "feature_layers = drafter target_layer_ids and prefill with "
                             "context_len = drafter context_len")
        ids, positions = self.block_inputs(request)
        logits = self.drafter.propose_logits(request.features[None], ids, positions,
                                             self.embed_tokens, self.lm_head)[0]  # [K - 1, V]
        if request.sampling is None:
            return Proposal(torch.argmax(logits, dim=-1), None)
        probs = sampling_probs(logits, request.sampling)
        tokens = torch.multinomial(probs, 1, generator=request.generator)[:, 0]
        return Proposal(tokens, probs)

    def block_inputs(self, request: ProposalRequest) -> tuple[torch.Tensor, torch.Tensor]:
        """Block ids [1, K] (pending token, then masks) and rotary positions ([1, C + K] flat,
        [3, 1, C + K] mrope) on the features' device."""
        k = self.block_size
        device = request.features.device
        ids = torch.full((1, k), self.drafter.mask_token_id, dtype=torch.long, device=device)
        ids[0, 0] = request.pending_token
        return ids, proposal_positions(request, self.drafter.cfg.rotary, k)


def proposal_positions(request: ProposalRequest, rotary: str, block_size: int) -> torch.Tensor:
    """Rotary positions of [context ; block]: cache slots [1, C + K] for "flat", the target's
    3D positions [3, 1, C + K] for "mrope" (the block continues as text)."""
    device = request.features.device
    start = request.block_start_slot
    if rotary == "flat":
        block_slots = torch.arange(start, start + block_size, device=device)
        return torch.cat([request.feature_slots, block_slots])[None]
    block = text_positions(request.block_start_position, block_size, device=device)
    return torch.cat([request.feature_positions, block], dim=2)


@dataclass
class Verification:
    step: TargetStep  # logits [K, V], features [K, L * H]
    block_start_slot: int
    block: torch.Tensor  # [K] long: pending token and drafts, written from block_start_slot


def propose_block(proposer: Proposer, state: DecodeState, sampling: Sampling | None = None,
                  generator: torch.Generator | None = None) -> Proposal:
    positions = None
    if state.feature_slots is not None:
        positions = state.cache.positions[:, :, state.feature_slots]
    request = ProposalRequest(state.pending, list(state.generated), state.features,
                              state.feature_slots, positions, state.cache.length,
                              state.pending_position, sampling, generator, state.feature_ids)
    proposal = proposer.propose(request)
    if proposal.tokens.ndim != 1 or proposal.tokens.shape[0] != proposer.block_size - 1:
        raise ValueError(f"proposer returned {tuple(proposal.tokens.shape)} drafts, block size "
                         f"{proposer.block_size} needs {proposer.block_size - 1}")
    return proposal


def verify_block(target: Target, state: DecodeState, proposal: Proposal) -> Verification:
    """One target forward over [pending, drafts]; the drafts stay on the device."""
    start = state.cache.length
    drafts = proposal.tokens
    pending = torch.full((1,), state.pending, dtype=torch.long, device=drafts.device)
    block = torch.cat([pending, drafts.to(torch.long)])  # block: [K]
    state.target_forwards += 1
    return Verification(target.run_token_tensor(block, state.cache, state.pending_position),
                        start, block)


def accept_greedy(drafts: torch.Tensor, target_logits: torch.Tensor
                  ) -> tuple[int, int, list[int]]:
    """drafts: [K - 1]; target_logits: [K, V] -> (accepted drafts, the target's next token,
    the drafts as ints), with one read from the device."""
    choice = torch.argmax(target_logits, dim=-1)  # choice: [K]
    values = torch.cat([drafts.to(choice.dtype), choice]).tolist()
    drafted, chosen = values[:drafts.shape[0]], values[drafts.shape[0]:]
    accepted = 0
    while accepted < len(drafted) and drafted[accepted] == chosen[accepted]:
        accepted += 1
    return accepted, chosen[accepted], drafted


def accept_sampled(drafts: torch.Tensor, draft_probs: torch.Tensor | None,
                   target_probs: torch.Tensor, generator: torch.Generator | None
                   ) -> tuple[int, int]:
    """drafts: [K - 1]; draft_probs: [K - 1, V] or None (drafts fixed, q one-hot);
    target_probs: [K, V] -> (accepted drafts, next token)."""
    if draft_probs is None:
        draft_probs = torch.zeros_like(target_probs[:-1]).scatter(1, drafts[:, None], 1.0)
    for i, token in enumerate(drafts.tolist()):
        p, q = float(target_probs[i, token]), float(draft_probs[i, token])
        u = float(torch.rand((), generator=generator, dtype=torch.float64,
                             device=target_probs.device))
        if u * q < p:
            continue
        residual = (target_probs[i] - draft_probs[i]).clamp_min(0.0)
        total = float(residual.sum())
        residual = residual / total if total > 0 else target_probs[i]
        return i, int(torch.multinomial(residual, 1, generator=generator))
    last = target_probs[-1]
    return drafts.shape[0], int(torch.multinomial(last, 1, generator=generator))


def commit(state: DecodeState, proposal: Proposal, verification: Verification,
           stop: StopRule, sampling: Sampling | None = None,
           generator: torch.Generator | None = None) -> int:
    """Commit accepted drafts plus one target token; roll the cache back to the kept tokens.

    Returns the number of tokens committed this round (also appended to accepted_lengths).
    """
    if state.done(stop):
        raise ValueError("commit called after the stop rule already holds")
    logits = verification.step.logits
    drafts = proposal.tokens.to(logits.device)
    if sampling is None:
        accepted, nxt, drafted = accept_greedy(drafts, logits)
    else:
        probs = None if proposal.probs is None else proposal.probs.to(logits.device)
        accepted, nxt = accept_sampled(drafts, probs, sampling_probs(logits, sampling),
                                       generator)
        drafted = drafts.tolist()
    kept = commit_tokens(state, drafted[:accepted] + [nxt], stop)
    start = verification.block_start_slot
    state.tail_in_cache = tail_verified(drafted, accepted, kept, state.pending, stop)
    state.cache.rollback(start + kept + (2 if state.tail_in_cache else 0))
    if verification.step.features is not None:
        slots = torch.arange(start, start + kept, device=state.cache.k.device)
        ids = verification.block[:kept].to(slots.device)
        state.append_features(verification.step.features[:kept], slots, ids)
    state.accepted_lengths.append(kept)
    return kept


def tail_verified(drafted: list[int], accepted: int, kept: int, pending: int,
                  stop: StopRule) -> bool:
    """Whether the round's block already holds the tail `finish` writes: the committed
    <|cot_end|> is the accepted draft at block slot `kept` and the draft after it is
    <|traj_future_start|>, so their keys and values in the cache are the ones `finish` would
    write (same tokens, same positions, same prefix)."""
    return (pending == stop.cot_end_id and 1 <= kept <= accepted and kept < len(drafted)
            and drafted[kept] == stop.traj_future_start_id)


@torch.no_grad()
def speculative_decode(target: Target, proposer: Proposer, prefill_out: PrefillOutput,
                       cache: KVCache, stop: StopRule, sampling: Sampling | None = None,
                       generator: torch.Generator | None = None) -> DecodeResult:
    layers = getattr(proposer, "feature_layers", None)
    if layers is not None and tuple(layers) != target.feature_layers:
        raise ValueError(f"proposer reads target layers {tuple(layers)}, target exports "
                         f"{target.feature_layers}")
    state = start_state(prefill_out, cache, sampling, generator, proposer.context_len)
    while not state.done(stop):
        proposal = propose_block(proposer, state, sampling, generator)
        verification = verify_block(target, state, proposal)
        commit(state, proposal, verification, stop, sampling, generator)
    return finish(target, state, stop)
