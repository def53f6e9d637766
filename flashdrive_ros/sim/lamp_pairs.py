"""Pairs of standing windows that differ only in the lamp: near the end of a red-light wait of
a seed's drive, the ego's last HISTORY_STEPS frames are moved back along its heading by a
distance drawn from `back_m` (the car stood that much farther short of the line, the same
traffic around it) and kept twice: once as they were, under red, with a standing future
(the expert stays while the lamp shows red), and once with the ego's signal head turned green
for the last frames, with the expert's start at the light's own green as its future and the
frame's go label. Within a pair the pictures differ only in the pixels of that head, so the
label can come from nothing but the lamp, at distances from the line where the expert never
waits."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.drive import FRAME_HZ, FUTURE_STEPS, HISTORY_STEPS, DriveLog, \
    SceneSnapshot
from flashdrive_ros.sim.labels import label_frame
from flashdrive_ros.sim.light_branches import RedWait, red_waits

LAMP_PAIR_TAG = "lamp_pair"  # scenario tag of a lamp pair's window (training draws it)


@dataclass(frozen=True)
class LampPairs:
    """per_wait: pairs per red-light wait whose light turns green within the drive to a go
    label (0: none); back_m: (low, high) metres the ego is moved back; last_s: the pair's
    frame is drawn from this many final seconds of the wait; green_frames: (low, high) final
    frames of the window that show the green head."""

    per_wait: int = 0
    back_m: tuple[float, float] = (0.0, 8.0)
    last_s: float = 1.0
    green_frames: tuple[int, int] = (1, 4)

    def __post_init__(self) -> None:
        if self.per_wait < 0:
            raise ValueError(f"LampPairs.per_wait must be >= 0, got {self.per_wait}")
        low, high = self.back_m
        if not (np.isfinite(high) and 0.0 <= low <= high):
            raise ValueError(f"LampPairs.back_m must be (low, high) with 0 <= low <= high, "
                             f"got {self.back_m}")
        if not (np.isfinite(self.last_s) and self.last_s > 0):
            raise ValueError(f"LampPairs.last_s must be a finite number > 0, got "
                             f"{self.last_s}")
        low, high = self.green_frames
        if not 1 <= low <= high <= HISTORY_STEPS:
            raise ValueError(f"LampPairs.green_frames must be (low, high) with 1 <= low <= "
                             f"high <= {HISTORY_STEPS}, got {self.green_frames}")

    @property
    def enabled(self) -> bool:
        return self.per_wait > 0


def scene_moved_back(scene: SceneSnapshot, back_m: float, yaw: float) -> SceneSnapshot:
    """The scene with the ego `back_m` metres behind its pose along heading `yaw`."""
    ego = scene.ego
    moved = dataclasses.replace(ego, x=ego.x - back_m * np.cos(yaw),
                                y=ego.y - back_m * np.sin(yaw))
    return dataclasses.replace(scene, ego=moved, route_s=scene.route_s - back_m)


def moved_back(log: DriveLog, back_m: float, yaw: float) -> DriveLog:
    """The log with the ego `back_m` metres behind where it was along heading `yaw` at every
    row, frame and expert reading (route position, front bumper, gaps to the light and to the
    vehicle ahead)."""
    ego = log.ego.copy()
    ego[:, 1] -= back_m * np.cos(yaw)
    ego[:, 2] -= back_m * np.sin(yaw)
    scenes = [scene_moved_back(scene, back_m, yaw) for scene in log.scenes]
    infos = [dataclasses.replace(
        info, route_s=info.route_s - back_m, front_s=info.front_s - back_m,
        light_gap=None if info.light_gap is None else info.light_gap + back_m,
        vehicle_gap=None if info.vehicle_gap is None else info.vehicle_gap + back_m)
        for info in log.infos]
    return dataclasses.replace(log, ego=ego, scenes=scenes, infos=infos)


def turned_green(log: DriveLog, light: int, frames: int, reason: str) -> DriveLog:
    """The log with light `light` showing green on its last `frames` frames, as the expert
    reads it there (green since the first of them, `reason` for its acceleration)."""
    first = log.frame_count - frames
    green_at = log.infos[first].t
    scenes = list(log.scenes)
    infos = list(log.infos)
    for k in range(first, log.frame_count):
        states = list(scenes[k].light_states)
        states[light] = "green"
        scenes[k] = dataclasses.replace(scenes[k], light_states=tuple(states))
        infos[k] = dataclasses.replace(infos[k], light_state="green", light_green_at=green_at,
                                       reason=reason)
    return dataclasses.replace(log, scenes=scenes, infos=infos)


def _with_last_future(log: DriveLog, futures: np.ndarray, last: np.ndarray) -> DriveLog:
    """The log with `futures` ([S, FUTURE_STEPS, 3], its frames' own) as its futures, the
    last frame's replaced by `last` ([FUTURE_STEPS, 3])."""
    planned = futures.copy()
    planned[-1] = last
    return dataclasses.replace(log, planned=planned)


def _go_frame(log: DriveLog, wait: RedWait) -> int | None:
    """The wait's first green frame when the expert's label there is not to stop, else None."""
    green = wait.last + 1
    if green >= log.frame_count or label_frame(log.infos, green).decision == "stop":
        return None
    return green


def pair_logs(log: DriveLog, spec: LampPairs, rng: np.random.Generator) -> list[DriveLog]:
    """[red, green, red, green, ...]: `spec.per_wait` pairs per red wait of the drive whose
    light turns green to a go label, each HISTORY_STEPS frames long (one window, its last); a
    pair whose green window the labels still call a stop (a pedestrian ahead) is left out."""
    out: list[DriveLog] = []
    last = int(round(spec.last_s * FRAME_HZ))
    for wait in red_waits(log):
        green = _go_frame(log, wait)
        first = max(wait.first, HISTORY_STEPS - 1, wait.last - last + 1)
        if green is None or first > wait.last:
            continue
        start = log.future(green)
        for _ in range(spec.per_wait):
            k = int(rng.integers(first, wait.last + 1))
            back = float(rng.uniform(*spec.back_m))
            frames = int(rng.integers(spec.green_frames[0], spec.green_frames[1] + 1))
            cut = log.cut(k - HISTORY_STEPS + 1, HISTORY_STEPS)
            shifted = moved_back(cut, back, float(cut.scenes[-1].ego.yaw))
            lit = turned_green(shifted, wait.light, frames, log.infos[green].reason)
            if label_frame(lit.infos, HISTORY_STEPS - 1).decision == "stop":
                continue
            futures = np.stack([shifted.future(i) for i in range(HISTORY_STEPS)])
            out.append(_with_last_future(shifted, futures, np.zeros((FUTURE_STEPS, 3))))
            out.append(_with_last_future(lit, futures, start))
    return out
