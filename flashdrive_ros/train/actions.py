"""Flow-matching targets: the future trajectory as (acceleration, curvature) actions.

v0 is fitted to the ego history exactly as at inference; the controls come from the unicycle
inverse; their mean and std over the training windows become the model's action space.
"""

from __future__ import annotations

import numpy as np
import torch

from flashdrive_ros.model.unicycle import fit_v0, poses_to_controls


def history_v0(history: np.ndarray, dt: float) -> np.ndarray:
    """history: [B, N_hist, 4] (x, y, z, yaw) -> v0: [B] fitted speed at t0."""
    h = torch.as_tensor(history, dtype=torch.float64)
    return fit_v0(h[..., :3], h[..., 3], dt).numpy()


def future_controls(future: np.ndarray, v0: np.ndarray, dt: float, chunk: int = 512
                    ) -> np.ndarray:
    """future: [B, N_wp, 3] (x, y, yaw) after t0; v0: [B] -> [B, N_wp, 2] physical units."""
    out = []
    for start in range(0, len(future), chunk):
        f = torch.as_tensor(future[start:start + chunk], dtype=torch.float64)
        v = torch.as_tensor(v0[start:start + chunk], dtype=torch.float64)
        accel, curvature = poses_to_controls(f[..., :2], f[..., 2], v, dt)
        out.append(torch.stack([accel, curvature], dim=-1).numpy())
    return np.concatenate(out) if out else np.zeros((0, future.shape[1], 2))


def action_stats(controls: np.ndarray) -> dict[str, float]:
    """controls: [B, N_wp, 2] -> ActionConfig fields accel/curvature mean and std."""
    flat = controls.reshape(-1, 2)
    std = np.maximum(flat.std(axis=0), 1e-4)
    return {"accel_mean": float(flat[:, 0].mean()), "accel_std": float(std[0]),
            "curvature_mean": float(flat[:, 1].mean()), "curvature_std": float(std[1])}


def normalize_controls(controls: np.ndarray, stats: dict[str, float]) -> np.ndarray:
    """controls: [B, N_wp, 2] -> normalized actions [B, N_wp, 2] float32."""
    mean = np.array([stats["accel_mean"], stats["curvature_mean"]])
    std = np.array([stats["accel_std"], stats["curvature_std"]])
    return ((controls - mean) / std).astype(np.float32)
