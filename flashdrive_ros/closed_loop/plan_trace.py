"""Each plan the controller followed in a closed-loop drive, next to the state it was made
from: the ego's speed and offset from its lane centre, the gap to the vehicle ahead in its
lane and that vehicle's speed, the next stop line ahead and its light, the next tight bend
ahead of the front bumper and its side,
how far, how fast and how far beside the lane centre the plan goes, and its
chain-of-causation. Written as CSV (`flashdrive-drive --plan-trace`)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from flashdrive_ros.closed_loop.controller import plan_speed
from flashdrive_ros.closed_loop.metrics import (ROW_LEAD_GAP, ROW_LEAD_SPEED, ROW_ROUTE_D,
                                                ROW_ROUTE_S, ROW_SPEED, ROW_T)
from flashdrive_ros.closed_loop.runner import DriveResult
from flashdrive_ros.sim.bends import bend_ahead
from flashdrive_ros.sim.vehicle import FRONT_OFFSET
from flashdrive_ros.sim.world import EGO_LANE_D

FIELDS = ("t0", "ready_at", "ego_speed_mps", "route_s", "lane_offset_m", "lead_gap_m",
          "lead_speed_mps", "stop_line_ahead_m", "light", "plan_distance_m", "plan_speed_1s",
          "plan_speed_3s", "plan_speed_end", "plan_offset_1s", "plan_offset_3s", "plan_offset_end",
          "bend_ahead_m", "bend_side", "coc")
LIGHT_RANGE_M = 80.0
LIGHT_BEHIND_M = 10.0
OFFSET_SEARCH_M = 120.0  # route stretch searched around base_link for a plan point


def lane_offset(route, xy: np.ndarray, near_s: float) -> float:
    """Offset (m, left positive) of point xy from the ego lane's centre, searched within
    OFFSET_SEARCH_M of route arc length near_s."""
    return float(route.project(xy, hint=near_s, window=OFFSET_SEARCH_M)[1]) - EGO_LANE_D


def plan_offset(plan, route, near_s: float, t: float) -> float:
    """The plan's offset from the lane centre at time t (its last point past its end)."""
    k = min(int(np.searchsorted(plan.times, t - 1e-9)), len(plan.times) - 1)
    return lane_offset(route, plan.xy[k], near_s)


def _rounded(value: float, digits: int) -> float | str:
    """value rounded, "" for nan (no such thing)."""
    return "" if np.isnan(value) else round(float(value), digits)


def plan_trace(result: DriveResult) -> list[dict]:
    """One row per applied plan (FIELDS); the light is the nearest stop line between
    LIGHT_BEHIND_M behind base_link and LIGHT_RANGE_M ahead, its state at t0 ("" when none);
    the bend is sim/bends.py's next tight bend from the front bumper ("" when none)."""
    rows = result.rows
    lights = result.world.lights()
    route = result.world.route
    out = []
    for plan in result.plans:
        i = min(int(np.searchsorted(rows[:, ROW_T], plan.t0 - 1e-9)), len(rows) - 1)
        route_s = float(rows[i, ROW_ROUTE_S])
        bend_gap, bend_side = bend_ahead(route, route_s + FRONT_OFFSET)
        near = min(((light.stop_s - route_s, light) for light in lights
                    if -LIGHT_BEHIND_M < light.stop_s - route_s < LIGHT_RANGE_M),
                   key=lambda item: abs(item[0]), default=None)
        out.append({
            "t0": round(plan.t0, 3), "ready_at": round(plan.ready_at, 3),
            "ego_speed_mps": round(float(rows[i, ROW_SPEED]), 3),
            "route_s": round(route_s, 2),
            "lane_offset_m": round(float(rows[i, ROW_ROUTE_D]) - EGO_LANE_D, 3),
            "lead_gap_m": _rounded(rows[i, ROW_LEAD_GAP], 2),
            "lead_speed_mps": _rounded(rows[i, ROW_LEAD_SPEED], 3),
            "stop_line_ahead_m": round(float(near[0]), 2) if near else "",
            "light": near[1].state(plan.t0) if near else "",
            "plan_distance_m": round(float(plan.arc[-1]), 2),
            "plan_speed_1s": round(plan_speed(plan, plan.t0 + 1.0), 3),
            "plan_speed_3s": round(plan_speed(plan, plan.t0 + 3.0), 3),
            "plan_speed_end": round(plan_speed(plan, float(plan.times[-1])), 3),
            "plan_offset_1s": round(plan_offset(plan, route, route_s, plan.t0 + 1.0), 3),
            "plan_offset_3s": round(plan_offset(plan, route, route_s, plan.t0 + 3.0), 3),
            "plan_offset_end": round(plan_offset(plan, route, route_s, float(plan.times[-1])),
                                     3),
            "bend_ahead_m": _rounded(bend_gap, 1), "bend_side": _rounded(bend_side, 0),
            "coc": plan.coc})
    return out


def write_plan_trace(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
