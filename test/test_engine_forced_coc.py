import numpy as np
import pytest
import torch
from helpers.engines import MAX_COC, engine
from helpers.windows import window

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine

# Keys and values of one token written alone or in a block of tokens differ by float32
# reordering only (about 1e-6 here); a wrong token, slot or position moves them by O(1).
CACHE_ATOL = 1e-5


def baseline(parts) -> Engine:
    model, tok, _ = parts
    return Engine(model, tok, None, EngineConfig.baseline(max_coc_tokens=MAX_COC))


def coc_body(eng: Engine, tokens: list[int]) -> list[int]:
    return tokens[:tokens.index(eng.stop.cot_end_id)]


def cache_of(eng: Engine) -> tuple[torch.Tensor, torch.Tensor]:
    cache = eng.stream.cache
    return cache.k[..., :cache.length, :].clone(), cache.v[..., :cache.length, :].clone()


@torch.no_grad()
def token_by_token(eng: Engine, prompt_length: int, next_position: int, tokens: list[int]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The cache with `tokens` written one at a time after the first `prompt_length` slots,
    as autoregressive decoding writes them."""
    cache = eng.stream.cache
    cache.rollback(prompt_length)
    for i, token in enumerate(tokens):
        eng.target.run_tokens([token], cache, next_position + i)
    return cache_of(eng)


@pytest.mark.parametrize("step", [0, 1, 2])
def test_the_models_own_coc_forced_writes_the_decoded_cache(parts, step):
    decoding = baseline(parts)
    decoded = decoding.reason(window(step)).decoded
    decoded_cache = cache_of(decoding)
    forcing = baseline(parts)
    forced = forcing.reason(window(step), coc_ids=coc_body(decoding, decoded.tokens)).decoded
    assert forced.tokens == decoded.tokens and forced.stopped_by == "cot_end"
    assert forced.next_position == decoded.next_position
    for ours, theirs in zip(cache_of(forcing), decoded_cache):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=0, atol=CACHE_ATOL)


def test_another_coc_is_written_in_its_place(parts):
    eng = baseline(parts)
    own = eng.step(window(0))
    other = [t for t in range(3, 3 + MAX_COC) if t not in own.coc_token_ids][:3]
    reasoning = eng.reason(window(0), coc_ids=other)
    assert reasoning.decoded.tokens == other + [eng.stop.cot_end_id,
                                                eng.stop.traj_future_start_id]
    forced_cache = cache_of(eng)
    prompt_length = eng.stream.cache.length - len(reasoning.decoded.tokens)
    start = reasoning.decoded.next_position - len(reasoning.decoded.tokens)
    plan = eng.act(reasoning)
    assert plan.coc_token_ids == other and np.isfinite(plan.trajectories).all()
    reference = token_by_token(eng, prompt_length, start, reasoning.decoded.tokens)
    for ours, theirs in zip(forced_cache, reference):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=CACHE_ATOL)


def test_a_forced_coc_at_the_token_limit_and_streaming_goes_on(parts):
    eng = engine(parts)
    with pytest.raises(ValueError, match="more than the"):
        eng.step(window(0), coc_ids=[5] * (MAX_COC + 1))
    first = eng.step(window(0), coc_ids=[5] * MAX_COC)
    assert first.coc_token_ids == [5] * MAX_COC
    after = eng.step(window(1))
    assert not after.full_prefill and after.coc_token_ids
    assert np.isfinite(after.trajectories).all()


@pytest.mark.parametrize("bad", ["empty", "end", "start"])
def test_a_coc_without_tokens_or_with_the_stop_tokens_is_refused(parts, bad):
    eng = baseline(parts)
    ids = {"empty": [], "end": [5, eng.stop.cot_end_id],
           "start": [eng.stop.traj_future_start_id]}[bad]
    with pytest.raises(ValueError, match="non-empty CoC"):
        eng.step(window(0), coc_ids=ids)
