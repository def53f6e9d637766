"""What the planner saw and planned around each collision of a drive.

`before`: the plan the controller followed LOOKBACK_S before the contact (from the drive's
plan trace) with the ego's speed, the gap to the vehicle ahead and its speed, the plan's speed
3 s ahead and its CoC. A lead collision whose plan named the car but kept its speed reads
differently from one where the lead cut in too close to stop.

`at_contact`: the plan in force at the contact, where it meant the car to be then: the gap
between the ego's box at that pose and what it hit (negative: the plan itself runs into it)
and how far the car's base_link stood from it (tracking error). A plan that clears the object
while the car does not is the controller's fault; a plan that overlaps it, the planner's."""

from __future__ import annotations

import math

import numpy as np

from flashdrive_ros.closed_loop.controller import WorldPlan
from flashdrive_ros.sim.rectangles import gap, rectangle
from flashdrive_ros.sim.vehicle import CENTER_OFFSET, EGO_LENGTH, EGO_WIDTH, EgoState

LOOKBACK_S = 2.0
FIELDS = ("t0", "ego_speed_mps", "lead_gap_m", "lead_speed_mps", "plan_speed_3s", "coc")
STANDING_STEP_M = 1e-3  # plan segments shorter than this give no heading


def plan_pose(plan: WorldPlan, t: float, fallback_yaw: float) -> tuple[float, float, float]:
    """(x, y, yaw) of base_link on the plan at time t (its last point past its end); the yaw
    of the last segment up to t that moves, fallback_yaw where none does."""
    x = float(np.interp(t, plan.times, plan.xy[:, 0]))
    y = float(np.interp(t, plan.times, plan.xy[:, 1]))
    steps = np.diff(plan.xy, axis=0)  # steps: [N - 1, 2]
    k = min(int(np.searchsorted(plan.times, t, side="right")), len(steps))
    moving = np.flatnonzero(np.hypot(*steps[:k].T) > STANDING_STEP_M)
    if len(moving) == 0:
        return x, y, fallback_yaw
    dx, dy = steps[moving[-1]]
    return x, y, math.atan2(dy, dx)


def at_contact(event: dict, plans: list[WorldPlan]) -> dict | None:
    """{"plan_clearance_m", "tracking_error_m"} of the plan in force at the event's time (the
    last plan ready by then); None without one."""
    ready = [plan for plan in plans if plan.ready_at <= event["t"] + 1e-9]
    if not ready:
        return None
    yaw = event["yaw"]
    x, y, plan_yaw = plan_pose(ready[-1], event["t"], yaw)
    box = rectangle(*EgoState(x, y, plan_yaw, 0.0).center, plan_yaw, EGO_LENGTH, EGO_WIDTH)
    car_x = event["x"] - CENTER_OFFSET * math.cos(yaw)
    car_y = event["y"] - CENTER_OFFSET * math.sin(yaw)
    return {"plan_clearance_m": round(gap(box, np.asarray(event["other_box"])), 3),
            "tracking_error_m": round(math.hypot(car_x - x, car_y - y), 3)}


def collision_context(events: list[dict], trace: list[dict], plans: list[WorldPlan],
                      lookback_s: float = LOOKBACK_S) -> list[dict]:
    """events: DriveMonitor collision events; trace: plan_trace rows (t0 ascending); plans:
    the applied plans in order -> the events, each with "before": FIELDS of the last plan
    made at or before t - lookback_s (None when the drive had no plan by then) and
    "at_contact" (at_contact)."""
    out = []
    for event in events:
        earlier = [row for row in trace if row["t0"] <= event["t"] - lookback_s + 1e-9]
        before = {key: earlier[-1][key] for key in FIELDS} if earlier else None
        out.append({**event, "before": before, "at_contact": at_contact(event, plans)})
    return out
