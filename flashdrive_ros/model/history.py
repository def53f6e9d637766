"""Ego-history tokenizer: 16 poses -> xyz deltas -> clamped uniform bins -> 48 token ids.

Deltas are taken pose to pose with a zero pose prepended, so the first delta is the oldest
pose itself. Each delta axis is quantized to `history_bins` bins over [-range, +range]
(round to nearest, clamp), and the bins are laid out pose-major: x0, y0, z0, x1, ...
With an even bin count a zero delta sits exactly half-way between two bins; a value within
TIE_TOLERANCE bins of such a half-way point counts as the tie itself and rounds half to
even, as exact ties do, so float noise on either side of zero (odometry in a frame with
large coordinates) gives the same token as the exact value.
Token id = id of `<i0>` + `history_token_offset` + bin.
"""

from __future__ import annotations

import numpy as np

from flashdrive_ros.model.config import ActionConfig

TIE_TOLERANCE = 1e-4


class HistoryTokenizer:
    def __init__(self, cfg: ActionConfig, traj_token_start: int) -> None:
        if traj_token_start < 0:
            raise ValueError(f"traj_token_start must be >= 0, got {traj_token_start}")
        self.cfg = cfg
        self.first_id = traj_token_start + cfg.history_token_offset
        r_xy, r_z = cfg.history_range_xy, cfg.history_range_z
        self.low = np.array([-r_xy, -r_xy, -r_z])
        self.high = np.array([r_xy, r_xy, r_z])

    @property
    def num_tokens(self) -> int:
        return 3 * self.cfg.num_history

    @property
    def bin_width(self) -> np.ndarray:
        """[3] metres per bin for x, y, z."""
        return (self.high - self.low) / (self.cfg.history_bins - 1)

    def encode(self, history_xyz: np.ndarray) -> np.ndarray:
        """history_xyz: [N_hist, 3] in the t0 ego frame, oldest first -> ids: [3 * N_hist]."""
        xyz = np.asarray(history_xyz, dtype=np.float64)
        if xyz.shape != (self.cfg.num_history, 3):
            raise ValueError(f"ego history must be [{self.cfg.num_history}, 3], got {xyz.shape}")
        if not np.isfinite(xyz).all():
            raise ValueError("ego history holds NaN or inf")
        deltas = np.diff(xyz, axis=0, prepend=np.zeros((1, 3)))  # deltas: [N_hist, 3]
        scaled = (deltas - self.low) / (self.high - self.low) * (self.cfg.history_bins - 1)
        bins = np.clip(np.rint(snap_ties(scaled)), 0, self.cfg.history_bins - 1)
        return bins.astype(np.int64).reshape(-1) + self.first_id

    def decode(self, token_ids: np.ndarray) -> np.ndarray:
        """ids: [3 * N_hist] -> history_xyz: [N_hist, 3] (cumulative de-quantized deltas)."""
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.shape != (self.num_tokens,):
            raise ValueError(f"expected {self.num_tokens} history token ids, got {ids.shape}")
        bins = ids - self.first_id
        if bins.min() < 0 or bins.max() >= self.cfg.history_bins:
            raise ValueError(f"history token ids outside [{self.first_id}, "
                             f"{self.first_id + self.cfg.history_bins})")
        unit = bins.reshape(-1, 3) / (self.cfg.history_bins - 1)
        deltas = unit * (self.high - self.low) + self.low
        return np.cumsum(deltas, axis=0)


def snap_ties(scaled: np.ndarray) -> np.ndarray:
    """Values within TIE_TOLERANCE of a half-way point k + 0.5, set to exactly k + 0.5."""
    half = np.floor(scaled) + 0.5
    return np.where(np.abs(scaled - half) < TIE_TOLERANCE, half, scaled)
