"""Plan sanity: a plan is usable only when its trajectories are finite and kinematically
possible (acceleration, jerk and curvature within limits)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flashdrive_ros.engine.types import Plan

MIN_ARC_M = 0.05


@dataclass(frozen=True)
class PlanLimits:
    """Largest |longitudinal acceleration| (m/s^2), |jerk| (m/s^3) and |curvature| (1/m) of a
    usable trajectory; curvature is measured only over steps longer than MIN_ARC_M."""

    max_accel_mps2: float = 12.0
    max_jerk_mps3: float = 60.0
    max_curvature_1pm: float = 1.0

    def __post_init__(self) -> None:
        for name in ("max_accel_mps2", "max_jerk_mps3", "max_curvature_1pm"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"PlanLimits.{name} must be finite and > 0, got {value}")


def stop_plan(t0: float, num_waypoints: int, dt: float, reason: str) -> Plan:
    """The fallback trajectory: stand still at the ego origin for num_waypoints steps."""
    return Plan(t0=t0, trajectories=np.zeros((1, num_waypoints, 3)), dt=dt,
                coc_text=f"fallback stop: {reason}", mode="fallback_stop")


def trajectory_kinematics(trajectory: np.ndarray, dt: float) -> dict[str, np.ndarray]:
    """trajectory: [N, 3] (x, y, yaw) from the ego origin at t0, waypoint i at (i + 1) * dt.
    Returns speed [N], accel [N - 1], jerk [N - 2] and curvature [M] of steps >= MIN_ARC_M."""
    points = np.concatenate([np.zeros((1, 3)), np.asarray(trajectory, dtype=np.float64)])
    steps = np.linalg.norm(np.diff(points[:, :2], axis=0), axis=1)  # steps: [N]
    speed = steps / dt
    accel = np.diff(speed) / dt
    jerk = np.diff(accel) / dt
    turn = np.angle(np.exp(1j * np.diff(points[:, 2])))  # turn: [N] wrapped yaw change
    moving = steps >= MIN_ARC_M
    return {"speed": speed, "accel": accel, "jerk": jerk,
            "curvature": turn[moving] / steps[moving]}


def check_plan(plan: Plan, limits: PlanLimits | None = None) -> str:
    """Empty when the plan is usable, else why not (shape, NaN/inf, or the first sample and
    quantity beyond `limits`)."""
    trajectories = np.asarray(plan.trajectories)
    if trajectories.ndim != 3 or trajectories.shape[2] != 3 or trajectories.shape[0] < 1:
        return f"plan trajectories have shape {trajectories.shape}, expected [K, N, 3]"
    if not np.isfinite(trajectories).all():
        return "plan trajectories hold NaN or inf"
    if not (np.isfinite(plan.t0) and np.isfinite(plan.dt) and plan.dt > 0):
        return f"plan t0 {plan.t0} or dt {plan.dt} invalid"
    if limits is None:
        return ""
    bounds = {"accel": (limits.max_accel_mps2, "m/s^2"),
              "jerk": (limits.max_jerk_mps3, "m/s^3"),
              "curvature": (limits.max_curvature_1pm, "1/m")}
    for k, trajectory in enumerate(trajectories):
        kinematics = trajectory_kinematics(trajectory, plan.dt)
        for quantity, (bound, unit) in bounds.items():
            values = np.abs(kinematics[quantity])
            if values.size and values.max() > bound:
                return (f"sample {k}: |{quantity}| reaches {values.max():.2f} {unit}, limit "
                        f"{bound} {unit}")
    return ""
