"""Where a lead-stop fork (sim/lead_stops.py) may place its car in a drive: frames where the
ego drives on a clear straight stretch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from flashdrive_ros.sim.drive import FRAME_HZ, HISTORY_STEPS, DriveLog
from flashdrive_ros.sim.world import EGO_LANE_D, LANE_WIDTH

if TYPE_CHECKING:
    from flashdrive_ros.sim.lead_stops import LeadStop

SETTLE_FRAMES = 5  # frames from the placing to the first window (no window sees it appear)
STRAIGHT_CURVATURE = 1.0 / 400.0  # 1/m: the stretch up to the car is straighter than this
CLEAR_BEYOND_M = 40.0  # m past the car kept free of lights, crosswalks and other traffic
MIN_SPEED_MPS = 4.0  # m/s: the ego drives at least this fast where a car is placed
MIN_FORK_S = 12.0  # s of drive left after a placing frame


def placing_frames(log: DriveLog, stop: LeadStop) -> list[int]:
    """Frames of a drive where the stop's car may be placed (its frame aside): the ego drives
    at MIN_SPEED_MPS or more, the first window would come after HISTORY_STEPS frames, and the
    lane up to CLEAR_BEYOND_M past the car is straight and clear of lights, crosswalks,
    parked cars to pass and other traffic."""
    world = log.world
    stops = np.array([lt.stop_s for lt in world.lights()] + [c.s for c in world.crosswalks])
    frames = []
    first = max(HISTORY_STEPS - 1 - SETTLE_FRAMES, 0)
    for k in range(first, log.frame_count - int(round(MIN_FORK_S * FRAME_HZ))):
        info = log.infos[k]
        if info.v < MIN_SPEED_MPS or info.reason != "free":
            continue
        gap = stop.gap_m(min(info.v, stop.speed_mps))
        near, far = info.front_s, info.front_s + gap + CLEAR_BEYOND_M
        if far > world.route.length or (stops.size and np.any((stops > near - 5.0)
                                                             & (stops < far))):
            continue
        ahead = np.linspace(near, far, 24)
        if np.abs(world.route.curvature_at(ahead)).max() > STRAIGHT_CURVATURE:
            continue
        if info.nudge_now > 0.0 or info.nudge_ahead > 0.0 or _traffic_ahead(log, k, near, far):
            continue
        frames.append(k)
    return frames


def _traffic_ahead(log: DriveLog, k: int, near: float, far: float) -> bool:
    """Whether a moving vehicle is in or near the ego lane between route arc lengths near and
    far at frame k."""
    route = log.world.route
    for box in log.scenes[k].boxes:
        if box.kind in ("parked", "pedestrian"):
            continue
        s, d = route.project((box.x, box.y), hint=near, window=far - near + 20.0)
        if near - 10.0 < s < far + 10.0 and abs(d - EGO_LANE_D) < LANE_WIDTH:
            return True
    return False
