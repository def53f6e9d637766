"""Tracking controller of the closed loop: pure pursuit on the planned path and speed control
along the plan's timing, with comfort limits; the vehicle model adds its own limits (steering
rate, acceleration) when the command is applied."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from flashdrive_ros.sim.vehicle import MAX_ACCEL, MAX_DECEL, MAX_STEER, WHEELBASE, EgoState


@dataclass
class TrackingConfig:
    """Pure pursuit: lookahead = clip(lookahead_base + lookahead_gain * v, min, max) metres
    along the plan from the point nearest base_link. Speed: the plan's speed `speed_preview_s`
    ahead plus `position_gain` times the along-track lag behind the plan's position now,
    reached with time constant `speed_time_constant_s`, plus `accel_feedforward` times the
    plan's own acceleration there (without it a braking plan is followed with a lag that each
    new plan starts again from). Where the plan comes to a stop (below `stop_speed` on average
    over `stop_window_s`, so a plan that creeps on is no stop), the car brakes at least as hard
    as stopping at that point takes once that is more than `stop_point_decel`. A plan older
    than `max_plan_age_s` (or none) is not followed: the car brakes at `fallback_decel` with
    the wheel held."""

    lookahead_base: float = 3.0
    lookahead_gain: float = 0.5
    lookahead_min: float = 4.0
    lookahead_max: float = 15.0
    speed_preview_s: float = 0.0
    position_gain: float = 0.3
    speed_time_constant_s: float = 0.5
    accel_feedforward: float = 1.0
    stop_point_decel: float = 0.5
    stop_window_s: float = 1.0
    max_accel: float = 2.0
    max_decel: float = 6.0
    fallback_decel: float = 3.0
    max_plan_age_s: float = 0.5
    stop_speed: float = 0.3

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"TrackingConfig.{name} must be finite and >= 0, got {value}")
        if not 0 < self.lookahead_min <= self.lookahead_max:
            raise ValueError("need 0 < lookahead_min <= lookahead_max")
        if self.speed_time_constant_s <= 0 or self.max_plan_age_s <= 0:
            raise ValueError("speed_time_constant_s and max_plan_age_s must be > 0")
        if self.max_accel > MAX_ACCEL or self.max_decel > MAX_DECEL:
            raise ValueError(f"comfort limits above the vehicle's ({MAX_ACCEL} / {MAX_DECEL})")


@dataclass(frozen=True)
class WorldPlan:
    """A plan in the world frame: times [N] (s), xy [N, 2], the t0 pose first; ready_at:
    when it reaches the controller; coc: its chain-of-causation ("" when none came)."""

    t0: float
    times: np.ndarray
    xy: np.ndarray
    ready_at: float
    coc: str = ""

    @classmethod
    def from_ego_frame(cls, t0: float, dt: float, trajectory: np.ndarray, origin: EgoState,
                       ready_at: float, coc: str = "") -> WorldPlan:
        """trajectory: [N, >=2] (x, y, ...) in the ego frame at t0; origin: the ego at t0."""
        c, s = math.cos(origin.yaw), math.sin(origin.yaw)
        local = np.concatenate([np.zeros((1, 2)), np.asarray(trajectory, np.float64)[:, :2]])
        xy = np.stack([origin.x + c * local[:, 0] - s * local[:, 1],
                       origin.y + s * local[:, 0] + c * local[:, 1]], axis=1)
        times = t0 + dt * np.arange(len(local))
        return cls(t0, times, xy, ready_at, coc)

    @cached_property
    def arc(self) -> np.ndarray:
        """[N] arc length (m) along xy."""
        return np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(self.xy, axis=0).T))])

    @cached_property
    def mids(self) -> np.ndarray:
        """[N - 1] mid-times of the segments (s)."""
        return 0.5 * (self.times[1:] + self.times[:-1])

    @cached_property
    def speeds(self) -> np.ndarray:
        """[N - 1] speed (m/s) on each segment, at its mid-time."""
        return np.diff(self.arc) / np.diff(self.times)


def plan_speed(plan: WorldPlan, t: float) -> float:
    """Speed along the plan (m/s) at time t."""
    return float(np.interp(t, plan.mids, plan.speeds))


def plan_accel(plan: WorldPlan, t: float) -> float:
    """Acceleration along the plan (m/s^2) at time t."""
    if plan.speeds.size < 2:
        return 0.0
    return float(np.interp(t, plan.mids[1:], np.diff(plan.speeds) / np.diff(plan.mids)))


def plan_stop_arc(plan: WorldPlan, t: float, stop_speed: float, window_s: float
                  ) -> float | None:
    """Arc length where the plan stops after time t: the first of its points from which it
    covers less than `stop_speed` * `window_s` in the next `window_s` (a plan that creeps on
    does not stop); None when it keeps moving."""
    arc = plan.arc
    dt = float(np.mean(np.diff(plan.times)))
    k = max(1, int(round(window_s / dt)))
    index = np.arange(len(arc))
    ahead = arc[np.minimum(index + k, len(arc) - 1)] - arc  # [N] m in the next window_s
    span = np.minimum(k, len(arc) - 1 - index) * dt  # [N] s of plan actually ahead
    stopped = (span > 0) & (ahead < stop_speed * span) & (plan.times >= t - dt)
    first = np.flatnonzero(stopped)
    return float(arc[first[0]]) if first.size else None


def _nearest_arc(xy: np.ndarray, arc: np.ndarray, point: tuple[float, float]) -> float:
    """Arc length of the point on the polyline xy [N, 2] nearest `point`."""
    a, b = xy[:-1], xy[1:]
    ab = b - a
    seg = np.maximum(np.einsum("ij,ij->i", ab, ab), 1e-12)
    u = np.clip(np.einsum("ij,ij->i", np.asarray(point) - a, ab) / seg, 0.0, 1.0)
    q = a + u[:, None] * ab
    i = int(np.argmin(np.hypot(q[:, 0] - point[0], q[:, 1] - point[1])))
    return float(arc[i] + u[i] * (arc[i + 1] - arc[i]))


class TrajectoryTracker:
    def __init__(self, cfg: TrackingConfig | None = None) -> None:
        self.cfg = cfg or TrackingConfig()

    def fallback(self, ego: EgoState) -> tuple[float, float]:
        """Brake to a stop with the wheel held (no valid plan)."""
        return (-self.cfg.fallback_decel if ego.v > 0 else 0.0), ego.steer

    def usable(self, plan: WorldPlan | None, t: float) -> bool:
        return plan is not None and t - plan.t0 <= self.cfg.max_plan_age_s

    def command(self, ego: EgoState, t: float, plan: WorldPlan | None) -> tuple[float, float]:
        """(acceleration, steering angle) for the ego at time t."""
        if not self.usable(plan, t):
            return self.fallback(ego)
        cfg = self.cfg
        arc = plan.arc
        s_ego = _nearest_arc(plan.xy, arc, (ego.x, ego.y))
        v_ref = plan_speed(plan, t + cfg.speed_preview_s)
        s_plan_now = float(np.interp(t, plan.times, arc))
        v_cmd = max(v_ref + cfg.position_gain * (s_plan_now - s_ego), 0.0)
        if v_ref < cfg.stop_speed and arc[-1] - s_ego < 1.0:
            v_cmd = 0.0
        accel = (v_cmd - ego.v) / cfg.speed_time_constant_s
        if v_cmd > 0.0:
            accel += cfg.accel_feedforward * plan_accel(plan, t + cfg.speed_preview_s)
        s_stop = plan_stop_arc(plan, t, cfg.stop_speed, cfg.stop_window_s)
        if s_stop is not None and s_stop > s_ego:
            stopping_decel = ego.v ** 2 / (2.0 * (s_stop - s_ego))
            if stopping_decel > cfg.stop_point_decel:
                accel = min(accel, -stopping_decel)
        elif s_stop is not None:
            v_cmd = 0.0
        if v_cmd == 0.0 and ego.v < cfg.stop_speed:
            accel = -cfg.max_decel
        accel = float(np.clip(accel, -cfg.max_decel, cfg.max_accel))
        return accel, self._pure_pursuit(ego, plan, arc, s_ego)

    def _pure_pursuit(self, ego: EgoState, plan: WorldPlan, arc: np.ndarray,
                      s_ego: float) -> float:
        cfg = self.cfg
        lookahead = float(np.clip(cfg.lookahead_base + cfg.lookahead_gain * ego.v,
                                  cfg.lookahead_min, cfg.lookahead_max))
        if arc[-1] - s_ego < 0.5:
            return ego.steer
        s_target = s_ego + lookahead
        if s_target <= arc[-1]:
            tx = float(np.interp(s_target, arc, plan.xy[:, 0]))
            ty = float(np.interp(s_target, arc, plan.xy[:, 1]))
        else:
            heading = plan.xy[-1] - plan.xy[-2]
            heading = heading / max(float(np.hypot(*heading)), 1e-9)
            tx, ty = plan.xy[-1] + heading * (s_target - arc[-1])
        dx, dy = tx - ego.x, ty - ego.y
        c, s = math.cos(ego.yaw), math.sin(ego.yaw)
        lx, ly = c * dx + s * dy, -s * dx + c * dy
        dist = max(math.hypot(lx, ly), 1e-3)
        steer = math.atan2(2.0 * WHEELBASE * ly / dist, dist)
        return float(np.clip(steer, -MAX_STEER, MAX_STEER))
