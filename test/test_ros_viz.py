import numpy as np
import pytest
from sensor_msgs.msg import CameraInfo

from flashdrive_ros.ros.convert import SizeMismatch, camera_info_intrinsics
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.viz import (
    OTHER_RGB,
    SAMPLE0_RGB,
    PinholeCamera,
    clip_segment_near,
    render_overlay,
    visible_segments,
)
from flashdrive_ros.sim.cameras import rig, sim_mount


def camera(pitch=0.0, yaw=0.0, width=640, height=480, x=1.5):
    return PinholeCamera.from_parameters([100.0, 100.0, 320.0, 240.0],
                                         [x, 0.0, 1.5, 0.0, pitch, yaw], width, height)


def straight(length_m=40.0, n=64, lateral=0.0):
    trajectory = np.zeros((n, 3))
    trajectory[:, 0] = np.linspace(length_m / n, length_m, n)
    trajectory[:, 1] = lateral
    return trajectory


def test_projection_by_hand():
    cam = camera()
    optical = cam.to_optical(np.array([[11.5, 2.0, 0.0]]))
    np.testing.assert_allclose(optical, [[-2.0, 1.5, 10.0]])
    np.testing.assert_allclose(cam.project_optical(optical), [[300.0, 255.0]])


def test_pitch_down_sees_the_forward_axis_at_the_center():
    cam = camera(pitch=np.arctan2(1.5, 10.0))
    uv = cam.project_optical(cam.to_optical(np.array([[11.5, 0.0, 0.0]])))
    np.testing.assert_allclose(uv, [[320.0, 240.0]], atol=1e-9)


def test_near_plane_clipping():
    a, b = np.array([0.0, 1.0, -2.0]), np.array([0.0, 1.0, 8.0])
    cut_a, cut_b = clip_segment_near(a, b, 0.5)
    np.testing.assert_allclose(cut_a, [0.0, 1.0, 0.5])
    np.testing.assert_allclose(cut_b, b)
    assert clip_segment_near(a, a, 0.5) is None


def test_segments_start_at_the_near_plane_and_stay_in_the_image():
    cam = camera()
    segments = visible_segments(cam, straight())
    assert segments
    points = np.array([p for _, p0, p1 in segments for p in (p0, p1)])
    assert (points[:, 0] == 320).all()
    assert points[:, 1].max() <= 480 and points[:, 1].min() > 240
    assert min(d for d, _, _ in segments) == pytest.approx((0.5 + 1.0) / 2)


def test_trajectory_behind_the_camera_draws_nothing():
    image = np.full((480, 640, 3), 90, np.uint8)
    out = render_overlay(image, camera(yaw=np.pi, x=-1.0), straight()[None], "")
    np.testing.assert_array_equal(out, image)


def test_sample_zero_is_drawn_over_other_samples_and_text_band():
    image = np.zeros((480, 640, 3), np.uint8)
    trajectories = np.stack([straight(), straight(), straight(lateral=3.0)])
    out = render_overlay(image, camera(), trajectories, "Stop for the pedestrian crossing. " * 8)
    assert tuple(out[300, 320]) == SAMPLE0_RGB
    row = out[300]
    other = np.where((row == OTHER_RGB).all(axis=1))[0]
    assert other.size and other.mean() < 320
    assert out[470:].max() > 200
    assert out[:230].max() == 0


def test_overlay_rescales_intrinsics_to_the_image_size():
    image = np.zeros((240, 320, 3), np.uint8)
    out = render_overlay(image, camera(), straight()[None], "")
    assert tuple(out[150, 160]) == SAMPLE0_RGB


def test_bad_inputs():
    with pytest.raises(ValueError):
        render_overlay(np.zeros((4, 4), np.uint8), camera(), straight()[None], "")
    with pytest.raises(ValueError):
        render_overlay(np.zeros((4, 4, 3), np.uint8), camera(), straight(), "")
    with pytest.raises(ValueError):
        PinholeCamera.from_parameters([0, 0, 0, 0], [0] * 6, 10, 10)


def test_camera_info_intrinsics():
    info = CameraInfo(width=1920, height=1080, k=[1000.0, 0, 960, 0, 1001.0, 540, 0, 0, 1])
    assert camera_info_intrinsics(info) == (1000.0, 1001.0, 960.0, 540.0, 1920, 1080)
    with pytest.raises(SizeMismatch, match="uncalibrated"):
        camera_info_intrinsics(CameraInfo(width=10, height=10))


@pytest.mark.parametrize("name", DriveParams().camera_names)
def test_extrinsic_from_sim_mount_matches_the_sim_rig(name):
    cam = PinholeCamera.from_parameters([100.0, 100.0, 50.0, 40.0], sim_mount(name), 100, 80)
    base_from_camera = rig((name,))[0].base_from_camera()
    points = np.random.default_rng(0).uniform(-20, 20, (10, 3))
    expected = (points - base_from_camera[:3, 3]) @ base_from_camera[:3, :3]
    np.testing.assert_allclose(cam.to_optical(points), expected, atol=1e-5)
