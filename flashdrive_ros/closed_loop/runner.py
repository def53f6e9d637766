"""One closed-loop drive with the planner in this process: the simulator at 50 Hz, the
cameras rendered at 10 Hz from where the ego really is, a window built from them and the
odometry whenever the planner is free, its plan applied `latency` after its input time, a
tracking controller turning the newest plan into the ego's acceleration and steering.

Until the first plan arrives (the window needs its history) the rule-based expert drives."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from flashdrive_ros.closed_loop.controller import TrackingConfig, TrajectoryTracker, WorldPlan
from flashdrive_ros.closed_loop.metrics import DriveMonitor
from flashdrive_ros.engine.types import Plan, Window
from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.eval.metrics import percentiles
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.sim.cameras import DEFAULT_HEIGHT, DEFAULT_WIDTH, rig
from flashdrive_ros.sim.drive import FRAME_HZ, SUBSTEPS, SceneSnapshot
from flashdrive_ros.sim.ego_world import EgoWorld
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.vehicle import EgoState


class Planner(Protocol):
    def step(self, window: Window) -> Plan: ...

    def reset(self) -> None: ...


@dataclass
class DriveSettings:
    """latency_ms: a plan reaches the controller this long after the planner started on it
    (None: each plan's measured total latency); the planner is busy meanwhile, then takes
    the window of the newest camera frame. blocks: scenario blocks to start the route with
    (None: the simulator's default order). width / height: rendered camera size.
    world_seconds: the drive runs in the seed's world of a drive this long (None: `seconds`),
    so that it is the start of that longer drive (a seed's world depends on its length)."""

    seconds: float
    latency_ms: float | None = None
    width: int = DEFAULT_WIDTH
    height: int = DEFAULT_HEIGHT
    blocks: tuple[str, ...] | None = None
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    world_seconds: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"seconds must be > 0, got {self.seconds}")
        if self.world_seconds is not None and not (math.isfinite(self.world_seconds)
                                                   and self.world_seconds >= self.seconds):
            raise ValueError(f"world_seconds must be >= seconds ({self.seconds}) or None, "
                             f"got {self.world_seconds}")
        if self.latency_ms is not None and not (math.isfinite(self.latency_ms)
                                                and self.latency_ms >= 0):
            raise ValueError(f"latency_ms must be >= 0 or None, got {self.latency_ms}")
        Renderer.check_size(self.width, self.height)

    @property
    def world_length_s(self) -> float:
        """The drive length the seed's world is built for."""
        return self.seconds if self.world_seconds is None else self.world_seconds

    def lengths(self) -> dict[str, float]:
        """The drive's length and that of the world it runs in, as a report records them."""
        return {"seconds": self.seconds, "world_seconds": self.world_length_s}

    def ego_world(self, seed: int) -> EgoWorld:
        """The simulator of this drive on `seed`."""
        return EgoWorld(seed, self.world_length_s, self.blocks)


@dataclass
class DriveResult:
    """metrics: DriveMonitor.summary plus plan statistics; rows: DriveMonitor.rows();
    plans: the world-frame plans in the order they were applied."""

    seed: int
    variant: str
    metrics: dict
    rows: np.ndarray
    plans: list[WorldPlan]
    world: object


def latency_summary(latencies_ms: list[float], source: str) -> dict:
    """A drive's plan latencies as its report records them: p50, p90 (None without plans)
    and where they come from."""
    stats = percentiles(latencies_ms)
    return {"p50": stats["p50"], "p90": stats["p90"], "source": source}


def reference_progress(seed: int, settings: DriveSettings) -> tuple[float, float]:
    """(route distance, final route arc length) of the rule-based expert over the drive."""
    sim = settings.ego_world(seed)
    start = sim.route_position()[0]
    for _ in range(int(round(settings.seconds * FRAME_HZ * SUBSTEPS))):
        accel, steer, _ = sim.expert_control()
        sim.step(accel, steer)
    end = sim.route_position()[0]
    return end - start, end


def handover_time(model: ModelConfig) -> float:
    """When the first window can be built: the expert drives until then."""
    history = (model.action.num_history - 1) * model.action.history_dt
    return max(history, (model.prompt.num_frames - 1) * model.prompt.frame_dt)


def _quaternion(yaw: float) -> np.ndarray:
    return np.array([0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)])


class ClosedLoopDrive:
    """make_planner: the planner of this drive, given its simulator (an engine ignores it;
    a reference planner reads the world). on_step(i, sim, scene): called at every 50 Hz step i
    with the simulator before it moves on and, on camera frames, the scene snapshot the
    cameras were rendered from (None between frames; what a data recorder reads)."""

    def __init__(self, seed: int, make_planner: Callable[[EgoWorld], Planner],
                 model: ModelConfig, settings: DriveSettings, variant: str = "",
                 on_step: Callable[[int, EgoWorld, SceneSnapshot | None], None] | None = None
                 ) -> None:
        self.seed, self.settings, self.variant = seed, settings, variant
        self.on_step = on_step
        self.sim = settings.ego_world(seed)
        self.planner = make_planner(self.sim)
        prompt, action = model.prompt, model.action
        self.renderer = Renderer(self.sim.world, settings.width, settings.height,
                                 rig(tuple(prompt.camera_names)))
        self.builder = WindowBuilder(len(prompt.camera_names), prompt.num_frames,
                                     prompt.frame_dt, action.num_history, action.history_dt)
        self.tracker = TrajectoryTracker(settings.tracking)
        self.monitor = DriveMonitor(self.sim.world, self.sim.dt)
        self.applied: list[WorldPlan] = []
        self.poses: dict[int, EgoState] = {}
        self.latencies_ms: list[float] = []
        self.compute_ms: list[float] = []
        self.rejections: dict[str, int] = {}
        self.handover = handover_time(model)

    def run(self) -> DriveResult:
        sim, settings = self.sim, self.settings
        self.planner.reset()
        steps = int(round(settings.seconds * FRAME_HZ * SUBSTEPS))
        pending: WorldPlan | None = None
        current: WorldPlan | None = None
        busy_until, last_t0 = 0.0, -math.inf
        for i in range(steps + 1):
            t = sim.t
            ego = sim.ego
            self.poses[i] = ego
            self.builder.add_odometry(t, [ego.x, ego.y, 0.0], _quaternion(ego.yaw),
                                      [ego.v, 0.0, 0.0])
            scene = sim.snapshot() if i % SUBSTEPS == 0 else None
            if scene is not None:
                for camera, image in enumerate(self.renderer.render(scene)):
                    self.builder.add_image(camera, t, image)
            t_frame = (i // SUBSTEPS) * SUBSTEPS * sim.dt
            if pending is None and t >= max(busy_until, self.handover) - 1e-9 \
                    and t_frame > last_t0 + 1e-9:
                last_t0 = t_frame
                pending = self._plan(t_frame, t)
                if pending is not None:
                    busy_until = pending.ready_at
            if pending is not None and pending.ready_at <= t + 1e-9:
                current, pending = pending, None
                self.applied.append(current)
            s, d = sim.route_position()
            expert = t < self.handover - 1e-9
            if expert:
                accel, steer, _ = sim.expert_control()
            else:
                accel, steer = self.tracker.command(ego, t, current)
            age = None if current is None else t - current.t0
            self.monitor.record(t, ego, s, d, age,
                                expert or self.tracker.usable(current, t))
            if self.on_step is not None:
                self.on_step(i, sim, scene)
            if i < steps:
                sim.step(accel, steer)
        return self._result()

    def _plan(self, t0: float, now: float) -> WorldPlan | None:
        """The window of the newest frame t0, planned from `now` on; None when refused."""
        window = self.builder.build(t0)
        if not isinstance(window, Window):
            self.rejections[window.code] = self.rejections.get(window.code, 0) + 1
            return None
        start = time.perf_counter()
        plan = self.planner.step(window)
        self.compute_ms.append((time.perf_counter() - start) * 1000.0)
        measured = plan.timings_ms.get("total", self.compute_ms[-1])
        latency_ms = measured if self.settings.latency_ms is None else self.settings.latency_ms
        self.latencies_ms.append(latency_ms)
        origin = self.poses[int(round(plan.t0 / self.sim.dt))]
        return WorldPlan.from_ego_frame(plan.t0, plan.dt, plan.trajectories[0], origin,
                                        now + latency_ms / 1000.0, plan.coc_text)

    def _result(self) -> DriveResult:
        progress, end_s = reference_progress(self.seed, self.settings)
        metrics = self.monitor.summary(self.handover, progress, end_s)
        metrics.update({
            "seed": self.seed, "variant": self.variant, **self.settings.lengths(),
            "engaged_at_s": round(self.handover, 3),
            "plans": len(self.latencies_ms),
            "latency_ms": latency_summary(self.latencies_ms, "measured"
                                          if self.settings.latency_ms is None else "fixed"),
            "window_rejections": dict(self.rejections)})
        return DriveResult(self.seed, self.variant, metrics, self.monitor.rows(), self.applied,
                           self.sim.world)
