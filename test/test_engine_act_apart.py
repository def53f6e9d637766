"""A window's action run apart from its reasoning, on copies of the cache, against the plain
step: the same plans, also when the next window was reasoned in between."""

import numpy as np
import pytest
import torch
from helpers.engines import MAX_COC
from helpers.windows import window

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine

pytestmark = pytest.mark.usefixtures("one_thread")


def _same(a, b) -> None:
    assert a.t0 == b.t0 and a.coc_token_ids == b.coc_token_ids
    assert a.accepted_lengths == b.accepted_lengths and a.full_prefill == b.full_prefill
    np.testing.assert_array_equal(a.trajectories, b.trajectories)


def test_detached_actions_equal_plain_steps_with_the_next_window_reasoned_first(parts):
    model, tok, drafter = parts
    cfg = EngineConfig(max_coc_tokens=MAX_COC, num_samples=2)
    plain = Engine(model, tok, drafter, cfg)
    want = [plain.step(window(s)) for s in range(4)]
    apart = Engine(model, tok, drafter, cfg)
    pending = apart.reason(window(0), detach=True)
    got = []
    for s in range(1, 4):
        following = apart.reason(window(s), detach=True)
        got.append(apart.act(pending))
        pending = following
    got.append(apart.act(pending))
    for a, b in zip(got, want):
        _same(a, b)
    assert [p.full_prefill for p in got] == [True, False, False, False]


def test_detached_velocity_is_the_velocity_of_the_cache_it_copied(parts):
    model, tok, drafter = parts
    eng = Engine(model, tok, drafter, EngineConfig(max_coc_tokens=MAX_COC))
    eng.reason(window(0))
    cache = eng.stream.cache
    live = model.velocity_fn(cache, cache.length)
    detached = model.detached_velocity_fn(cache, cache.length)
    x = torch.randn(3, model.cfg.action.num_waypoints, 2)
    t = torch.tensor([0.0, 0.4, 0.9])
    want = live(x, t)
    torch.testing.assert_close(detached(x, t), want, rtol=0, atol=0)
    cache.k.normal_()
    cache.v.normal_()
    if cache.k_rot is not None:
        cache.k_rot.normal_()
    torch.testing.assert_close(detached(x, t), want, rtol=0, atol=0)


def test_staged_velocities_equal_the_concatenating_ones(parts):
    model, tok, drafter = parts
    eng = Engine(model, tok, drafter, EngineConfig(max_coc_tokens=MAX_COC))
    eng.reason(window(0))
    cache = eng.stream.cache
    x = torch.randn(3, model.cfg.action.num_waypoints, 2)
    t = torch.tensor([0.0, 0.4, 0.9])
    want = model.velocity_fn(cache, cache.length)(x, t)
    live = model.velocity_fn(cache, cache.length, staged=True)
    detached = model.detached_velocity_fn(cache, cache.length, staged=True, num_samples=3)
    for fn in (live, detached):
        assert torch.equal(fn(x, t), want) and torch.equal(fn(x, t), want)
    fewer = model.velocity_fn(cache, cache.length)(x[:2], t[:2])
    assert torch.equal(live(x[:2], t[:2]), fewer)
    with pytest.raises(ValueError, match="staged for 3 samples"):
        detached(x[:2], t[:2])
    cache.k.normal_()
    cache.v.normal_()
    if cache.k_rot is not None:
        cache.k_rot.normal_()
    assert torch.equal(detached(x, t), want)


@pytest.mark.parametrize("act_apart", [False, True])
def test_engine_plans_are_the_same_with_and_without_the_staged_prefix(parts, act_apart):
    model, tok, drafter = parts
    plans = {}
    for staged in (True, False):
        eng = Engine(model, tok, drafter, EngineConfig(max_coc_tokens=MAX_COC, num_samples=2,
                                                       staged_prefix=staged))
        if act_apart:
            plans[staged] = [eng.act(eng.reason(window(s), detach=True)) for s in range(3)]
        else:
            plans[staged] = [eng.step(window(s)) for s in range(3)]
    for a, b in zip(plans[True], plans[False]):
        _same(a, b)


def test_staged_prefix_defaults_and_refusals():
    from flashdrive_ros.model.config import ConfigError

    assert EngineConfig().staged_prefix is True
    assert EngineConfig.baseline().staged_prefix is False
    assert EngineConfig.baseline(staged_prefix=True).staged_prefix is True
    with pytest.raises(ConfigError, match="staged_prefix"):
        EngineConfig(staged_prefix="yes")
