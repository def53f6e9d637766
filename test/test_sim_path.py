import math

import numpy as np
import pytest

from flashdrive_ros.sim.path import Path, integrate_segments, interp_scalar


@pytest.fixture(scope="module")
def bend() -> Path:
    return integrate_segments(3.0, -2.0, 0.4, [(30.0, 0.0), (25.0, 1.0 / 20.0),
                                                (40.0, -1.0 / 35.0)], ds=0.5)


def test_pose_at_one_arc_length_matches_the_array_form(bend):
    rng = np.random.default_rng(5)
    samples = np.concatenate([rng.uniform(-5.0, bend.length + 5.0, 400), bend.s[::7],
                              [0.0, bend.length, -1e9, 1e9]])
    table = np.stack(bend.pose_at(samples), axis=1)  # table: [N, 3] x, y, yaw
    for s, row in zip(samples.tolist(), table):
        one = bend.pose_at(s)
        assert all(isinstance(v, float) for v in one)
        np.testing.assert_allclose(one, row, rtol=1e-12, atol=1e-12)
    assert bend.pose_at(0) == bend.pose_at(0.0)
    assert all(math.isnan(v) for v in bend.pose_at(math.nan))


def test_interp_scalar_gives_the_bits_of_np_interp(bend):
    rng = np.random.default_rng(11)
    xs, fs = bend.s, bend.kappa * 7.0 + rng.normal(0.0, 1e-3, len(bend.s))
    samples = np.concatenate([rng.uniform(-5.0, bend.length + 5.0, 2000), xs[::3],
                              [0.0, bend.length, -1e9, 1e9]])
    expected = np.interp(samples, xs, fs)  # expected: [N]
    got = [interp_scalar(x, xs.tolist(), fs.tolist()) for x in samples.tolist()]
    assert np.array_equal(np.asarray(got), expected)
    assert math.isnan(interp_scalar(math.nan, xs.tolist(), fs.tolist()))


def test_pose_at_clamps_to_the_ends(bend):
    first = (bend.points[0, 0], bend.points[0, 1], bend.yaw[0])
    last = (bend.points[-1, 0], bend.points[-1, 1], bend.yaw[-1])
    assert bend.pose_at(-3.0) == pytest.approx(first, abs=0)
    assert bend.pose_at(bend.length + 3.0) == pytest.approx(last, abs=0)


def test_project_finds_the_nearest_point_with_and_without_a_hint(bend):
    rng = np.random.default_rng(8)
    offsets = rng.uniform(0.5, 4.0, 200) * rng.choice([-1.0, 1.0], 200)
    for s, d in zip(rng.uniform(1.0, bend.length - 1.0, 200), offsets):
        x, y = bend.offset_point(s, d)
        dense = np.linspace(max(s - 6.0, 0.0), min(s + 6.0, bend.length), 6001)
        px, py, _ = bend.pose_at(dense)
        nearest = dense[np.argmin(np.hypot(px - x, py - y))]
        for hint in (None, s + 5.0):
            s_p, d_p = bend.project((x, y), hint=hint, window=20.0)
            assert s_p == pytest.approx(nearest, abs=0.01)
            assert abs(d_p) == pytest.approx(np.hypot(*(np.array(bend.pose_at(s_p)[:2])
                                                        - (x, y))), abs=1e-9)
            assert math.copysign(1.0, d_p) == math.copysign(1.0, d)
