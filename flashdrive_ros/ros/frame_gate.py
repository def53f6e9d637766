"""Which camera frames the drive node decodes, decided from the stamp alone: those on the
model's frame grid. Cameras faster than the model's frame rate (30 Hz against 10 Hz) send
frames that no window takes; they are dropped before they cost a decode."""

from __future__ import annotations

import math
from collections import deque

PERIODS_KEPT = 8
EPSILON_S = 1e-6


class FrameGate:
    """The grid: camera 0's newest frame taken on it, plus whole frame periods `frame_dt`.
    A camera's frame is taken when it is the camera's frame nearest a grid time (within
    `tolerance` and half the camera's period), or, when that frame was lost, the first frame
    after the grid time within `tolerance`; the rest are dropped. A camera not faster than
    the frame rate, a first frame and a stamp more than `max_jump` from the grid (a restart)
    are taken. Per-camera calls must come in arrival order; not thread-safe across cameras
    (the caller serializes)."""

    def __init__(self, camera_count: int, frame_dt: float, tolerance: float,
                 max_jump: float) -> None:
        if camera_count < 1 or not frame_dt > 0 or not 0 <= tolerance < frame_dt / 2:
            raise ValueError(f"FrameGate needs camera_count >= 1, frame_dt > 0 and 0 <= "
                             f"tolerance < frame_dt / 2, got {camera_count}, {frame_dt}, "
                             f"{tolerance}")
        self.camera_count = camera_count
        self.frame_dt = frame_dt
        self.tolerance = tolerance
        self.max_jump = max_jump
        self.dropped = [0] * camera_count
        self.reset()

    def reset(self) -> None:
        """Forget the grid and the camera periods (a restarted time base)."""
        self._anchor = math.nan
        self._last_seen = [-math.inf] * self.camera_count
        self._periods: list[deque[float]] = [deque(maxlen=PERIODS_KEPT)
                                             for _ in range(self.camera_count)]
        self._taken_grid = [math.nan] * self.camera_count

    def period(self, camera: int) -> float | None:
        """The camera's frame period: the median of its recent stamp differences."""
        periods = sorted(self._periods[camera])
        return periods[len(periods) // 2] if periods else None

    def take(self, camera: int, stamp: float) -> bool:
        """Whether the frame of `camera` stamped `stamp` is decoded; a dropped one is counted
        in `dropped`."""
        if stamp > self._last_seen[camera]:
            if math.isfinite(self._last_seen[camera]):
                self._periods[camera].append(stamp - self._last_seen[camera])
            self._last_seen[camera] = stamp
        period = self.period(camera)
        if (period is None or period >= self.frame_dt - self.tolerance
                or not abs(stamp - self._anchor) <= self.max_jump):
            self._mark(camera, stamp, stamp)
            return True
        steps = round((stamp - self._anchor) / self.frame_dt)
        grid = self._anchor + steps * self.frame_dt
        offset = stamp - grid
        if abs(offset) <= min(self.tolerance, period / 2) + EPSILON_S:
            self._mark(camera, stamp, grid)
            return True
        if 0 < offset <= self.tolerance and not abs(self._taken_grid[camera] - grid) \
                < self.frame_dt / 2:
            self._taken_grid[camera] = grid
            return True
        self.dropped[camera] += 1
        return False

    def _mark(self, camera: int, stamp: float, grid: float) -> None:
        """A frame nearest its grid time taken; camera 0's moves the grid to its stamp."""
        self._taken_grid[camera] = grid
        if camera == 0:
            self._anchor = stamp
