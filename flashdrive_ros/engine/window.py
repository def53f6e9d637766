"""Sliding window of camera frames and ego odometry -> model input `Window` at time t0."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from flashdrive_ros.engine.types import Window

REJECTION_CODES = (
    "missing_camera", "too_few_frames", "frame_gap", "stale_images", "stale_odometry",
    "odometry_short", "odometry_gap", "nonfinite", "image_size", "time_backwards",
    "time_jump",
)
# largest |odometry position or velocity component| (m, m/s) taken as valid: float64 still
# resolves 0.2 mm there, map-scale and epoch-scale coordinates pass, nothing downstream overflows
MAX_ODOMETRY_MAGNITUDE = 1e12
# time-base resets kept for the builds that report them; beyond it the oldest are dropped
MAX_PENDING_RESETS = 8


@dataclass(frozen=True)
class WindowRejection:
    """Why no window could be built. `time_base_reset`: the caller must drop streaming state."""

    reason: str
    code: str
    time_base_reset: bool = False

    def __post_init__(self) -> None:
        if self.code not in REJECTION_CODES:
            raise ValueError(f"unknown rejection code {self.code!r}")


@dataclass
class WindowLimits:
    """Tolerances in seconds.

    frame_tolerance: max |frame stamp - wanted frame time|; below frame_dt / 2.
    frame_stand_in: where a camera has no frame within frame_tolerance of a wanted time (a
        frame dropped in transport), its nearest frame within this distance stands in
        (counted in `WindowBuilder.stand_ins`); beyond it, the window is refused.
    max_odometry_extrapolation: how far t0 may lie past the newest odometry sample.
    max_odometry_gap: largest allowed spacing of odometry samples inside the history span.
    max_time_jump: a stamp this far past everything seen so far restarts the time base.
    max_reorder: a stamp at most this far behind its stream's newest is a late (reordered)
        message and is dropped; further back, the time base restarts (e.g. a bag loop).
    keep_seconds: extra buffer kept beyond what one window needs.
    """

    frame_tolerance: float = 0.04
    frame_stand_in: float = 0.15
    max_odometry_extrapolation: float = 0.06
    max_odometry_gap: float = 0.25
    max_time_jump: float = 1.0
    max_reorder: float = 0.5
    keep_seconds: float = 0.5

    def __post_init__(self) -> None:
        for name in ("frame_tolerance", "frame_stand_in", "max_odometry_extrapolation",
                     "max_odometry_gap", "max_time_jump", "max_reorder", "keep_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"WindowLimits.{name} must be finite and >= 0, got {value}")
        if self.max_odometry_gap <= 0 or self.max_time_jump <= 0:
            raise ValueError("max_odometry_gap and max_time_jump must be > 0")
        if self.frame_stand_in > self.keep_seconds:
            raise ValueError(f"WindowLimits.frame_stand_in {self.frame_stand_in} exceeds "
                             f"keep_seconds {self.keep_seconds} (the frames kept beyond a "
                             f"window)")


@dataclass
class _Odometry:
    stamp: float
    position: np.ndarray  # [3]
    quaternion: np.ndarray  # [4] xyzw, unit
    speed: float
    finite: bool


def _quat_normalize(q: np.ndarray) -> np.ndarray:
    return q / np.linalg.norm(q)


def _slerp(q0: np.ndarray, q1: np.ndarray, u: float) -> np.ndarray:
    """q0, q1: [4] unit xyzw; u may exceed 1 slightly (extrapolation)."""
    dot = float(np.dot(q0, q1))
    if dot < 0.0:
        q1, dot = -q1, -dot
    dot = min(dot, 1.0)
    theta = math.acos(dot)
    if theta < 1e-9:
        return _quat_normalize(q0 + u * (q1 - q0))
    s = math.sin(theta)
    return _quat_normalize((math.sin((1.0 - u) * theta) * q0 + math.sin(u * theta) * q1) / s)


def _quat_to_matrix(q: np.ndarray) -> np.ndarray:
    x, y, z, w = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


class WindowBuilder:
    """Keeps the last frames per camera and the odometry, and assembles `Window`s.

    Frames for a window at t0 are the stored frames nearest t0 - (num_frames - 1 - i) * frame_dt
    (within `limits.frame_tolerance`). The ego history is `num_history` poses spaced
    `history_dt` ending at t0, interpolated from odometry (linear position, quaternion slerp)
    and expressed in the t0 ego frame (x forward, y left, z up), yaw unwrapped; speed is the
    norm of the odometry linear velocity at t0. Images are kept by reference.

    A stamp at most `limits.max_reorder` behind its stream's newest is dropped (counted in
    `late_dropped`). A stamp that goes further backwards in any stream, or jumps forward by
    more than `limits.max_time_jump`, clears all buffers; the next `build` returns a rejection
    with `time_base_reset=True` (each reset its own, in order), and the next built Window has
    `time_base_reset=True`.
    """

    def __init__(self, camera_count: int, num_frames: int = 4, frame_dt: float = 0.1,
                 num_history: int = 16, history_dt: float = 0.1,
                 limits: WindowLimits | None = None) -> None:
        if camera_count < 1 or num_frames < 1 or num_history < 2:
            raise ValueError("need camera_count >= 1, num_frames >= 1, num_history >= 2")
        if not (frame_dt > 0 and history_dt > 0):
            raise ValueError("frame_dt and history_dt must be > 0")
        self.limits = limits or WindowLimits()
        if num_frames > 1 and self.limits.frame_tolerance >= frame_dt / 2:
            raise ValueError(f"frame_tolerance {self.limits.frame_tolerance} must be below "
                             f"frame_dt / 2 = {frame_dt / 2}")
        self.camera_count = camera_count
        self.num_frames = num_frames
        self.frame_dt = frame_dt
        self.num_history = num_history
        self.history_dt = history_dt
        self._frames: list[deque[tuple[float, np.ndarray]]] = [
            deque() for _ in range(camera_count)]
        self._odometry: deque[_Odometry] = deque()
        self._newest_stamp = -math.inf
        self._pending: deque[WindowRejection] = deque(maxlen=MAX_PENDING_RESETS)
        self._time_base_reset = False
        self._sequence = 0
        self.late_dropped = 0
        self.stand_ins = 0

    @property
    def time_base_reset_pending(self) -> bool:
        """True from a time-base reset until the next built Window carries it."""
        return self._time_base_reset

    def add_image(self, camera: int, stamp: float, rgb: np.ndarray) -> None:
        """rgb: uint8 [H, W, 3]."""
        if not 0 <= camera < self.camera_count:
            raise ValueError(f"camera index {camera} outside [0, {self.camera_count})")
        if not (isinstance(rgb, np.ndarray) and rgb.dtype == np.uint8 and rgb.ndim == 3
                and rgb.shape[2] == 3):
            raise ValueError(f"image must be uint8 [H, W, 3], got "
                             f"{getattr(rgb, 'dtype', type(rgb))} {getattr(rgb, 'shape', '')}")
        stamp = float(stamp)
        if not math.isfinite(stamp):
            self._note(WindowRejection(f"camera {camera} image stamp is {stamp}", "nonfinite"))
            return
        frames = self._frames[camera]
        if frames and stamp == frames[-1][0]:
            frames[-1] = (stamp, rgb)
            return
        if frames and frames[-1][0] - self.limits.max_reorder <= stamp < frames[-1][0]:
            self.late_dropped += 1
            return
        if frames and stamp < frames[-1][0]:
            self._reset_time_base(WindowRejection(
                f"camera {camera} stamp went backwards {frames[-1][0]:.6f} -> {stamp:.6f}",
                "time_backwards", True))
        self._check_forward_jump(stamp, f"camera {camera}")
        self._frames[camera].append((stamp, rgb))
        self._advance(stamp)

    def add_odometry(self, stamp: float, position, quaternion, linear_velocity) -> None:
        """position [3] (world), quaternion [4] xyzw (world from body), linear_velocity [3].
        A sample with NaN/inf, a magnitude beyond MAX_ODOMETRY_MAGNITUDE or a zero quaternion
        is kept but marks windows whose history spans it as `nonfinite`."""
        position = np.asarray(position, dtype=np.float64).reshape(-1)
        quaternion = np.asarray(quaternion, dtype=np.float64).reshape(-1)
        velocity = np.asarray(linear_velocity, dtype=np.float64).reshape(-1)
        if position.shape != (3,) or quaternion.shape != (4,) or velocity.shape != (3,):
            raise ValueError("odometry needs position [3], quaternion [4] xyzw, velocity [3]")
        stamp = float(stamp)
        if not math.isfinite(stamp):
            self._note(WindowRejection(f"odometry stamp is {stamp}", "nonfinite"))
            return
        norm = float(np.linalg.norm(quaternion))
        finite = bool(np.isfinite(position).all() and np.isfinite(velocity).all()
                      and max(np.abs(position).max(), np.abs(velocity).max())
                      <= MAX_ODOMETRY_MAGNITUDE and math.isfinite(norm) and norm > 1e-6)
        if finite:
            quaternion = quaternion / norm
        sample = _Odometry(stamp, position, quaternion, float(np.linalg.norm(velocity)), finite)
        if self._odometry and stamp == self._odometry[-1].stamp:
            self._odometry[-1] = sample
            return
        newest = self._odometry[-1].stamp if self._odometry else -math.inf
        if newest - self.limits.max_reorder <= stamp < newest:
            self.late_dropped += 1
            return
        if self._odometry and stamp < self._odometry[-1].stamp:
            self._reset_time_base(WindowRejection(
                f"odometry stamp went backwards {self._odometry[-1].stamp:.6f} -> {stamp:.6f}",
                "time_backwards", True))
        self._check_forward_jump(stamp, "odometry")
        self._odometry.append(sample)
        self._advance(stamp)

    def latest_t0(self, not_after: float = math.inf) -> float | None:
        """The newest time, not after `not_after`, at which every camera has a frame and the
        odometry reaches (within `limits.max_odometry_extrapolation`), or None if a camera
        has no frame. When no frame time qualifies, the newest frame time: its window is
        refused (stale_odometry when the odometry is behind)."""
        if any(not frames for frames in self._frames):
            return None
        newest = min(frames[-1][0] for frames in self._frames)
        limit = not_after + self.limits.frame_tolerance
        if self._odometry:
            limit = min(limit, self._odometry[-1].stamp + self.limits.max_odometry_extrapolation)
        if newest <= limit:
            return newest
        covered = [stamp for stamp, _ in self._frames[0] if stamp <= limit]
        return covered[-1] if covered else newest

    def frame_near(self, t: float) -> float | None:
        """Camera 0's frame stamp nearest `t`, when within `limits.frame_tolerance`."""
        frames = self._frames[0]
        if not frames:
            return None
        stamp = min((s for s, _ in frames), key=lambda s: abs(s - t))
        return stamp if abs(stamp - t) <= self.limits.frame_tolerance else None

    def odometry_reaches(self, t: float) -> bool:
        """True when an odometry sample is stamped at or after `t`."""
        return bool(self._odometry) and self._odometry[-1].stamp >= t

    def build(self, t0: float) -> Window | WindowRejection:
        if self._pending:
            return self._pending.popleft()
        t0 = float(t0)
        if not math.isfinite(t0):
            return WindowRejection(f"t0 is {t0}", "nonfinite")
        images = self._select_frames(t0)
        if isinstance(images, WindowRejection):
            return images
        frames, stamps, stand_ins = images
        history = self._ego_history(t0)
        if isinstance(history, WindowRejection):
            return history
        self.stand_ins += stand_ins
        ego_history, speed = history
        self._sequence += 1
        window = Window(t0=t0, images=frames, image_stamps=stamps, ego_history=ego_history,
                        speed=speed, sequence=self._sequence,
                        time_base_reset=self._time_base_reset)
        self._time_base_reset = False
        return window

    def _note(self, rejection: WindowRejection) -> None:
        """Keep rejections for the next builds, one per build in arrival order: every
        time-base reset (the newest MAX_PENDING_RESETS), or one other rejection while
        nothing is pending."""
        if rejection.time_base_reset:
            if self._pending and not self._pending[0].time_base_reset:
                self._pending.clear()
            self._pending.append(rejection)
        elif not self._pending:
            self._pending.append(rejection)

    def _reset_time_base(self, rejection: WindowRejection) -> None:
        for frames in self._frames:
            frames.clear()
        self._odometry.clear()
        self._newest_stamp = -math.inf
        self._time_base_reset = True
        self._note(rejection)

    def _check_forward_jump(self, stamp: float, stream: str) -> None:
        if math.isfinite(self._newest_stamp) and \
                stamp - self._newest_stamp > self.limits.max_time_jump:
            self._reset_time_base(WindowRejection(
                f"{stream} stamp jumped forward {stamp - self._newest_stamp:.3f} s "
                f"(limit {self.limits.max_time_jump} s)", "time_jump", True))

    def _advance(self, stamp: float) -> None:
        self._newest_stamp = max(self._newest_stamp, stamp)
        frame_keep = (self.num_frames - 1) * self.frame_dt + self.limits.frame_tolerance
        odom_keep = (self.num_history - 1) * self.history_dt + self.limits.max_odometry_gap
        oldest_frame = self._newest_stamp - frame_keep - self.limits.keep_seconds
        oldest_odom = self._newest_stamp - odom_keep - self.limits.keep_seconds
        for frames in self._frames:
            while len(frames) > 1 and frames[0][0] < oldest_frame:
                frames.popleft()
        while len(self._odometry) > 2 and self._odometry[1].stamp < oldest_odom:
            self._odometry.popleft()

    def _select_frames(self, t0: float
                       ) -> tuple[np.ndarray, np.ndarray, int] | WindowRejection:
        """(images [C, F, H, W, 3], stamps [C, F], how many frames stood in)."""
        tol, reach = self.limits.frame_tolerance, self.limits.frame_stand_in
        wanted = t0 - self.frame_dt * np.arange(self.num_frames - 1, -1, -1)
        chosen: list[list[np.ndarray]] = []
        stamps = np.zeros((self.camera_count, self.num_frames))
        stand_ins = 0
        for cam, frames in enumerate(self._frames):
            if not frames:
                return WindowRejection(f"camera {cam} has no frames", "missing_camera")
            if len(frames) < self.num_frames:
                return WindowRejection(f"camera {cam} has {len(frames)} frames, need "
                                       f"{self.num_frames}", "too_few_frames")
            cam_stamps = np.array([s for s, _ in frames])
            if cam_stamps[-1] < t0 - max(tol, reach):
                return WindowRejection(f"camera {cam} newest frame {cam_stamps[-1]:.3f} is "
                                       f"{t0 - cam_stamps[-1]:.3f} s older than t0 {t0:.3f}",
                                       "stale_images")
            row = []
            for i, want in enumerate(wanted):
                j = int(np.argmin(np.abs(cam_stamps - want)))
                off = abs(cam_stamps[j] - want)
                if off > max(tol, reach):
                    return WindowRejection(
                        f"camera {cam} has no frame within {max(tol, reach)} s of t0 - "
                        f"{t0 - want:.2f} s (nearest {cam_stamps[j] - want:+.3f} s)",
                        "frame_gap")
                stand_ins += int(off > tol)
                stamps[cam, i] = cam_stamps[j]
                row.append(frames[j][1])
            chosen.append(row)
        shape = chosen[0][0].shape
        for cam, row in enumerate(chosen):
            for i, image in enumerate(row):
                if image.shape != shape:
                    return WindowRejection(f"camera {cam} frame {i} is {image.shape}, "
                                           f"camera 0 frame 0 is {shape}", "image_size")
        return np.stack([np.stack(row) for row in chosen]), stamps, stand_ins

    def _ego_history(self, t0: float) -> tuple[np.ndarray, float] | WindowRejection:
        lim = self.limits
        samples = self._odometry
        if len(samples) < 2:
            return WindowRejection(f"{len(samples)} odometry samples, need >= 2",
                                   "odometry_short")
        stamps = np.array([s.stamp for s in samples])
        if stamps[-1] < t0 - lim.max_odometry_extrapolation:
            return WindowRejection(f"newest odometry {stamps[-1]:.3f} is "
                                   f"{t0 - stamps[-1]:.3f} s older than t0 {t0:.3f}",
                                   "stale_odometry")
        times = t0 - self.history_dt * np.arange(self.num_history - 1, -1, -1)
        if times[0] < stamps[0]:
            return WindowRejection(f"odometry starts at {stamps[0]:.3f}, history needs "
                                   f"{times[0]:.3f}", "odometry_short")
        upper = np.clip(np.searchsorted(stamps, times, side="left"), 1, len(stamps) - 1)
        first, last = int(upper[0]) - 1, int(upper[-1])
        gaps = np.diff(stamps[first:last + 1])
        if gaps.size and gaps.max() > lim.max_odometry_gap:
            k = first + int(np.argmax(gaps))
            return WindowRejection(f"odometry gap {gaps.max():.3f} s after {stamps[k]:.3f} "
                                   f"(limit {lim.max_odometry_gap} s)", "odometry_gap")
        if not all(samples[i].finite for i in range(first, last + 1)):
            return WindowRejection("odometry in the history span holds NaN/inf or a zero "
                                   "quaternion", "nonfinite")
        positions = np.zeros((self.num_history, 3))
        rotations = np.zeros((self.num_history, 3, 3))
        for n, (t, hi) in enumerate(zip(times, upper)):
            a, b = samples[int(hi) - 1], samples[int(hi)]
            u = (t - a.stamp) / (b.stamp - a.stamp)
            positions[n] = a.position + u * (b.position - a.position)
            rotations[n] = _quat_to_matrix(_slerp(a.quaternion, b.quaternion, u))
        a, b = samples[int(upper[-1]) - 1], samples[int(upper[-1])]
        u = min((t0 - a.stamp) / (b.stamp - a.stamp), 1.0)
        speed = a.speed + u * (b.speed - a.speed)
        world_from_t0 = rotations[-1]
        local = (positions - positions[-1]) @ world_from_t0  # local: [N, 3] in t0 frame
        relative = np.einsum("ji,njk->nik", world_from_t0, rotations)  # relative: [N, 3, 3]
        yaw = np.unwrap(np.arctan2(relative[:, 1, 0], relative[:, 0, 0]))
        yaw -= yaw[-1]
        history = np.concatenate([local, yaw[:, None]], axis=1)
        history[-1] = 0.0
        return history, float(speed)
