"""Ego kinematics: a kinematic bicycle about the rear axle (base_link), stepped at 50 Hz."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

WHEELBASE = 2.85
EGO_LENGTH = 4.8
EGO_WIDTH = 1.9
EGO_HEIGHT = 1.5
REAR_OVERHANG = 1.0
FRONT_OFFSET = EGO_LENGTH - REAR_OVERHANG  # m, base_link to the front bumper
CENTER_OFFSET = EGO_LENGTH / 2.0 - REAR_OVERHANG  # m, base_link to the box centre
MAX_STEER = 0.6
MAX_STEER_RATE = 0.7
MAX_ACCEL = 2.5
MAX_DECEL = 7.0


@dataclass(frozen=True)
class EgoState:
    """Pose of base_link (rear-axle centre) in the odom frame, speed, steering angle."""

    x: float
    y: float
    yaw: float
    v: float
    steer: float = 0.0
    accel: float = 0.0

    @property
    def yaw_rate(self) -> float:
        return self.v * np.tan(self.steer) / WHEELBASE

    @property
    def front_offset(self) -> float:
        """Distance from base_link to the front bumper."""
        return FRONT_OFFSET

    @property
    def center(self) -> tuple[float, float]:
        return (self.x + CENTER_OFFSET * np.cos(self.yaw),
                self.y + CENTER_OFFSET * np.sin(self.yaw))


def step_bicycle(state: EgoState, accel: float, steer_cmd: float, dt: float) -> EgoState:
    """One step of the kinematic bicycle with steering-rate and acceleration limits."""
    if dt <= 0:
        raise ValueError(f"dt must be > 0, got {dt}")
    accel = float(min(max(accel, -MAX_DECEL), MAX_ACCEL))
    steer_cmd = float(min(max(steer_cmd, -MAX_STEER), MAX_STEER))
    steer = state.steer + float(min(max(steer_cmd - state.steer, -MAX_STEER_RATE * dt),
                                    MAX_STEER_RATE * dt))
    v_new = max(state.v + accel * dt, 0.0)
    v_mid = 0.5 * (state.v + v_new)
    yaw_mid = state.yaw + 0.5 * v_mid * np.tan(steer) / WHEELBASE * dt
    x = state.x + v_mid * np.cos(yaw_mid) * dt
    y = state.y + v_mid * np.sin(yaw_mid) * dt
    yaw = state.yaw + v_mid * np.tan(steer) / WHEELBASE * dt
    return replace(state, x=float(x), y=float(y), yaw=float(yaw), v=float(v_new),
                   steer=steer, accel=(v_new - state.v) / dt)
