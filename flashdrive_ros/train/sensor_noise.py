"""Sensor realism for training drives: odometry noise, drift, stamp jitter and a far map
frame; camera exposure, noise and blur. Drawn per drive from its seed, so a drive's data is
deterministic."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class SensorNoise:
    """Upper ends of the per-drive draws; a `clean_share` of drives gets none of it.

    pos_sigma_m / yaw_sigma_rad: white odometry noise; drift_sigma_m: random-walk step per
    second of the odometry position; stamp_jitter_s: sigma of the odometry sample time around
    the camera stamp; frame_offset_m: map / UTM-like origin offsets (the frame is also rotated);
    exposure: gain range per drive; pixel_sigma: white image noise in DN; blur_share: share
    of frames blurred (Gaussian, sigma up to blur_sigma pixels).
    """

    clean_share: float = 0.2
    pos_sigma_m: float = 0.01
    yaw_sigma_rad: float = 0.002
    drift_sigma_m: float = 0.01
    stamp_jitter_s: float = 0.004
    frame_offset_m: float = 1e6
    exposure: tuple[float, float] = (0.7, 1.3)
    pixel_sigma: float = 4.0
    blur_share: float = 0.15
    blur_sigma: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.clean_share <= 1.0 or not 0.0 <= self.blur_share <= 1.0:
            raise ValueError("clean_share and blur_share must be in [0, 1]")
        values = (self.pos_sigma_m, self.yaw_sigma_rad, self.drift_sigma_m,
                  self.stamp_jitter_s, self.frame_offset_m, self.pixel_sigma, self.blur_sigma)
        if min(values) < 0.0:
            raise ValueError("noise magnitudes must be >= 0")
        if not 0.0 < self.exposure[0] <= self.exposure[1]:
            raise ValueError(f"exposure must be 0 < low <= high, got {self.exposure}")


NO_NOISE = SensorNoise(clean_share=1.0)


def measured_poses(noise: SensorNoise, rng: np.random.Generator, ego: np.ndarray,
                   stamps: np.ndarray) -> np.ndarray:
    """Odometry as a vehicle logs it at the camera stamps.

    ego: float64 [N, 4+] (t, x, y, yaw, ...) at the simulator rate; stamps: [S] seconds.
    Returns float64 [S, 4] (x, y, z, yaw): the exact poses in the simulator frame for a clean
    drive, else noisy poses in a far, rotated map frame.
    """
    if rng.random() < noise.clean_share:
        return _exact_poses(ego, stamps)
    scale = float(rng.uniform(0.0, 1.0))
    times = stamps + scale * noise.stamp_jitter_s * rng.standard_normal(len(stamps))
    times = np.clip(times, ego[0, 0], ego[-1, 0])
    x = np.interp(times, ego[:, 0], ego[:, 1])
    y = np.interp(times, ego[:, 0], ego[:, 2])
    yaw = np.interp(times, ego[:, 0], np.unwrap(ego[:, 3]))
    dt = np.diff(stamps, prepend=stamps[0])
    drift = np.cumsum(scale * noise.drift_sigma_m * np.sqrt(dt)[:, None]
                      * rng.standard_normal((len(stamps), 2)), axis=0)  # drift: [S, 2]
    x = x + drift[:, 0] + scale * noise.pos_sigma_m * rng.standard_normal(len(stamps))
    y = y + drift[:, 1] + scale * noise.pos_sigma_m * rng.standard_normal(len(stamps))
    yaw = yaw + scale * noise.yaw_sigma_rad * rng.standard_normal(len(stamps))
    theta = float(rng.uniform(-np.pi, np.pi))
    offset = rng.uniform(-1.0, 1.0, 2) * noise.frame_offset_m
    c, s = np.cos(theta), np.sin(theta)
    mx = c * x - s * y + offset[0]
    my = s * x + c * y + offset[1]
    return np.stack([mx, my, np.zeros(len(stamps)), yaw + theta], axis=1)


def _exact_poses(ego: np.ndarray, stamps: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(ego[:, 0], stamps - 1e-9)  # stamps on the simulator's time grid
    rows = ego[idx]
    return np.stack([rows[:, 1], rows[:, 2], np.zeros(len(stamps)), rows[:, 3]], axis=1)


def camera_effects(noise: SensorNoise, rng: np.random.Generator,
                   frames: np.ndarray) -> np.ndarray:
    """frames: uint8 [S, N_cam, H, W, 3] -> the same with per-drive, per-camera exposure that
    drifts slowly, white pixel noise and blurred frames."""
    if rng.random() < noise.clean_share:
        return frames
    steps, cams = frames.shape[:2]
    low, high = np.log(noise.exposure[0]), np.log(noise.exposure[1])
    base = rng.uniform(low, high, cams)
    wander = np.cumsum(0.01 * rng.standard_normal((steps, cams)), axis=0)
    gain = np.exp(np.clip(base + wander, low, high))  # gain: [S, N_cam]
    sigma = float(rng.uniform(0.0, noise.pixel_sigma))
    out = frames.astype(np.float32) * gain[:, :, None, None, None]
    out += sigma * rng.standard_normal(out.shape).astype(np.float32)
    out = np.clip(np.rint(out), 0, 255).astype(np.uint8)
    for k, c in zip(*np.nonzero(rng.random((steps, cams)) < noise.blur_share)):
        s = 0.3 + float(rng.uniform(0.0, noise.blur_sigma))
        out[k, c] = cv2.GaussianBlur(out[k, c], (0, 0), s)
    return out
