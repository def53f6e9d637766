"""Camera sets and odometry fed straight into a PlannerLoop (no DDS)."""

import numpy as np

CAMERAS = ["left", "front", "right", "tele"]
IDENTITY = np.array([0.0, 0.0, 0.0, 1.0])


def images(seed, height=48, width=64):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in CAMERAS]


def feed(loop, t_start, t_end, speed=4.0, nan_at=None, image_size=(48, 64)):
    """Odometry every 0.02 s and camera sets every 0.1 s on [t_start, t_end]."""
    for k in range(int(round((t_end - t_start) / 0.02)) + 1):
        t = round(t_start + 0.02 * k, 6)
        position = [speed * t, 0.0, 0.0]
        fault = ""
        if nan_at is not None and abs(t - nan_at) < 1e-6:
            position, fault = [np.nan, 0.0, 0.0], "non_finite: test"
        loop.add_odometry(t, position, IDENTITY, [speed, 0.0, 0.0], fault=fault)
        if abs(t * 10 - round(t * 10)) < 1e-6:
            loop.add_camera_set([t] * len(CAMERAS), images(int(round(t * 10)), *image_size))

