"""Which camera frames the drive node decodes, decided from the stamp alone: those on the
model's frame grid. Cameras faster than the model's frame rate (30 Hz against 10 Hz) send
frames that no window takes; they are dropped before they cost a decode."""

from __future__ import annotations

import math
from collections import deque
from typing import Generic, TypeVar

PERIODS_KEPT = 8
LOSS_WINDOW = 30
MAX_LOSS = 0.2
EPSILON_S = 1e-6

Item = TypeVar("Item")


class FrameGate(Generic[Item]):
    """The grid: camera 0's newest frame taken nearest its grid time, plus whole frame
    periods `frame_dt`. Per camera and grid time, the frame nearest it is decoded at once
    (within `tolerance` and half the camera's period). The frame before it is held
    (undecoded) until a later frame shows whether the nearest one was lost in transport;
    then the neighbours within `tolerance` on both sides are decoded, so that the camera
    sync can still pair cameras whose nearest frames were lost on opposite sides. The rest
    are dropped (counted in `dropped`). A camera not faster than the frame rate, a first
    frame and a stamp more than `max_jump` from the grid (a restart) are decoded.
    While a camera loses more than `max_loss` of its recent frames in transport (`lossy`),
    every frame is decoded: a camera set is then more often completed by frames off the
    grid than by the few that arrive on it. Per-camera calls must come in arrival order; not
    thread-safe (the caller serializes)."""

    def __init__(self, camera_count: int, frame_dt: float, tolerance: float,
                 max_jump: float, max_loss: float = MAX_LOSS) -> None:
        if camera_count < 1 or not frame_dt > 0 or not 0 <= tolerance < frame_dt / 2:
            raise ValueError(f"FrameGate needs camera_count >= 1, frame_dt > 0 and 0 <= "
                             f"tolerance < frame_dt / 2, got {camera_count}, {frame_dt}, "
                             f"{tolerance}")
        self.camera_count = camera_count
        self.frame_dt = frame_dt
        self.tolerance = tolerance
        self.max_jump = max_jump
        self.max_loss = max_loss
        self.dropped = [0] * camera_count
        self.reset()

    def reset(self) -> None:
        """Forget the grid, the camera periods and the held frames (a restarted time
        base)."""
        self._anchor = math.nan
        self._last_seen = [-math.inf] * self.camera_count
        self._periods: list[deque[float]] = [deque(maxlen=PERIODS_KEPT)
                                             for _ in range(self.camera_count)]
        self._recent: list[deque[float]] = [deque(maxlen=LOSS_WINDOW)
                                            for _ in range(self.camera_count)]
        self._taken_grid = [math.nan] * self.camera_count
        self._held: list[tuple[float, float, Item] | None] = [None] * self.camera_count

    def period(self, camera: int) -> float | None:
        """The camera's frame period: the shortest of its recent stamp differences (frames
        lost in transport only lengthen them)."""
        return min(self._periods[camera], default=None)

    def loss(self, camera: int) -> float:
        """The share of the camera's frames lost in transport over its recent LOSS_WINDOW
        stamps (0 until it has half of them)."""
        stamps, period = self._recent[camera], self.period(camera)
        if len(stamps) < LOSS_WINDOW // 2 or not period:
            return 0.0
        expected = round((stamps[-1] - stamps[0]) / period) + 1
        return max(0.0, 1.0 - len(stamps) / expected)

    def lossy(self) -> tuple[int, float] | None:
        """(camera, loss) of the camera losing the most frames, when beyond max_loss."""
        camera = max(range(self.camera_count), key=self.loss)
        loss = self.loss(camera)
        return (camera, loss) if loss > self.max_loss else None

    def note_seen(self, camera: int, stamp: float) -> None:
        """A frame of `camera` that reached the node but is not offered (dropped by the
        node's own queue, withheld by its video stream): not lost in transport."""
        if stamp > self._last_seen[camera]:
            if math.isfinite(self._last_seen[camera]):
                self._periods[camera].append(stamp - self._last_seen[camera])
            self._last_seen[camera] = stamp
            self._recent[camera].append(stamp)

    def admit(self, camera: int, stamp: float, item: Item) -> list[tuple[float, Item]]:
        """The (stamp, item) pairs of `camera` to decode now, oldest first: a held frame that
        is now known to be its grid time's nearest, and this frame when it is taken."""
        self.note_seen(camera, stamp)
        period = self.period(camera)
        if (period is None or period >= self.frame_dt - self.tolerance
                or not abs(stamp - self._anchor) <= self.max_jump):
            self._held[camera] = None
            self._mark(camera, stamp, stamp)
            return [(stamp, item)]
        grid = self._anchor + round((stamp - self._anchor) / self.frame_dt) * self.frame_dt
        offset = stamp - grid
        out = self._release_before(camera, grid)
        held = self._held[camera]
        taken = abs(self._taken_grid[camera] - grid) < self.frame_dt / 2
        nearest = abs(offset) <= min(self.tolerance, period / 2) + EPSILON_S
        if self.lossy() is not None:
            self._held[camera] = None
            if held is not None:
                out.append((held[0], held[2]))
            if nearest:
                self._mark(camera, stamp, grid)
            return [*out, (stamp, item)]
        if nearest:
            self._drop_held(camera)
            self._mark(camera, stamp, grid)
            return [*out, (stamp, item)]
        if taken or abs(offset) > self.tolerance:
            self.dropped[camera] += 1
            return out
        if offset < 0:
            self._drop_held(camera)
            self._held[camera] = (stamp, grid, item)
            return out
        self._taken_grid[camera] = grid
        self._held[camera] = None
        if held is not None:
            out.append((held[0], held[2]))
        return [*out, (stamp, item)]

    def _release_before(self, camera: int, grid: float) -> list[tuple[float, Item]]:
        """The held frame of an earlier grid time, none nearer having come."""
        held = self._held[camera]
        if held is None or held[1] > grid - self.frame_dt / 2:
            return []
        self._held[camera] = None
        self._taken_grid[camera] = held[1]
        return [(held[0], held[2])]

    def _drop_held(self, camera: int) -> None:
        if self._held[camera] is not None:
            self._held[camera] = None
            self.dropped[camera] += 1

    def _mark(self, camera: int, stamp: float, grid: float) -> None:
        """A frame nearest its grid time taken; camera 0's moves the grid to its stamp."""
        self._taken_grid[camera] = grid
        if camera == 0:
            self._anchor = stamp
