import dataclasses

import pytest
import torch

from flashdrive_ros.engine.accept_pattern import (
    AcceptPatternProposer,
    expected_rounds,
    pattern_drafts,
    round_commits,
)
from flashdrive_ros.engine.decoding import (
    StopRule,
    Target,
    greedy_decode,
    prefill,
    required_capacity,
)
from flashdrive_ros.engine.speculative import DFlashProposer, speculative_decode
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions
from flashdrive_ros.model.vlm import VLM

CFG = tiny(vocab_size=512)
MAX_NEW = 20
UNREACHABLE = StopRule(cot_end_id=510, traj_future_start_id=511, max_new_tokens=MAX_NEW)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def target() -> Target:
    torch.manual_seed(0)
    vlm = VLM(CFG.vision, CFG.text).eval()
    return Target(vlm.language_model, vlm.lm_head, CFG.drafter.target_layer_ids)


def drafter_proposer(target: Target, block_size: int) -> DFlashProposer:
    torch.manual_seed(1)
    drafter = Drafter(dataclasses.replace(CFG.drafter, block_size=block_size), CFG.text).eval()
    return DFlashProposer(drafter, target.embed_tokens, target.lm_head)


def decode(target: Target, seed: int, stop: StopRule, proposer=None):
    g = torch.Generator().manual_seed(seed)
    length = int(torch.randint(6, 14, (), generator=g))
    ids = torch.randint(0, 500, (1, length), generator=g)
    cap = required_capacity(length, stop, 16)
    cache = KVCache(CFG.text.num_hidden_layers, 1, CFG.text.num_key_value_heads, cap,
                    CFG.text.head_dim, dtype=torch.float32)
    with torch.no_grad():
        out = prefill(target, target.embed_tokens(ids), text_positions(0, length), cache,
                      context_len=CFG.drafter.context_len)
    if proposer is None:
        return greedy_decode(target, out, cache, stop)
    return speculative_decode(target, proposer, out, cache, stop)


def test_round_commits_spread_the_mean_evenly():
    commits = round_commits(5.6, 8, 50)
    assert set(commits) == {5, 6} and sum(commits) == 280
    assert round_commits(11.5, 16, 4) == [11, 12, 11, 12]
    assert round_commits(8, 8, 3) == [8, 8, 8] and round_commits(1, 8, 2) == [1, 1]
    for bad in (0.5, 8.5):
        with pytest.raises(ValueError, match="accepted length"):
            round_commits(bad, 8, 1)
    assert expected_rounds(5.6, 8, 19) == 4 and expected_rounds(11.5, 16, 19) == 2
    assert expected_rounds(5.6, 8, 0) == 0


def test_pattern_drafts_are_right_until_the_cut():
    recorded = list(range(100, 130))
    drafts = pattern_drafts(recorded, [3, 8, 1], 8, 512)
    assert drafts[0] == [101, 102, 104, 104, 104, 104, 104]
    assert drafts[1] == recorded[4:11]
    assert drafts[2] == [113] * 7


@pytest.mark.parametrize(("accepted_length", "block_size"),
                         [(5.6, 8), (11.5, 16), (1.0, 8), (8.0, 8), (3.3, 8)])
def test_pattern_decode_is_greedy_and_takes_the_pattern_rounds(target, accepted_length,
                                                               block_size):
    base = drafter_proposer(target, block_size)
    for seed in range(6):
        stop = UNREACHABLE
        if seed % 2:
            free = decode(target, seed, UNREACHABLE)
            stop = StopRule(free.tokens[min(3 + seed, len(free.tokens) - 3)], 511, MAX_NEW)
        reference = decode(target, seed, stop)
        proposer = AcceptPatternProposer(base, reference.tokens, accepted_length,
                                         CFG.text.vocab_size, "cpu")
        got = decode(target, seed, stop, proposer)
        assert got.tokens == reference.tokens, seed
        assert got.stopped_by == reference.stopped_by
        generated = len(reference.tokens) - (1 if reference.stopped_by == "cot_end" else 2)
        rounds = expected_rounds(accepted_length, block_size, generated - 1)
        assert len(got.accepted_lengths) == rounds == proposer.round, seed
        assert got.accepted_lengths[:-1] == proposer.commits[:rounds - 1]
        assert sum(got.accepted_lengths) == generated - 1


def test_pattern_beyond_the_recorded_rounds_is_an_error(target):
    base = drafter_proposer(target, 8)
    reference = decode(target, 0, UNREACHABLE)
    proposer = AcceptPatternProposer(base, reference.tokens[:2], 1.0, CFG.text.vocab_size,
                                     "cpu")
    with pytest.raises(ValueError, match="beyond the 2 rounds"):
        decode(target, 0, UNREACHABLE, proposer)
