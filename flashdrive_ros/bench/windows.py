"""Synthetic sliding windows: each window is the previous one shifted by one frame."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from flashdrive_ros.engine.types import Window
from flashdrive_ros.model.config import ModelConfig

POOL_FRAMES = 8
SPEED_MPS = 10.0


class SlidingWindows:
    """Camera frames at the model's input size (576x320 at the full shape), random pixels from
    a pool of `POOL_FRAMES` per camera; ego history of a straight drive at SPEED_MPS."""

    def __init__(self, cfg: ModelConfig, seed: int = 0) -> None:
        p, a = cfg.prompt, cfg.action
        rng = np.random.default_rng(seed)
        shape = (len(p.camera_names), POOL_FRAMES, p.image_height, p.image_width, 3)
        self.pool = rng.integers(0, 256, size=shape, dtype=np.uint8)  # [V, P, H, W, 3]
        self.num_frames = p.num_frames
        self.frame_dt = p.frame_dt
        history = np.zeros((a.num_history, 4))
        history[:, 0] = SPEED_MPS * a.history_dt * np.arange(1 - a.num_history, 1)
        self.history = history  # [N_hist, 4] (x, y, z, yaw), last row at t0
        self.next_sequence = 0

    def window(self, sequence: int) -> Window:
        frames = (sequence + np.arange(self.num_frames)) % self.pool.shape[1]
        stamps = self.frame_dt * (sequence + np.arange(self.num_frames, dtype=np.float64))
        views = self.pool.shape[0]
        return Window(t0=float(stamps[-1]), images=self.pool[:, frames],
                      image_stamps=np.tile(stamps, (views, 1)), ego_history=self.history,
                      speed=SPEED_MPS, sequence=sequence)

    def take(self, count: int) -> Iterator[Window]:
        """The next `count` windows of the drive."""
        for _ in range(count):
            yield self.window(self.next_sequence)
            self.next_sequence += 1
