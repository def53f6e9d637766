import dataclasses

import pytest
import torch
from helpers.speculative import (
    CFG,
    MAX_NEW,
    SEEDS,
    UNREACHABLE,
    assert_same_cache,
    drafter_proposer,
    run_decode,
    stop_for,
)

from flashdrive_ros.engine.coc_reuse import CoCReuseProposer
from flashdrive_ros.engine.decoding import (
    Sampling,
    StopRule,
    Target,
    decode_one,
    prefill,
    sampling_probs,
    start_state,
)
from flashdrive_ros.engine.speculative import (
    DFlashProposer,
    Proposal,
    ProposalRequest,
    accept_sampled,
    propose_block,
    speculative_decode,
)
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import image_positions, text_positions
from flashdrive_ros.model.vlm import VLM

pytestmark = pytest.mark.usefixtures("one_thread")


class OracleProposer:
    """Proposes the target's own greedy continuation (known in advance)."""

    def __init__(self, reference: list[int], block_size: int = 8) -> None:
        self.reference = reference
        self.block_size = block_size
        self.context_len = 0

    def propose(self, request: ProposalRequest) -> Proposal:
        n = len(request.generated)
        drafts = self.reference[n:n + self.block_size - 1]
        drafts = drafts + [0] * (self.block_size - 1 - len(drafts))
        return Proposal(torch.tensor(drafts), None)


class UniformProposer:
    """Drafts drawn uniformly: overlaps the target's distribution without matching it."""

    def __init__(self, vocab_size: int, block_size: int) -> None:
        self.vocab_size = vocab_size
        self.block_size = block_size
        self.context_len = 0

    def propose(self, request: ProposalRequest) -> Proposal:
        probs = torch.full((self.block_size - 1, self.vocab_size), 1.0 / self.vocab_size,
                           dtype=torch.float64)
        return Proposal(torch.multinomial(probs, 1, generator=request.generator)[:, 0], probs)


def test_speculative_greedy_matches_autoregressive_with_random_drafter(target):
    proposer = drafter_proposer(target)
    stopped = 0
    accepted = []
    for seed in SEEDS:
        stop = stop_for(target, seed)
        ref, ref_cache, positions = run_decode(target, seed, stop)
        got, cache, _ = run_decode(target, seed, stop, proposer)
        assert got.tokens == ref.tokens, seed
        assert got.stopped_by == ref.stopped_by and got.next_position == ref.next_position
        assert_same_cache(cache, ref_cache)
        stopped += ref.stopped_by == "cot_end"
        accepted += got.accepted_lengths
    assert stopped >= 20
    assert sum(accepted) / len(accepted) < 1.5


def test_speculative_greedy_with_oracle_accepts_full_blocks(target):
    tail_verified = 0
    for seed in SEEDS:
        stop = stop_for(target, seed)
        ref, ref_cache, _ = run_decode(target, seed, stop)
        got, cache, _ = run_decode(target, seed, stop, OracleProposer(ref.tokens), context_len=0)
        assert got.tokens == ref.tokens, seed
        assert_same_cache(cache, ref_cache)
        assert got.accepted_lengths[:-1] == [8] * (len(got.accepted_lengths) - 1)
        generated = len(ref.tokens) - (1 if ref.stopped_by == "cot_end" else 2)
        assert sum(got.accepted_lengths) == generated - 1
        rounds = len(got.accepted_lengths)
        if ref.stopped_by == "max_tokens":
            assert got.target_forwards == rounds + 1
        else:
            assert got.target_forwards in (rounds, rounds + 1)
            tail_verified += got.target_forwards == rounds
    assert tail_verified >= 10


def test_mrope_drafter_path_is_lossless(target):
    proposer = drafter_proposer(target, rotary="mrope", seed=3)
    for seed in range(5):
        stop = stop_for(target, seed)
        ref, ref_cache, _ = run_decode(target, seed, stop)
        got, cache, _ = run_decode(target, seed, stop, proposer)
        assert got.tokens == ref.tokens
        assert_same_cache(cache, ref_cache)


def test_positions_continue_after_prompt_max_on_all_axes(target):
    ref, cache, positions = run_decode(target, 4, UNREACHABLE)
    n = positions.shape[2]
    start = int(positions.max()) + 1
    assert start < n
    expected = text_positions(start, len(ref.tokens))
    assert torch.equal(cache.positions[:, :, n:cache.length], expected)
    assert ref.next_position == start + len(ref.tokens)


def test_stop_rules(target):
    ref, cache, positions = run_decode(target, 0, UNREACHABLE)
    assert ref.stopped_by == "max_tokens" and len(ref.tokens) == MAX_NEW + 2
    assert ref.tokens[-2:] == [510, 511]
    assert cache.length == positions.shape[2] + len(ref.tokens)
    first = ref.tokens[0]
    immediate = StopRule(first, (first + 1) % 500, MAX_NEW)
    for proposer in (None, drafter_proposer(target)):
        got, cache, positions = run_decode(target, 0, immediate, proposer)
        assert got.tokens == [first, (first + 1) % 500] and got.stopped_by == "cot_end"
        assert cache.length == positions.shape[2] + 2
    one = StopRule(510, 511, 1)
    got, _, _ = run_decode(target, 0, one, OracleProposer(ref.tokens), context_len=0)
    assert got.tokens == [first, 510, 511] and got.stopped_by == "max_tokens"


def test_oracle_block_cut_at_cot_end(target):
    ref, _, _ = run_decode(target, 7, UNREACHABLE)
    stop = StopRule(ref.tokens[5], 511, MAX_NEW)
    cut, cut_cache, positions = run_decode(target, 7, stop)
    assert cut.tokens[-2:] == [ref.tokens[5], 511]
    got, cache, _ = run_decode(target, 7, stop, OracleProposer(ref.tokens), context_len=0)
    assert got.tokens == cut.tokens and got.accepted_lengths == [cut.tokens.index(ref.tokens[5])]
    assert_same_cache(cache, cut_cache)


def test_bad_usage_raises(target):
    with pytest.raises(ValueError):
        StopRule(3, 3, 5)
    with pytest.raises(ValueError):
        StopRule(3, 4, 0)
    with pytest.raises(ValueError):
        Sampling(temperature=0.0)
    with pytest.raises(ValueError, match="features"):
        run_decode(target, 0, UNREACHABLE, drafter_proposer(target), context_len=0)
    wrong = Target(target.backbone, target.lm_head, (0, 1, 2))
    with pytest.raises(ValueError, match="layers"):
        run_decode(wrong, 0, UNREACHABLE, drafter_proposer(target))


def test_top_p_keeps_smallest_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = sampling_probs(logits, Sampling(1.0, top_p=0.7))
    torch.testing.assert_close(probs, torch.tensor([0.625, 0.375, 0.0, 0.0], dtype=torch.float64))


def _chi2_pvalue(counts: torch.Tensor, expected_probs: torch.Tensor) -> float:
    n = counts.sum()
    expected = expected_probs * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = ((obs - exp) ** 2 / exp).sum()
    df = torch.tensor(float(len(obs) - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(df / 2, stat / 2))


def test_accept_sampled_preserves_target_marginal():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.6, 0.25, 0.1, 0.05], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    q = torch.tensor([[0.05, 0.1, 0.25, 0.6]], dtype=torch.float64)
    for fixed in (False, True):
        counts = torch.zeros(4, dtype=torch.float64)
        for _ in range(6000):
            draft = torch.tensor([2]) if fixed else torch.multinomial(q[0], 1, generator=g)
            accepted, nxt = accept_sampled(draft, None if fixed else q, p, g)
            counts[int(draft[0]) if accepted else nxt] += 1
        assert _chi2_pvalue(counts, p[0]) > 1e-3


def _copy_cache(src: KVCache) -> KVCache:
    dst = KVCache(src.num_layers, 1, src.k.shape[2], src.capacity, src.k.shape[4],
                  dtype=src.k.dtype)
    dst.k.copy_(src.k)
    dst.v.copy_(src.v)
    dst.positions.copy_(src.positions)
    dst.length = src.length
    return dst


def test_speculative_sampling_preserves_distribution():
    torch.manual_seed(0)
    cfg = tiny(vocab_size=12)
    vlm = VLM(cfg.vision, cfg.text).eval()
    with torch.no_grad():
        vlm.lm_head.weight.mul_(6.0)
    tgt = Target(vlm.language_model, vlm.lm_head, cfg.drafter.target_layer_ids)
    drafter = Drafter(dataclasses.replace(cfg.drafter, block_size=4), cfg.text).eval()
    proposer = DFlashProposer(drafter, tgt.embed_tokens, tgt.lm_head)
    stop = StopRule(cot_end_id=10, traj_future_start_id=11, max_new_tokens=2)
    sampling = Sampling(temperature=1.0)
    with torch.no_grad():
        embeds = tgt.embed_tokens(torch.tensor([[1, 5, 3, 7, 2]]))
        base = KVCache(cfg.text.num_hidden_layers, 1, cfg.text.num_key_value_heads, 16,
                       cfg.text.head_dim)
        out = prefill(tgt, embeds, text_positions(0, 5), base, context_len=8)
        p1 = sampling_probs(out.logits, sampling)
        given = torch.zeros(12, 12, dtype=torch.float64)  # given[t1] = p(t2 | t1)
        for t1 in range(12):
            if t1 == stop.cot_end_id:
                given[t1, stop.traj_future_start_id] = 1.0
                continue
            state = start_state(out, _copy_cache(base), None, None)
            state.generated = [t1]
            given[t1] = sampling_probs(decode_one(tgt, state).logits[-1], sampling)
        top = int(torch.argmax(p1))
        request = ProposalRequest(top, [top], out.features, out.feature_slots, None, 5, 5,
                                  sampling, torch.Generator().manual_seed(0))
        q_top = proposer.propose(request).probs[0]
    assert 0.5 * float((q_top - given[top]).abs().sum()) > 0.3
    assert float(given[top].min()) < 0.05

    unlikely = int(torch.argmin(given[top]))
    reuse = CoCReuseProposer(proposer, [top, unlikely, stop.cot_end_id], "cpu", min_match=1)
    g = torch.Generator().manual_seed(1)
    for candidate, runs in ((proposer, 600), (UniformProposer(12, 4), 1000), (reuse, 600)):
        joint = torch.zeros(12, 12, dtype=torch.float64)
        for _ in range(runs):
            result = speculative_decode(tgt, candidate, out, _copy_cache(base), stop, sampling,
                                        g)
            joint[result.tokens[0], result.tokens[1]] += 1
        assert _chi2_pvalue(joint.sum(1), p1) > 1e-3
        assert _chi2_pvalue(joint.sum(0), p1 @ given) > 1e-3
        assert joint[top].sum() > 300
        assert _chi2_pvalue(joint[top], given[top]) > 1e-3


@pytest.mark.parametrize("rotary", ["flat", "mrope"])
def test_dflash_proposer_feeds_context_and_positions(target, rotary):
    proposer = drafter_proposer(target, rotary=rotary, seed=4)
    img = image_positions(3, (1, 4, 6), 2)[:, None]
    positions = torch.cat([text_positions(0, 3), img, text_positions(6, 3)], dim=2)
    n = positions.shape[2]
    with torch.no_grad():
        embeds = target.embed_tokens(torch.arange(100, 100 + n)[None])
    cache = KVCache(CFG.text.num_hidden_layers, 1, CFG.text.num_key_value_heads, n + 40,
                    CFG.text.head_dim)
    with torch.no_grad():
        out = prefill(target, embeds, positions, cache, context_len=8)
        state = start_state(out, cache, None, None, context_len=8)
        sampling = Sampling(1.0)
        probs = propose_block(proposer, state, sampling, torch.Generator().manual_seed(0)).probs
        assert torch.equal(state.feature_slots, torch.arange(n - 8, n))
        ids = torch.tensor([[state.pending] + [proposer.drafter.mask_token_id] * 7])
        block_slots = torch.arange(n, n + 8)
        if rotary == "flat":
            pos = torch.cat([state.feature_slots, block_slots])[None]
        else:
            block = text_positions(int(positions.max()) + 1, 8)
            pos = torch.cat([positions[:, :, n - 8:], block], dim=2)
        logits = proposer.drafter.propose_logits(out.features[None], ids, pos,
                                                 target.embed_tokens, target.lm_head)
    torch.testing.assert_close(probs, sampling_probs(logits[0], sampling), atol=1e-9, rtol=0)
