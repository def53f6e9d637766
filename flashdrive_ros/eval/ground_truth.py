"""Ground truth from the bag's odometry: future ego poses in the t0 ego frame, and the
constant-velocity baseline on the same windows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flashdrive_ros.eval.errors import EmptyBag
from flashdrive_ros.eval.records import OdometryRecord


def quaternion_to_matrix(q: np.ndarray) -> np.ndarray:
    """q: [..., 4] unit xyzw -> [..., 3, 3] world-from-body rotation."""
    x, y, z, w = np.moveaxis(q, -1, 0)
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ]
    return np.stack([np.stack(r, axis=-1) for r in rows], axis=-2)


class OdometryTrack:
    """Odometry samples sorted by stamp, interpolated linearly (quaternions by normalized
    lerp), rejecting spans with a sample gap above `max_gap` seconds."""

    def __init__(self, records: Sequence[OdometryRecord], max_gap: float = 0.25) -> None:
        finite = [r for r in records if np.isfinite(r.stamp) and np.isfinite(r.position).all()
                  and np.isfinite(r.quaternion).all() and np.linalg.norm(r.quaternion) > 1e-6]
        if len(finite) < 2:
            raise EmptyBag(f"odometry has {len(finite)} usable samples, need >= 2")
        finite.sort(key=lambda r: r.stamp)
        self.stamps = np.array([r.stamp for r in finite])
        self.positions = np.stack([r.position for r in finite])  # [N, 3]
        quats = np.stack([r.quaternion / np.linalg.norm(r.quaternion) for r in finite])
        for i in range(1, len(quats)):
            if np.dot(quats[i - 1], quats[i]) < 0:
                quats[i] = -quats[i]
        self.quaternions = quats  # [N, 4], sign-continuous
        self.velocities = np.stack([r.linear_velocity for r in finite])  # [N, 3] body frame
        self.max_gap = max_gap

    def covers(self, start: float, end: float) -> bool:
        """True when [start, end] lies inside the track with no sample gap above max_gap."""
        if start < self.stamps[0] or end > self.stamps[-1] + 1e-9:
            return False
        lo = max(int(np.searchsorted(self.stamps, start, side="right")) - 1, 0)
        hi = min(int(np.searchsorted(self.stamps, end, side="left")), len(self.stamps) - 1)
        gaps = np.diff(self.stamps[lo:hi + 1])
        return not (gaps.size and gaps.max() > self.max_gap)

    def poses(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """times: [T] inside the track -> positions [T, 3], rotations [T, 3, 3]."""
        positions = np.stack([np.interp(times, self.stamps, self.positions[:, k])
                              for k in range(3)], axis=-1)
        quats = np.stack([np.interp(times, self.stamps, self.quaternions[:, k])
                          for k in range(4)], axis=-1)
        quats /= np.linalg.norm(quats, axis=-1, keepdims=True)
        return positions, quaternion_to_matrix(quats)

    def in_ego_frame(self, t0: float, times: np.ndarray) -> np.ndarray:
        """Poses at `times` as (x, y, yaw) [T, 3] in the ego frame at t0 (x fwd, y left)."""
        origin, rot0 = self.poses(np.array([t0]))
        positions, rotations = self.poses(times)
        local = (positions - origin[0]) @ rot0[0]  # local: [T, 3]
        relative = np.einsum("ji,njk->nik", rot0[0], rotations)  # [T, 3, 3]
        yaw = np.unwrap(np.arctan2(relative[:, 1, 0], relative[:, 0, 0]))
        return np.concatenate([local[:, :2], yaw[:, None]], axis=1)

    def future(self, t0: float, steps: int = 64, dt: float = 0.1) -> np.ndarray | None:
        """The ego poses at t0 + (i + 1) * dt, i < steps, as [steps, 3] (x, y, yaw) in the t0
        frame, or None when the odometry does not cover t0 .. t0 + steps * dt."""
        end = t0 + steps * dt
        if not self.covers(t0, end):
            return None
        return self.in_ego_frame(t0, t0 + dt * np.arange(1, steps + 1))

    def velocity(self, t0: float, dt: float = 0.1) -> np.ndarray:
        """Ego velocity (vx, vy) at t0 in the t0 ego frame: the odometry twist (nav_msgs:
        expressed in the child, i.e. body, frame); when the twist is zero or not finite while
        the poses move, the pose difference over the last dt."""
        twist = np.array([np.interp(t0, self.stamps, self.velocities[:, k]) for k in range(2)])
        earlier = max(t0 - dt, self.stamps[0])
        moved = -self.in_ego_frame(t0, np.array([earlier]))[0, :2] / max(t0 - earlier, 1e-9)
        if np.isfinite(twist).all() and (np.linalg.norm(twist) > 0 or
                                         np.linalg.norm(moved) < 0.5):
            return twist
        return moved

    def constant_velocity(self, t0: float, steps: int = 64, dt: float = 0.1) -> np.ndarray:
        """Constant-velocity rollout [steps, 3] (x, y, yaw) in the t0 ego frame, heading kept."""
        offsets = dt * np.arange(1, steps + 1)[:, None] * self.velocity(t0, dt)[None, :]
        return np.concatenate([offsets, np.zeros((steps, 1))], axis=1)
