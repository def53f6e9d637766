"""Run a drive: the expert steers the ego through the world at 50 Hz; 10 Hz scene snapshots
are kept for rendering and labelling."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.entities import LightEdit, PendingLightEdits
from flashdrive_ros.sim.expert import Expert, ExpertInfo
from flashdrive_ros.sim.scenarios import build_world
from flashdrive_ros.sim.vehicle import EgoState, step_bicycle
from flashdrive_ros.sim.world import EGO_LANE_D, World

SIM_HZ = 50
FRAME_HZ = 10
SUBSTEPS = SIM_HZ // FRAME_HZ
FUTURE_STEPS = 64
FUTURE_DT = 0.1
HISTORY_STEPS = 16
SNAPSHOT_RANGE = 300.0


@dataclass(frozen=True)
class BoxSnapshot:
    """A dynamic box for the renderer: centre on the ground, heading, size, colour."""

    x: float
    y: float
    yaw: float
    length: float
    width: float
    height: float
    color: tuple[int, int, int]
    kind: str
    z0: float = 0.0
    braking: bool = False


@dataclass(frozen=True)
class SceneSnapshot:
    """The world at one 10 Hz frame; boxes: vehicles within SNAPSHOT_RANGE and pedestrians."""

    t: float
    ego: EgoState
    route_s: float
    boxes: tuple[BoxSnapshot, ...]
    light_states: tuple[str, ...]


@dataclass
class DriveLog:
    """ego: float64 [N, 7] at 50 Hz: t, x, y, yaw, v, yaw_rate, accel. scenes / infos: at 10 Hz
    (scene k at t = k / 10). seconds: the requested length (the log runs 6.4 s longer).
    planned: float64 [frame_count, 64, 3] the expert's own future of each frame where the
    driven ego was disturbed (sim/disturbed_drive.py); None: the logged future is the expert's."""

    world: World
    seconds: float
    ego: np.ndarray
    scenes: list[SceneSnapshot]
    infos: list[ExpertInfo]
    planned: np.ndarray | None = None

    @property
    def frame_count(self) -> int:
        """10 Hz frames in [0, seconds]."""
        return int(round(self.seconds * FRAME_HZ)) + 1

    def future(self, k: int) -> np.ndarray:
        """float64 [64, 3] (x, y, yaw) of the expert's ego at 0.1 s steps after frame k, in
        its frame."""
        if self.planned is not None:
            return self.planned[k]
        i0 = k * SUBSTEPS
        idx = i0 + SUBSTEPS * np.arange(1, FUTURE_STEPS + 1)
        return to_frame(self.ego[i0, 1:4], self.ego[idx, 1:4])

    def cut(self, first_frame: int, frame_count: int) -> DriveLog:
        """The frames first_frame .. first_frame + frame_count - 1 as a drive of their own
        (times from 0 at first_frame; the future horizon after them kept)."""
        end_row = (first_frame + frame_count - 1 + FUTURE_STEPS) * SUBSTEPS + 1
        if first_frame < 0 or frame_count < 1 or end_row > len(self.ego):
            raise ValueError(f"frames {first_frame} + {frame_count} with their future are not "
                             f"all in this {self.frame_count}-frame drive")
        ego = self.ego[first_frame * SUBSTEPS:end_row].copy()
        ego[:, 0] -= ego[0, 0]
        frames = slice(first_frame, first_frame + frame_count)
        planned = None if self.planned is None else self.planned[frames]
        return DriveLog(self.world, (frame_count - 1) / FRAME_HZ, ego, self.scenes[frames],
                        self.infos[frames], planned)

    def history(self, k: int) -> np.ndarray:
        """float64 [16, 4] (x, y, z, yaw) of the 16 poses up to frame k (oldest first)."""
        if k < HISTORY_STEPS - 1:
            raise ValueError(f"frame {k} has less than {HISTORY_STEPS} poses of history")
        i0 = k * SUBSTEPS
        idx = i0 - SUBSTEPS * np.arange(HISTORY_STEPS - 1, -1, -1)
        xyyaw = to_frame(self.ego[i0, 1:4], self.ego[idx, 1:4])
        return np.stack([xyyaw[:, 0], xyyaw[:, 1], np.zeros(HISTORY_STEPS), xyyaw[:, 2]], axis=1)


def to_frame(origin: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """poses [N, 3] (x, y, yaw) expressed in the frame of origin (x, y, yaw)."""
    c, s = np.cos(origin[2]), np.sin(origin[2])
    dx, dy = poses[:, 0] - origin[0], poses[:, 1] - origin[1]
    yaw = np.arctan2(np.sin(poses[:, 2] - origin[2]), np.cos(poses[:, 2] - origin[2]))
    return np.stack([c * dx + s * dy, -s * dx + c * dy, yaw], axis=1)


def _snapshot(world: World, t: float, ego: EgoState, route_s: float) -> SceneSnapshot:
    boxes = []
    near = world.distances_to(ego.x, ego.y) < SNAPSHOT_RANGE
    for veh, n in zip(world.vehicles, near):
        if veh.active and n:
            boxes.append(BoxSnapshot(veh.x, veh.y, veh.yaw, veh.length, veh.width, veh.height,
                                     veh.color, veh.kind, braking=veh.brake_lights))
    for ped in world.pedestrians:
        x, y = ped.position()
        boxes.append(BoxSnapshot(float(x), float(y), ped.yaw, 0.35, 0.5, ped.height - 0.3,
                                 ped.color, "pedestrian"))
        boxes.append(BoxSnapshot(float(x), float(y), ped.yaw, 0.25, 0.25, 0.3,
                                 (215, 175, 140), "pedestrian", z0=ped.height - 0.3))
    lights = tuple(light.ego_state(t) for light in world.lights())
    return SceneSnapshot(t, ego, route_s, tuple(boxes), lights)


def simulated_seconds(seconds: float, end_s: float | None) -> float:
    """How long a drive of `seconds` that stops at end_s (None: at its end) runs."""
    if end_s is None:
        return seconds
    if not 0 < end_s <= seconds:
        raise ValueError(f"end_s must be in (0, {seconds}], got {end_s}")
    return end_s


def simulate(seed: int, seconds: float, blocks: tuple[str, ...] | None = None,
             light_edits: tuple[LightEdit, ...] = (), end_s: float | None = None) -> DriveLog:
    """Drive for `seconds` plus the future horizon; deterministic for a seed.

    blocks: scenario blocks to start the route with (see scenarios.build_world).
    light_edits: changes to the lights' cycles, each made at the first step at or after its
    time (the drive is the seed's own until then).
    end_s: the drive stops at end_s (plus the horizon), in the world of a `seconds` drive.
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    world = build_world(seed, seconds, blocks)
    seconds = simulated_seconds(seconds, end_s)
    pending = PendingLightEdits(light_edits)
    expert = Expert(world)
    x, y, yaw = world.route.pose_at(world.ego_start_s)
    ox, oy = world.route.offset_point(world.ego_start_s, EGO_LANE_D)
    ego = EgoState(float(ox), float(oy), float(yaw), world.ego_start_v)
    dt = 1.0 / SIM_HZ
    n_steps = int(round((seconds + FUTURE_STEPS * FUTURE_DT) * SIM_HZ)) + 1
    rows, scenes, infos = [], [], []
    for i in range(n_steps):
        t = i * dt
        pending.apply_due(t, world.lights())
        accel, steer, info = expert.control(t, ego)
        if i % SUBSTEPS == 0:
            scenes.append(_snapshot(world, t, ego, info.route_s))
            infos.append(info)
        rows.append((t, ego.x, ego.y, ego.yaw, ego.v, ego.yaw_rate, ego.accel))
        world.step(t, dt, ego, info.front_s)
        ego = step_bicycle(ego, accel, steer, dt)
    return DriveLog(world, float(seconds), np.asarray(rows, dtype=np.float64), scenes, infos)
