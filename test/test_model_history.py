import numpy as np
import pytest

from flashdrive_ros.model.config import ActionConfig
from flashdrive_ros.model.history import HistoryTokenizer


def _history(rng: np.random.Generator) -> np.ndarray:
    t = np.arange(-15, 1) * 0.1
    speed = rng.uniform(0.5, 2.5)
    xyz = np.stack([speed * t, 0.3 * np.sin(t), 0.05 * t], axis=1)
    return xyz - xyz[-1]


def test_round_trip_within_quantization():
    cfg = ActionConfig()
    tok = HistoryTokenizer(cfg, traj_token_start=151669)
    rng = np.random.default_rng(0)
    for _ in range(5):
        xyz = _history(rng)
        ids = tok.encode(xyz)
        assert ids.shape == (48,)
        assert ids.min() >= 151669 and ids.max() < 151669 + 1000
        back = tok.decode(ids)
        err = np.abs(back - xyz)
        bound = np.arange(1, 17)[:, None] * tok.bin_width / 2 + 1e-9
        assert (err <= bound).all()


def test_layout_is_pose_major_and_zero_delta_is_center():
    cfg = ActionConfig(history_token_offset=10)
    tok = HistoryTokenizer(cfg, traj_token_start=100)
    ids = tok.encode(np.zeros((16, 3)))
    center = int(np.rint(0.5 * 999))
    assert (ids == 100 + 10 + center).all()
    xyz = np.zeros((16, 3))
    xyz[0] = [4.0, -4.0, 10.0]
    ids = tok.encode(xyz)
    assert list(ids[:3]) == [110 + 999, 110, 110 + 999]


def test_out_of_range_delta_is_clamped():
    tok = HistoryTokenizer(ActionConfig(), traj_token_start=0)
    xyz = np.zeros((16, 3))
    xyz[0, 0] = -30.0
    ids = tok.encode(xyz)
    assert ids[0] == 0
    assert tok.decode(ids)[0, 0] == pytest.approx(-4.0)


def test_bad_input_raises():
    tok = HistoryTokenizer(ActionConfig(), traj_token_start=0)
    with pytest.raises(ValueError, match="16, 3"):
        tok.encode(np.zeros((15, 3)))
    bad = np.zeros((16, 3))
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        tok.encode(bad)
    with pytest.raises(ValueError, match="outside"):
        tok.decode(np.full(48, 5000))


def test_float_noise_around_zero_gives_the_exact_tokens():
    tok = HistoryTokenizer(ActionConfig(), traj_token_start=0)
    exact = tok.encode(np.zeros((16, 3)))
    for noise in (1e-9, -1e-9, 3e-7, -3e-7):
        assert np.array_equal(tok.encode(np.full((16, 3), noise)), exact)
    width = tok.bin_width[0]
    assert not np.array_equal(tok.encode(np.full((16, 3), -0.02 * width)), exact)


def test_history_in_a_far_frame_gives_the_tokens_of_the_t0_frame():
    tok = HistoryTokenizer(ActionConfig(), traj_token_start=0)
    local = np.zeros((16, 3))
    local[:6, 0] = np.linspace(-1.0, -0.2, 6)
    yaw = 0.7
    rot = np.array([[np.cos(yaw), -np.sin(yaw), 0.0], [np.sin(yaw), np.cos(yaw), 0.0],
                    [0.0, 0.0, 1.0]])
    world = local @ rot.T + np.array([512345.678, 4321987.654, 31.0])
    back = (world - world[-1]) @ rot
    assert 0.0 < np.abs(back - local).max() < 1e-8
    assert np.array_equal(tok.encode(back), tok.encode(local))
