import numpy as np
import pytest

from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.train.coverage import CoverageError, check_coverage, coverage, speed_band
from flashdrive_ros.train.drive import to_ego_frame
from flashdrive_ros.train.generate import generate_drive
from flashdrive_ros.train.sensor_noise import NO_NOISE, SensorNoise, camera_effects, measured_poses


@pytest.fixture(scope="module")
def log():
    return simulate(5, 6.0)


def test_clean_poses_are_the_simulated_ones(log):
    stamps = np.arange(log.frame_count) / 10
    poses = measured_poses(NO_NOISE, np.random.default_rng(0), log.ego, stamps)
    rows = log.ego[np.arange(log.frame_count) * 5]
    assert np.array_equal(poses[:, [0, 1, 3]], rows[:, [1, 2, 3]])


def test_noisy_poses_sit_in_a_far_frame_and_stay_close_in_the_t0_frame(log):
    stamps = np.arange(log.frame_count) / 10
    noise = SensorNoise(clean_share=0.0)
    poses = measured_poses(noise, np.random.default_rng(1), log.ego, stamps)
    exact = measured_poses(NO_NOISE, np.random.default_rng(1), log.ego, stamps)
    assert np.abs(poses[:, :2]).max() > 1e4
    k = log.frame_count - 1
    local = to_ego_frame(poses[k - 15:k + 1], poses[k])
    truth = to_ego_frame(exact[k - 15:k + 1], exact[k])
    err = np.abs(local - truth).max(axis=0)
    assert 0.0 < err[0] < 0.25 and err[1] < 0.25 and err[3] < 0.05
    again = measured_poses(noise, np.random.default_rng(1), log.ego, stamps)
    assert np.array_equal(poses, again)


def test_camera_effects_change_exposure_and_keep_the_scene():
    rng = np.random.default_rng(0)
    frames = rng.integers(40, 200, (5, 4, 16, 24, 3), dtype=np.uint8)
    out = camera_effects(SensorNoise(clean_share=0.0, blur_share=0.5), rng, frames)
    assert out.dtype == np.uint8 and out.shape == frames.shape
    assert not np.array_equal(out, frames)
    corr = np.corrcoef(out.reshape(-1).astype(float), frames.reshape(-1).astype(float))[0, 1]
    assert corr > 0.5
    assert camera_effects(NO_NOISE, rng, frames) is frames


def test_bad_noise_settings_are_refused():
    with pytest.raises(ValueError, match="clean_share"):
        SensorNoise(clean_share=1.5)
    with pytest.raises(ValueError, match=">= 0"):
        SensorNoise(pos_sigma_m=-1.0)
    with pytest.raises(ValueError, match="exposure"):
        SensorNoise(exposure=(1.2, 0.8))


def test_coverage_counts_every_window_once_and_names_missing_decisions():
    drive = generate_drive(2, 3.0, (16, 24))
    table = coverage([drive], num_frames=4, num_history=16)
    steps = drive.window_steps(4, 16)
    assert table["windows"] == len(steps)
    assert sum(r["windows"] for r in table["decision"].values()) == len(steps)
    band = speed_band(float(drive.speed[steps[0]]))
    assert table["speed_band"][band]["windows"] >= 1
    with pytest.raises(CoverageError, match="stop") as info:
        check_coverage(table, min_windows=len(steps) + 1)
    assert "--train-drives" in str(info.value)
    check_coverage(table, min_windows=0)
    with pytest.raises(ValueError):
        speed_band(float("nan"))
