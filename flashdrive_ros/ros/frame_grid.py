"""The frame grid of the last planned window (its t0 plus whole frame periods): windows on
it share frames with that window and stream instead of a full prefill."""

from __future__ import annotations

import math

import numpy as np

from flashdrive_ros.engine.window import WindowBuilder


class FrameGrid:
    """Which camera sets and window times lie on the grid of `planned_t0`; not thread-safe
    (the planner loop calls it under its lock)."""

    def __init__(self, builder: WindowBuilder) -> None:
        self.builder = builder
        self._handed_t0 = -np.inf
        self._last_set_stamp = -np.inf

    def hands_on(self, stamp: float, planned_t0: float) -> bool:
        """Whether a camera set stamped `stamp` (camera 0) is worth encoding ahead: the set
        nearest a grid time (within the frame tolerance and half the camera's period), or
        before the first plan a set at least a frame period after the last one handed on."""
        dt, tolerance = self.builder.frame_dt, self.builder.limits.frame_tolerance
        period, self._last_set_stamp = stamp - self._last_set_stamp, stamp
        reach = min(tolerance, period / 2) if period > 0 else tolerance
        if np.isfinite(planned_t0) and stamp > planned_t0:
            steps = (stamp - planned_t0) / dt
            chosen = abs(steps - round(steps)) * dt <= reach + 1e-9
        else:
            chosen = not stamp - dt + reach < self._handed_t0 <= stamp
        if chosen:
            self._handed_t0 = stamp
        return chosen

    def window_t0(self, t0: float, planned_t0: float) -> float:
        """The window time to plan instead of the newest `t0`: the newest grid time that
        still shares a frame with the planned window (its nearest frame, else the newest
        window not after it); `t0` itself once the grid is out of reach."""
        builder = self.builder
        steps = math.floor((t0 - planned_t0 + builder.limits.frame_tolerance)
                           / builder.frame_dt)
        if steps > builder.num_frames:
            return t0
        grid = planned_t0 + min(steps, builder.num_frames - 1) * builder.frame_dt
        near = builder.frame_near(grid)
        return near if near is not None and near <= t0 else builder.latest_t0(not_after=grid)
