"""Plain data passed into and out of the engine (no ROS, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

STAGES = ("encode", "prefill", "decode", "action", "total")


@dataclass
class Window:
    """One model input: the last frames of every camera and the ego history at time t0.

    images: uint8 [N_cam, N_frames, H, W, 3] RGB, camera order = model camera slots,
        frames oldest first (the last frame is at t0).
    image_stamps: float64 [N_cam, N_frames] seconds.
    ego_history: float64 [N_hist, 4] (x, y, z, yaw) in the t0 ego frame at 0.1 s spacing,
        oldest first; the last row is the ego pose at t0 (zeros).
    speed: ego speed at t0 in m/s (from odometry).
    time_base_reset: stamps jumped since the previous window; streaming state must be dropped.
    """

    t0: float
    images: np.ndarray
    image_stamps: np.ndarray
    ego_history: np.ndarray
    speed: float = 0.0
    sequence: int = 0
    time_base_reset: bool = False

    def __post_init__(self) -> None:
        if self.images.ndim != 5 or self.images.shape[-1] != 3 or self.images.dtype != np.uint8:
            raise ValueError(f"images must be uint8 [N_cam, N_frames, H, W, 3], got "
                             f"{self.images.dtype} {self.images.shape}")
        if self.image_stamps.shape != self.images.shape[:2]:
            raise ValueError("image_stamps must be [N_cam, N_frames]")
        if self.ego_history.ndim != 2 or self.ego_history.shape[1] != 4:
            raise ValueError("ego_history must be [N_hist, 4] (x, y, z, yaw)")
        if not (np.isfinite(self.ego_history).all() and np.isfinite(self.image_stamps).all()
                and np.isfinite(self.speed)):
            raise ValueError("window holds NaN or inf")


@dataclass
class Plan:
    """Engine output for one window.

    trajectories: float64 [K, N_wp, 3] (x, y, yaw) in the t0 ego frame, waypoint i at
        (i + 1) * dt seconds after t0.
    prefill_reason: why the prefill was full ("" for a streaming prefill).
    """

    t0: float
    trajectories: np.ndarray
    dt: float
    coc_text: str
    coc_token_ids: list[int] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)
    accepted_lengths: list[int] = field(default_factory=list)
    tokens_generated: int = 0
    mode: str = "flashdrive"
    full_prefill: bool = True
    sequence: int = 0
    prefill_reason: str = ""

    @property
    def accepted_length_mean(self) -> float:
        return float(np.mean(self.accepted_lengths)) if self.accepted_lengths else 0.0
