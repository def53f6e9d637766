"""Longitudinal driving rules shared by the ego expert and the other vehicles.

IDM (intelligent driver model) acceleration against a list of obstacles ahead on the
driver's own path, a curve-speed preview, and the stop rules for traffic lights and
crossing pedestrians.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from flashdrive_ros.sim.path import Path


@dataclass(frozen=True)
class IdmParams:
    a_max: float = 1.6
    b_comf: float = 2.0
    b_max: float = 6.0
    headway: float = 1.3
    s0: float = 2.5
    delta: float = 4.0
    lateral_accel: float = 2.0
    preview: float = 60.0
    stop_margin: float = 1.0

    def __post_init__(self) -> None:
        if min(self.a_max, self.b_comf, self.b_max, self.headway, self.s0,
               self.lateral_accel, self.preview) <= 0:
            raise ValueError("IDM parameters must be positive")


@dataclass(frozen=True)
class Obstacle:
    """Something ahead on the driver's path: gap from the front bumper, its speed, why."""

    gap: float
    speed: float
    reason: str
    ref: object = None


@lru_cache(maxsize=8)
def _preview_offsets(preview: float) -> np.ndarray:
    """[P] read-only arc length offsets (m) of the curve-speed preview."""
    ahead = np.arange(0.0, preview, 2.0)
    ahead.flags.writeable = False
    return ahead


def curve_speed_limit(path: Path, s: float, v_cruise: float, p: IdmParams) -> float:
    """Highest speed at s that still allows slowing to every curve's speed within the preview."""
    ahead = _preview_offsets(p.preview)
    kappa = np.abs(path.curvature_at(s + ahead))
    v_curve = np.sqrt(p.lateral_accel / np.maximum(kappa, 1e-6))
    v_allowed = np.sqrt(v_curve ** 2 + 2.0 * 0.8 * p.b_comf * ahead)
    return float(min(v_cruise, v_allowed.min()))


def idm_accel(v: float, v_des: float, obstacles: list[Obstacle], p: IdmParams):
    """(acceleration, binding obstacle or None, free-road acceleration)."""
    free = max(p.a_max * (1.0 - (v / max(v_des, 0.1)) ** p.delta), -1.5 * p.b_comf)
    worst, binding = 0.0, None
    for ob in obstacles:
        dv = v - ob.speed
        s_star = p.s0 + max(0.0, v * p.headway + v * dv / (2.0 * np.sqrt(p.a_max * p.b_comf)))
        term = p.a_max * (s_star / max(ob.gap, 0.2)) ** 2
        if term > worst:
            worst, binding = term, ob
    accel = float(min(max(free - worst, -p.b_max), p.a_max))
    if binding is not None and binding.speed < 0.1 and binding.gap < p.s0 + 1.0 and v > 0:
        accel = min(accel, -min(p.b_max, v / 0.5))
    return accel, binding, free


def stop_line_obstacle(gap_to_line: float, v: float, light_state: str, p: IdmParams,
                       committed: bool, stop_margin: float | None = None) -> Obstacle | None:
    """A standing obstacle at a stop line for red / yellow, unless past it or unable to stop.

    gap_to_line: distance from the front bumper to the stop line. committed: the driver
    already decided to stop for this light (keeps the decision stable while braking).
    stop_margin: where the front bumper comes to rest short of the line (default
    p.stop_margin).
    """
    if light_state == "green" or gap_to_line < -0.5:
        return None
    needed = v * v / (2.0 * max(gap_to_line, 0.1))
    limit = p.b_max if light_state == "red" else 3.5
    if needed > limit and not committed:
        return None
    margin = p.stop_margin if stop_margin is None else stop_margin
    return Obstacle(gap_to_line - margin + p.s0, 0.0, f"{light_state}_light")


def pedestrian_blocks(d_ped: float, vd_ped: float, d_lane: float, half_width: float,
                      horizon: float = 6.0) -> bool:
    """True when a pedestrian is in the driver's corridor or walks into it within horizon."""
    corridor = half_width + 1.0
    rel = d_ped - d_lane
    if abs(rel) < corridor:
        return True
    moving_in = rel * vd_ped < 0
    if not moving_in or abs(vd_ped) < 1e-3:
        return False
    return (abs(rel) - corridor) / abs(vd_ped) < horizon
