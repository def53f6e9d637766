"""One simulated drive held once in memory; training windows index into it.

Each step's camera frames are stored once; a window at step i reads frames i-F+1..i of every
camera and the ego history i-H+1..i by index (see dataset.TrainSet).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

SCENE_COLUMNS = ("lamp", "light_gap_m", "vehicle_gap_m", "vehicle_speed_mps", "bend_gap_m",
                 "bend_side")


@dataclass
class Drive:
    """seed: simulator seed; steps at a fixed `dt`.

    frames: uint8 [S, N_cam, H, W, 3]; stamps: float64 [S];
    poses: float64 [S, 4] world (x, y, z, yaw); speed: float64 [S];
    coc: S chain-of-causation sentences; decision: int64 [S] index into the decision names;
    expert_future: float64 [S, N_wp, 3] the expert's plan (x, y, yaw) in the ego frame of
    each step; tags: S comma-joined scenario tags of each step; scene: float64 [S, 4] the
    expert's readings of each step (SCENE_COLUMNS, train/scene_readout.py).
    Contrasts (sim/lead_stops.py), the same windows planned under another CoC:
    contrast_step: int64 [C] the steps that have one, ascending; contrast_coc: C sentences;
    contrast_decision: int64 [C]; contrast_future: float64 [C, N_wp, 3] (None: no contrasts).
    """

    seed: int
    scenario: str
    dt: float
    frames: np.ndarray
    stamps: np.ndarray
    poses: np.ndarray
    speed: np.ndarray
    coc: list[str]
    decision: np.ndarray
    expert_future: np.ndarray
    tags: list[str]
    scene: np.ndarray
    contrast_step: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    contrast_coc: list[str] = field(default_factory=list)
    contrast_decision: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    contrast_future: np.ndarray | None = None

    def __post_init__(self) -> None:
        s = self.frames.shape[0]
        if self.frames.ndim != 5 or self.frames.dtype != np.uint8 or self.frames.shape[-1] != 3:
            raise ValueError(f"frames must be uint8 [S, N_cam, H, W, 3], got "
                             f"{self.frames.dtype} {self.frames.shape}")
        if self.poses.shape != (s, 4) or self.stamps.shape != (s,) or self.speed.shape != (s,):
            raise ValueError("poses [S, 4], stamps [S] and speed [S] must match the frames")
        if len(self.coc) != s or self.decision.shape != (s,) or len(self.tags) != s:
            raise ValueError("one CoC sentence, one decision and one tag set per step")
        if self.expert_future.ndim != 3 or self.expert_future.shape[0] != s or \
                self.expert_future.shape[2] != 3:
            raise ValueError("expert_future must be [S, N_wp, 3]")
        if self.scene.shape != (s, len(SCENE_COLUMNS)):
            raise ValueError(f"scene must be [S, {len(SCENE_COLUMNS)}] "
                             f"({', '.join(SCENE_COLUMNS)}), got {self.scene.shape}")
        if self.contrast_future is None:
            self.contrast_future = np.zeros((0, *self.expert_future.shape[1:]))
        c = self.contrast_step.shape[0]
        if (self.contrast_step.shape != (c,) or len(self.contrast_coc) != c
                or self.contrast_decision.shape != (c,)
                or self.contrast_future.shape[0] != c or self.contrast_future.ndim != 3):
            raise ValueError("one contrast CoC, decision and future per contrast step")
        if c and (np.any(np.diff(self.contrast_step) <= 0) or self.contrast_step[0] < 0
                  or self.contrast_step[-1] >= s):
            raise ValueError("contrast steps must be distinct steps of the drive, ascending")

    @property
    def num_steps(self) -> int:
        return self.frames.shape[0]

    def window_steps(self, num_frames: int, num_history: int) -> np.ndarray:
        """Steps that have the frames and history a window needs: [N] int64."""
        first = max(num_frames, num_history) - 1
        return np.arange(first, self.num_steps, dtype=np.int64)


def to_ego_frame(poses: np.ndarray, origin: np.ndarray) -> np.ndarray:
    """poses: [N, 4] world (x, y, z, yaw); origin: [4] -> [N, 4] in the origin's frame."""
    c, s = np.cos(origin[3]), np.sin(origin[3])
    d = poses[:, :3] - origin[:3]
    x = c * d[:, 0] + s * d[:, 1]
    y = -s * d[:, 0] + c * d[:, 1]
    yaw = np.angle(np.exp(1j * (poses[:, 3] - origin[3])))
    return np.stack([x, y, d[:, 2], yaw], axis=-1)
