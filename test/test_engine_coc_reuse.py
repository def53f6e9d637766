"""Drafts from the previous window's CoC: the lookup, losslessness against greedy decoding,
and the engine switch."""

import numpy as np
import pytest
from helpers.engines import FLOAT32_REORDER_ATOL_M, engine
from helpers.speculative import SEEDS, assert_same_cache, drafter_proposer, run_decode, stop_for
from helpers.windows import window

from flashdrive_ros.engine.coc_reuse import CoCReuseProposer, lookup_drafts
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.model.config import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")


def test_lookup_continues_a_prefix_of_the_previous_coc():
    previous = [5, 6, 7, 8, 9]
    assert lookup_drafts([5], previous, 3) == [6, 7, 8]
    assert lookup_drafts([5, 6, 7], previous, 3) == [8, 9, 9]
    assert lookup_drafts([5, 6, 7, 8], previous, 1) == [9]


def test_lookup_finds_the_longest_suffix_of_at_least_min_match_tokens():
    previous = [1, 2, 3, 4, 2, 3, 5, 6]
    assert lookup_drafts([9, 2, 3], previous, 2) == [4, 2]
    assert lookup_drafts([9, 4, 2, 3], previous, 2) == [5, 6]
    assert lookup_drafts([9, 5], previous, 2) is None
    assert lookup_drafts([9, 5], previous, 2, min_match=1) == [6, 6]
    assert lookup_drafts([9, 5, 6], previous, 2) is None


def test_lookup_without_a_match_or_room_gives_none():
    assert lookup_drafts([1, 2], [], 3) is None
    assert lookup_drafts([], [1, 2], 3) is None
    assert lookup_drafts([1, 2], [1, 2], 3) is None
    assert lookup_drafts([1], [1, 2], 0) is None


def _variants(reference: list[int], other: list[int]) -> dict[str, list[int]]:
    changed = list(reference)
    changed[len(changed) // 2] = (changed[len(changed) // 2] + 1) % 500
    return {"same": reference, "one token changed": changed, "another prompt's": other,
            "unrelated": [499, 498, 497, 496]}


def test_coc_reuse_greedy_matches_autoregressive_whatever_the_previous_coc(target):
    drafter = drafter_proposer(target)
    drafted_rounds = {}
    full_blocks = 0
    for seed in SEEDS:
        stop = stop_for(target, seed)
        ref, ref_cache, _ = run_decode(target, seed, stop)
        other, _, _ = run_decode(target, seed + 1000, stop)
        for name, previous in _variants(ref.tokens, other.tokens).items():
            proposer = CoCReuseProposer(drafter, previous, "cpu")
            got, cache, _ = run_decode(target, seed, stop, proposer)
            assert got.tokens == ref.tokens, (seed, name)
            assert got.stopped_by == ref.stopped_by and got.next_position == ref.next_position
            assert_same_cache(cache, ref_cache)
            drafted_rounds[name] = drafted_rounds.get(name, 0) + proposer.lookup_rounds
            if name == "same":
                assert proposer.lookup_rounds == len(got.accepted_lengths)
                full_blocks += all(n == drafter.block_size for n in got.accepted_lengths[:-1])
    assert full_blocks == len(SEEDS)
    assert drafted_rounds["unrelated"] == 0
    assert drafted_rounds["one token changed"] > len(SEEDS)


def test_engine_drafts_a_repeated_coc_from_the_previous_window(parts):
    reuse, plain = engine(parts), engine(parts, coc_reuse=False)
    assert reuse.cfg.coc_reuse and not plain.cfg.coc_reuse
    for step in (0, 0, 1, 1):
        a, b = reuse.step(window(step)), plain.step(window(step))
        assert a.coc_token_ids == b.coc_token_ids and a.full_prefill == b.full_prefill
        # the same tokens in other verify-round splits: equal up to float32 reordering
        np.testing.assert_allclose(a.trajectories, b.trajectories, rtol=0,
                                   atol=FLOAT32_REORDER_ATOL_M)
    assert reuse.previous_coc[:len(a.coc_token_ids)] == a.coc_token_ids
    block = reuse.proposer.block_size
    assert all(n == block for n in a.accepted_lengths[:-1])
    assert len(a.accepted_lengths) <= len(b.accepted_lengths)
    reuse.reset()
    assert reuse.previous_coc == []


def test_coc_reuse_defaults_adjustment_and_refusals():
    assert EngineConfig().coc_reuse is True
    assert EngineConfig(speculative=False).coc_reuse is False
    assert EngineConfig.baseline().coc_reuse is False
    adjusted = EngineConfig(speculative=False, coc_reuse=True)
    assert adjusted.coc_reuse is False
    assert adjusted.adjustments == ["coc_reuse off: it drafts inside speculative decoding, "
                                    "which is off"]
    assert EngineConfig().adjustments == []
    with pytest.raises(ConfigError, match="coc_reuse must be"):
        EngineConfig(coc_reuse="yes")
