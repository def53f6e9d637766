import dataclasses

import pytest
import torch
from helpers.speculative import CFG, random_prompt, run_decode, stop_for

from flashdrive_ros.engine.decoding import Sampling, Target, prefill, start_state
from flashdrive_ros.engine.eagle_proposer import EagleProposer
from flashdrive_ros.engine.speculative import ProposalRequest, propose_block
from flashdrive_ros.model.eagle_drafter import EagleDrafter
from flashdrive_ros.model.kv_cache import KVCache

pytestmark = pytest.mark.usefixtures("one_thread")


def _eagle(target: Target, rotary: str = "flat", context_len: int = 8, block_size: int = 8,
           seed: int = 1) -> EagleProposer:
    torch.manual_seed(seed)
    cfg = dataclasses.replace(CFG.drafter, kind="eagle3", num_hidden_layers=1, rotary=rotary,
                              context_len=context_len, block_size=block_size)
    return EagleProposer(EagleDrafter(cfg, CFG.text).eval(), target.embed_tokens,
                         target.lm_head)


class OracleHead(torch.nn.Module):
    """An lm_head whose every call puts all mass on the next token of a known sequence."""

    def __init__(self, reference: list[int], vocab: int) -> None:
        super().__init__()
        self.reference = reference
        self.vocab = vocab
        self.index = 0

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        token = self.reference[self.index] if self.index < len(self.reference) else 0
        self.index += 1
        logits = torch.full((*hidden.shape[:-1], self.vocab), -1e4)
        logits[..., token] = 0.0
        return logits


class OracleEagleProposer(EagleProposer):
    """The eagle3 chain with an oracle head: drafts the reference continuation."""

    def __init__(self, proposer: EagleProposer, reference: list[int]) -> None:
        super().__init__(proposer.drafter, proposer.embed_tokens,
                         OracleHead(reference, CFG.text.vocab_size))

    def propose(self, request: ProposalRequest):
        self.lm_head.index = len(request.generated)
        return super().propose(request)


def _same_cache(a: KVCache, b: KVCache) -> None:
    assert a.length == b.length
    n = a.length
    torch.testing.assert_close(a.k[..., :n, :], b.k[..., :n, :], atol=1e-5, rtol=1e-5)
    assert torch.equal(a.positions[:, :, :n], b.positions[:, :, :n])


@pytest.mark.parametrize("rotary,context_len,block_size", [("flat", 8, 8), ("mrope", 64, 16)])
def test_eagle_speculative_greedy_matches_autoregressive(target, rotary, context_len,
                                                         block_size):
    proposer = _eagle(target, rotary, context_len, block_size)
    for seed in range(24):
        stop = stop_for(target, seed)
        ref, ref_cache, _ = run_decode(target, seed, stop)
        got, cache, _ = run_decode(target, seed, stop, proposer, context_len)
        assert got.tokens == ref.tokens, seed
        assert got.stopped_by == ref.stopped_by and got.next_position == ref.next_position
        _same_cache(cache, ref_cache)


@pytest.mark.parametrize("block_size", [8, 16])
def test_eagle_chain_with_an_oracle_head_accepts_full_blocks(target, block_size):
    for seed in range(12):
        stop = stop_for(target, seed)
        ref, ref_cache, _ = run_decode(target, seed, stop)
        oracle = OracleEagleProposer(_eagle(target, block_size=block_size), ref.tokens)
        got, cache, _ = run_decode(target, seed, stop, oracle)
        assert got.tokens == ref.tokens, seed
        _same_cache(cache, ref_cache)
        assert got.accepted_lengths[:-1] == [block_size] * (len(got.accepted_lengths) - 1)
        generated = len(ref.tokens) - (1 if ref.stopped_by == "cot_end" else 2)
        assert sum(got.accepted_lengths) == generated - 1


def test_eagle_needs_token_ids_and_samples_with_probs(target):
    proposer = _eagle(target)
    embeds, positions, ids = random_prompt(target, 3)
    cache = KVCache(CFG.text.num_hidden_layers, 1, CFG.text.num_key_value_heads, 80,
                    CFG.text.head_dim)
    with torch.no_grad():
        out = prefill(target, embeds, positions, cache, context_len=8)
        with pytest.raises(ValueError, match="token ids"):
            propose_block(proposer, start_state(out, cache, None, None, 8))
        out = prefill(target, embeds, positions, cache, context_len=8, token_ids=ids)
        state = start_state(out, cache, None, None, 8)
        assert torch.equal(state.feature_ids, ids[-8:])
        proposal = propose_block(proposer, state, Sampling(1.0),
                                 torch.Generator().manual_seed(0))
    assert proposal.probs.shape == (7, CFG.text.vocab_size)
    torch.testing.assert_close(proposal.probs.sum(-1), torch.ones(7, dtype=torch.float64))
    assert all(float(proposal.probs[i, t]) > 0 for i, t in enumerate(proposal.tokens.tolist()))
