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
