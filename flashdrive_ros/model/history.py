"""Ego-history tokenizer: 16 poses -> xyz deltas -> clamped uniform bins -> 48 token ids.

Deltas are taken pose to pose with a zero pose prepended, so the first delta is the oldest
pose itself. Each delta axis is quantized to `history_bins` bins over [-range, +range]
(round to nearest, clamp), and the bins are laid out pose-major: x0, y0, z0, x1, ...
Token id = id of `<i0>` + `history_token_offset` + bin.
"""

from __future__ import annotations

import numpy as np

from flashdrive_ros.model.config import ActionConfig


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
        unit = (deltas - self.low) / (self.high - self.low)
        bins = np.clip(np.rint(unit * (self.cfg.history_bins - 1)), 0, self.cfg.history_bins - 1)
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
