"""Forward-only plans against the plain integration of the same actions: the same CoC, the
same poses until the plain plan slows to a stop, and no step back after it."""

import dataclasses

import numpy as np
from helpers.engines import engine
from helpers.windows import window

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.model.config import ConfigError


def _forward_steps(trajectory: np.ndarray) -> np.ndarray:
    """[N - 1] metres each waypoint moves along the heading of the one before it."""
    step = np.diff(trajectory[:, :2], axis=0)
    heading = np.stack([np.cos(trajectory[:-1, 2]), np.sin(trajectory[:-1, 2])], axis=1)
    return np.einsum("ij,ij->i", step, heading)


def _creeping(step: int):
    """Window `step` with a history creeping at about 0.1 m/s."""
    slow = window(step)
    history = slow.ego_history.copy()
    history[:, 0] = np.linspace(-0.15, 0.0, len(history))
    return dataclasses.replace(slow, ego_history=history, speed=0.1)


def test_forward_only_plans_stand_where_the_plain_plans_reverse(parts):
    plans = {on: [engine(parts, num_samples=4, forward_only=on).step(_creeping(s))
                  for s in (0, 1, 2)] for on in (True, False)}
    reversing = 0
    for held, plain in zip(plans[True], plans[False]):
        assert held.coc_token_ids == plain.coc_token_ids
        for a, b in zip(held.trajectories, plain.trajectories):  # a, b: [N, 3]
            assert (_forward_steps(a) >= -1e-9).all()
            slow = np.flatnonzero(_forward_steps(b) < 0.05)
            same = slow[0] if slow.size else len(b)
            np.testing.assert_allclose(a[:same], b[:same], rtol=0, atol=1e-9)
            reversing += bool((_forward_steps(b) < -1e-3).any())
    assert reversing > 0


def test_forward_only_is_a_validated_setting_on_by_default():
    assert EngineConfig().forward_only is True
    assert EngineConfig(mode="baseline").forward_only is True
    try:
        EngineConfig(forward_only="yes")
    except ConfigError as exc:
        assert "forward_only must be true or false" in str(exc)
    else:
        raise AssertionError("a non-bool forward_only was accepted")
