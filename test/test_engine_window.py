import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashdrive_ros.engine.types import Window
from flashdrive_ros.engine.window import (
    MAX_ODOMETRY_MAGNITUDE,
    MAX_PENDING_RESETS,
    WindowBuilder,
    WindowLimits,
    WindowRejection,
)

CAMS = 3


def _quat_from_matrix(m: np.ndarray) -> np.ndarray:
    d = np.diag(m)
    w = math.sqrt(max(0.0, 1.0 + d.sum())) / 2
    x = math.copysign(math.sqrt(max(0.0, 1.0 + d[0] - d[1] - d[2])) / 2, m[2, 1] - m[1, 2])
    y = math.copysign(math.sqrt(max(0.0, 1.0 - d[0] + d[1] - d[2])) / 2, m[0, 2] - m[2, 0])
    z = math.copysign(math.sqrt(max(0.0, 1.0 - d[0] - d[1] + d[2])) / 2, m[1, 0] - m[0, 1])
    return np.array([x, y, z, w])


def _rot_z(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


def _arc_pose(s: float, v: float, w: float):
    """Pose at time s (relative to t0) of a vehicle at the t0-frame origin turning at w."""
    if abs(w) < 1e-12:
        return np.array([v * s, 0.0, 0.0]), _rot_z(0.0)
    return np.array([v / w * math.sin(w * s), v / w * (1 - math.cos(w * s)), 0.0]), _rot_z(w * s)


def _feed(builder: WindowBuilder, t0: float, v: float = 10.0, w: float = 0.0,
          world_rot: np.ndarray | None = None, world_shift: np.ndarray | None = None,
          odom_hz: float = 50.0, span: float = 2.0, frame_jitter: float = 0.0,
          image_shape=(8, 12, 3), rng: np.random.Generator | None = None,
          odom_end: float | None = None, frames_end: float | None = None) -> None:
    world_rot = np.eye(3) if world_rot is None else world_rot
    world_shift = np.zeros(3) if world_shift is None else world_shift
    rng = rng or np.random.default_rng(0)
    odom_end = t0 if odom_end is None else odom_end
    frames_end = t0 if frames_end is None else frames_end
    for k in range(int(round(span * odom_hz)), -1, -1):
        t = odom_end - k / odom_hz
        p, r = _arc_pose(t - t0, v, w)
        builder.add_odometry(t, world_rot @ p + world_shift, _quat_from_matrix(world_rot @ r),
                             [v, 0.0, 0.0])
    n = int(round(span * 10))
    for k in range(n, -1, -1):
        for cam in range(CAMS):
            stamp = frames_end - k * 0.1 + (rng.uniform(-frame_jitter, frame_jitter) if k else 0)
            image = np.full(image_shape, (n - k) % 256, dtype=np.uint8)
            image[0, 0, 0] = cam
            builder.add_image(cam, stamp, image)


def _expected_history(v: float, w: float) -> np.ndarray:
    rows = []
    for n in range(16):
        s = -(15 - n) * 0.1
        p, _ = _arc_pose(s, v, w)
        rows.append([p[0], p[1], 0.0, w * s])
    return np.array(rows)


def test_straight_line_history_speed_and_frames():
    b = WindowBuilder(CAMS)
    _feed(b, 100.0, v=12.0)
    assert b.latest_t0() == pytest.approx(100.0)
    win = b.build(100.0)
    assert isinstance(win, Window)
    assert win.images.shape == (CAMS, 4, 8, 12, 3)
    np.testing.assert_allclose(win.image_stamps, np.tile([99.7, 99.8, 99.9, 100.0], (CAMS, 1)))
    assert [int(win.images[0, i, 1, 1, 0]) for i in range(4)] == [17, 18, 19, 20]
    assert [int(win.images[c, 0, 0, 0, 0]) for c in range(CAMS)] == list(range(CAMS))
    np.testing.assert_allclose(win.ego_history, _expected_history(12.0, 0.0), atol=1e-9)
    assert win.speed == pytest.approx(12.0)
    assert win.sequence == 1 and not win.time_base_reset


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_turning_history_invariant_to_world_frame(seed):
    rng = np.random.default_rng(seed)
    b = WindowBuilder(CAMS)
    _feed(b, 50.0, v=8.0, w=0.4, world_rot=_random_rotation(rng),
          world_shift=rng.normal(size=3) * 100)
    win = b.build(50.0)
    assert isinstance(win, Window)
    np.testing.assert_allclose(win.ego_history, _expected_history(8.0, 0.4), atol=2e-3)
    assert win.ego_history[0, 1] > 0.5


def test_map_and_epoch_scale_positions_give_the_same_history():
    b = WindowBuilder(CAMS)
    _feed(b, 30.0, v=8.0, w=0.4, world_shift=np.array([9e9, -4e9, 10.0]))
    win = b.build(30.0)
    assert isinstance(win, Window)
    np.testing.assert_allclose(win.ego_history, _expected_history(8.0, 0.4), atol=2e-3)


@pytest.mark.parametrize("offset", [[5e5, 0.0, 0.0], [6.9e5, 5.3e6, 250.0], [-3e5, 1e5, 0.0]])
def test_utm_scale_positions_give_the_history_and_tokens_of_the_origin(offset):
    from flashdrive_ros.model.config import ActionConfig
    from flashdrive_ros.model.history import HistoryTokenizer

    near, far = WindowBuilder(CAMS), WindowBuilder(CAMS)
    _feed(near, 30.0, v=13.0, w=0.2, world_rot=_rot_z(0.7))
    _feed(far, 30.0, v=13.0, w=0.2, world_rot=_rot_z(0.7), world_shift=np.array(offset))
    a, b = near.build(30.0), far.build(30.0)
    assert isinstance(a, Window) and isinstance(b, Window)
    np.testing.assert_allclose(b.ego_history, a.ego_history, rtol=0, atol=1e-6)
    assert b.speed == pytest.approx(a.speed, abs=1e-9)
    tokens = HistoryTokenizer(ActionConfig(), 0)
    np.testing.assert_array_equal(tokens.encode(b.ego_history[:, :3]),
                                  tokens.encode(a.ego_history[:, :3]))


def test_positions_beyond_the_magnitude_limit_are_nonfinite():
    b = WindowBuilder(CAMS)
    _feed(b, 30.0, world_shift=np.array([2 * MAX_ODOMETRY_MAGNITUDE, 0.0, 0.0]))
    assert _code(b, 30.0) == "nonfinite"


def test_yaw_unwraps_through_pi():
    b = WindowBuilder(CAMS)
    _feed(b, 20.0, v=3.0, w=3.0, world_rot=_rot_z(2.5))
    win = b.build(20.0)
    assert isinstance(win, Window)
    np.testing.assert_allclose(win.ego_history[:, 3], 3.0 * (np.arange(16) - 15) * 0.1,
                               atol=1e-6)
    assert win.ego_history[0, 3] < -math.pi


def test_frames_nearest_with_jitter():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0, frame_jitter=0.02, rng=np.random.default_rng(3))
    win = b.build(10.0)
    assert isinstance(win, Window)
    assert np.all(np.abs(win.image_stamps - [9.7, 9.8, 9.9, 10.0]) <= 0.02 + 1e-12)


def test_odometry_extrapolation_within_limit():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0, v=10.0, odom_end=9.97)
    win = b.build(10.0)
    assert isinstance(win, Window)
    np.testing.assert_allclose(win.ego_history, _expected_history(10.0, 0.0), atol=1e-9)
    b2 = WindowBuilder(CAMS)
    _feed(b2, 10.0, odom_end=9.9)
    rej = b2.build(10.0)
    assert isinstance(rej, WindowRejection) and rej.code == "stale_odometry"


def test_latest_t0_is_the_newest_frame_time_the_odometry_reaches():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0, odom_end=9.97)
    assert b.latest_t0() == pytest.approx(10.0)
    b2 = WindowBuilder(CAMS)
    _feed(b2, 10.0, odom_end=9.92)
    assert b2.latest_t0() == pytest.approx(9.9)
    assert isinstance(b2.build(b2.latest_t0()), Window)
    b3 = WindowBuilder(CAMS)
    _feed(b3, 10.0, odom_end=7.9, span=2.0)
    assert b3.latest_t0() == pytest.approx(10.0)
    assert _code(b3, b3.latest_t0()) == "stale_odometry"


def _code(b: WindowBuilder, t0: float) -> str:
    result = b.build(t0)
    assert isinstance(result, WindowRejection), result
    assert result.reason
    return result.code


def test_missing_and_too_few_frames():
    b = WindowBuilder(CAMS)
    assert b.latest_t0() is None
    assert _code(b, 1.0) == "missing_camera"
    for k in range(3):
        for cam in range(CAMS):
            b.add_image(cam, 1.0 + 0.1 * k, np.zeros((4, 4, 3), np.uint8))
    assert _code(b, 1.2) == "too_few_frames"


def test_frame_gap_and_stale_images():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    assert _code(b, 10.3) == "stale_images"
    b2 = WindowBuilder(CAMS)
    _feed(b2, 10.0)
    for t in (10.5, 10.6):
        for cam in range(CAMS):
            b2.add_image(cam, t, np.zeros((8, 12, 3), np.uint8))
    assert _code(b2, 10.6) == "frame_gap"


def _feed_dropping(builder: WindowBuilder, dropped: set[tuple[int, int]]) -> None:
    """Frames at 9.1 + 0.1 k (k < 10) on every camera but the (camera, k) in `dropped`,
    odometry over 8.0 .. 10.0."""
    for t in np.arange(8.0, 10.001, 0.02):
        builder.add_odometry(t, [10.0 * t, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0], [10.0, 0.0, 0.0])
    for k in range(10):
        for cam in range(CAMS):
            if (cam, k) not in dropped:
                builder.add_image(cam, 9.1 + 0.1 * k, np.full((4, 4, 3), k, np.uint8))


@pytest.mark.parametrize("dropped, stand_ins", [
    ({(1, 7)}, 1),          # 9.8 of camera 1: 9.7 or 9.9 stands in
    ({(1, 9)}, 1),          # the newest (t0) frame: 9.9 stands in
    ({(0, 7), (2, 8)}, 2),  # one frame on each of two cameras
])
def test_a_dropped_frame_is_stood_in_by_the_nearest_and_counted(dropped, stand_ins):
    b = WindowBuilder(CAMS)
    _feed_dropping(b, dropped)
    window = b.build(10.0)
    assert isinstance(window, Window), window
    assert b.stand_ins == stand_ins
    for cam, k in dropped:
        slot = k - 6
        stamp = window.image_stamps[cam, slot]
        assert abs(stamp - (9.1 + 0.1 * k)) == pytest.approx(0.1)
        assert window.images[cam, slot, 0, 0, 0] == round((stamp - 9.1) / 0.1)
    untouched = [c for c in range(CAMS) if all(c != cam for cam, _ in dropped)]
    np.testing.assert_allclose(window.image_stamps[untouched], [[9.7, 9.8, 9.9, 10.0]]
                               * len(untouched))


def test_a_silent_camera_still_skips_the_window():
    b = WindowBuilder(CAMS)
    _feed_dropping(b, {(1, 6), (1, 7), (1, 8)})
    rejection = b.build(10.0)
    assert isinstance(rejection, WindowRejection) and rejection.code == "frame_gap"
    assert "camera 1" in rejection.reason and b.stand_ins == 0
    b2 = WindowBuilder(CAMS, limits=WindowLimits(frame_stand_in=0.0))
    _feed_dropping(b2, {(1, 7)})
    assert _code(b2, 10.0) == "frame_gap"
    b3 = WindowBuilder(CAMS)
    _feed_dropping(b3, {(2, 8), (2, 9)})
    assert _code(b3, 10.0) == "stale_images"


def test_odometry_short_and_gap():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0, span=1.0)
    assert _code(b, 10.0) == "odometry_short"
    b2 = WindowBuilder(CAMS)
    for k in range(21):
        for cam in range(CAMS):
            b2.add_image(cam, 8.0 + 0.1 * k, np.zeros((4, 4, 3), np.uint8))
    for t in list(np.arange(7.5, 9.0, 0.02)) + list(np.arange(9.4, 10.01, 0.02)):
        b2.add_odometry(t, [t, 0, 0], [0, 0, 0, 1], [1, 0, 0])
    assert _code(b2, 10.0) == "odometry_gap"


def test_nonfinite_inputs():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    assert _code(b, float("nan")) == "nonfinite"
    b.add_image(0, float("inf"), np.zeros((8, 12, 3), np.uint8))
    assert _code(b, 10.0) == "nonfinite"
    assert isinstance(b.build(10.0), Window)
    b2 = WindowBuilder(CAMS)
    _feed(b2, 10.0, odom_end=9.5)
    b2.add_odometry(9.52, [float("nan"), 0, 0], [0, 0, 0, 1], [1, 0, 0])
    for k in range(1, 25):
        b2.add_odometry(9.52 + 0.02 * k, [0, 0, 0], [0, 0, 0, 1], [1, 0, 0])
    assert _code(b2, 10.0) == "nonfinite"


def test_image_size_mismatch():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    b.add_image(2, 10.1, np.zeros((8, 10, 3), np.uint8))
    b.add_image(0, 10.1, np.zeros((8, 12, 3), np.uint8))
    b.add_image(1, 10.1, np.zeros((8, 12, 3), np.uint8))
    for t in np.arange(10.02, 10.11, 0.02):
        b.add_odometry(t, [10 * (t - 10), 0, 0], [0, 0, 0, 1], [10, 0, 0])
    assert _code(b, 10.1) == "image_size"
    assert isinstance(b.build(10.0), Window)


def test_every_time_base_reset_is_reported_in_order():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    assert isinstance(b.build(10.0), Window)
    b.add_image(0, 10.1, np.zeros((8, 12, 3), np.uint8))
    b.add_odometry(float("nan"), [0, 0, 0], [0, 0, 0, 1], [0, 0, 0])
    b.add_image(0, 9.0, np.zeros((8, 12, 3), np.uint8))
    b.add_image(0, 20.0, np.zeros((8, 12, 3), np.uint8))
    first, second = b.build(10.0), b.build(10.0)
    assert first.code == "time_backwards" and first.time_base_reset
    assert "10.100000 -> 9.000000" in first.reason
    assert second.code == "time_jump" and second.time_base_reset
    assert _code(b, 20.0) in ("too_few_frames", "missing_camera")


def test_pending_resets_are_bounded_and_keep_the_newest():
    b = WindowBuilder(CAMS)
    jumps = [10.0 + k for k in range(MAX_PENDING_RESETS + 3)]
    b.add_image(0, 0.0, np.zeros((8, 12, 3), np.uint8))
    for stamp in np.cumsum(jumps):
        b.add_image(0, float(stamp), np.zeros((8, 12, 3), np.uint8))
    reported = [b.build(0.0) for _ in range(MAX_PENDING_RESETS)]
    assert [r.code for r in reported] == ["time_jump"] * MAX_PENDING_RESETS
    assert [r.reason.split(" jumped forward ")[1][:6] for r in reported] == \
        [f"{j:.3f}" for j in jumps[-MAX_PENDING_RESETS:]]
    assert not b.build(0.0).time_base_reset


def test_backwards_stamp_resets_and_flags_next_window():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    assert isinstance(b.build(10.0), Window)
    b.add_image(0, 5.0, np.zeros((8, 12, 3), np.uint8))
    assert b.time_base_reset_pending
    rej = b.build(10.0)
    assert isinstance(rej, WindowRejection)
    assert rej.code == "time_backwards" and rej.time_base_reset
    assert _code(b, 10.0) in ("too_few_frames", "missing_camera")
    _feed(b, 7.5)
    win = b.build(7.5)
    assert isinstance(win, Window) and win.time_base_reset
    _feed(b, 7.6, span=0.1)
    win2 = b.build(7.6)
    assert isinstance(win2, Window) and not win2.time_base_reset


def test_forward_jump_resets():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    b.add_odometry(15.0, [0, 0, 0], [0, 0, 0, 1], [0, 0, 0])
    rej = b.build(10.0)
    assert isinstance(rej, WindowRejection) and rej.code == "time_jump" and rej.time_base_reset
    assert _code(b, 10.0) == "missing_camera"


def test_odometry_backwards_resets():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    b.add_odometry(9.0, [0, 0, 0], [0, 0, 0, 1], [0, 0, 0])
    assert _code(b, 10.0) == "time_backwards"


def test_duplicate_stamp_replaces_frame():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    b.add_image(0, 10.0, np.full((8, 12, 3), 99, np.uint8))
    win = b.build(10.0)
    assert isinstance(win, Window) and win.images[0, -1, 1, 1, 0] == 99


def test_buffers_stay_bounded():
    b = WindowBuilder(CAMS)
    _feed(b, 100.0, span=20.0)
    assert all(len(f) <= 12 for f in b._frames)
    assert len(b._odometry) <= 120
    assert isinstance(b.build(100.0), Window)


def test_bad_arguments_raise():
    b = WindowBuilder(CAMS)
    with pytest.raises(ValueError, match="camera index"):
        b.add_image(CAMS, 0.0, np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        b.add_image(0, 0.0, np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError, match="odometry needs"):
        b.add_odometry(0.0, [0, 0], [0, 0, 0, 1], [0, 0, 0])
    with pytest.raises(ValueError, match="frame_tolerance"):
        WindowBuilder(CAMS, limits=WindowLimits(frame_tolerance=0.06))
    with pytest.raises(ValueError):
        WindowLimits(max_odometry_gap=-1.0)
    with pytest.raises(ValueError):
        WindowRejection("x", "not_a_code")


_stamps = st.one_of(st.floats(min_value=-5.0, max_value=5.0),
                    st.sampled_from([float("nan"), float("inf"), -float("inf")]))
_values = st.floats(allow_nan=True, allow_infinity=True, width=32)
_event = st.one_of(
    st.tuples(st.just("image"), st.integers(0, CAMS - 1), _stamps, st.sampled_from([4, 6])),
    st.tuples(st.just("odom"), _stamps, st.lists(_values, min_size=10, max_size=10)),
    st.tuples(st.just("build"), _stamps),
)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(_event, max_size=60), st.floats(0.0, 0.1), st.booleans())
def test_random_event_streams_never_crash(events, step, prefed):
    b = WindowBuilder(CAMS)
    clock = 0.0
    if prefed:
        _feed(b, 10.0, image_shape=(4, 4, 3))
        clock = 9.9
    for event in events:
        clock += step
        if event[0] == "image":
            _, cam, jitter, width = event
            b.add_image(cam, clock + jitter, np.zeros((4, width, 3), np.uint8))
        elif event[0] == "odom":
            _, jitter, v = event
            b.add_odometry(clock + jitter, v[:3], v[3:7], v[7:])
        else:
            result = b.build(clock + event[1] / 10)
            assert isinstance(result, (Window, WindowRejection))
            if isinstance(result, Window):
                assert np.isfinite(result.ego_history).all()
                assert np.isfinite(result.speed)


def test_late_message_within_max_reorder_is_dropped_without_a_reset():
    b = WindowBuilder(CAMS)
    _feed(b, 10.0)
    b.add_image(0, 9.75, np.zeros((8, 12, 3), np.uint8))
    b.add_odometry(9.7, [0, 0, 0], [0, 0, 0, 1], [0, 0, 0])
    assert b.late_dropped == 2 and not b.time_base_reset_pending
    assert isinstance(b.build(10.0), Window)
