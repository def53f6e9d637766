"""Drives driven by a planner in closed loop, labelled by the expert (DAgger-style data).

The ego follows the planner's plans through the tracking controller with a fixed latency, as
in `flashdrive-drive`; each 10 Hz frame is labelled by the rule-based expert from the state the
planner put the ego in: its reasoning (the CoC label) and its own future from there (the
expert driven ahead on a fork of the world whose lights keep the states the frame shows, and
whose road users are held where the frame shows a pedestrian in the way or brake lights ahead,
as `Recipe.plan_futures` does for the recipe's drives). Training on such drives shows the model the
states its own driving reaches, and the way on from each of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flashdrive_ros.closed_loop.runner import ClosedLoopDrive, DriveSettings, Planner
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.sim.disturbed_drive import (
    expert_poses,
    held_road_user_poses,
    holds_road_users,
)
from flashdrive_ros.sim.drive import SUBSTEPS, DriveLog, SceneSnapshot, to_frame
from flashdrive_ros.sim.ego_world import EgoWorld


@dataclass(frozen=True)
class PolicySpec:
    """The planner that drives: an engine variant on a model directory, with the latency at
    which its plans reach the controller."""

    model_dir: str
    latency_ms: float = 128.0
    variant: str = "flashdrive"
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            raise ValueError(f"latency_ms must be >= 0, got {self.latency_ms}")
        if not (Path(self.model_dir) / "config.json").is_file():
            raise FileNotFoundError(f"{self.model_dir} holds no model (config.json missing)")


def simulate_policy(seed: int, seconds: float, make_planner: Callable[[EgoWorld], Planner],
                    model: ModelConfig, latency_ms: float,
                    blocks: tuple[str, ...] | None = None) -> tuple[DriveLog, dict]:
    """(log, closed-loop metrics) of one drive: `DriveLog.planned` holds each frame's expert
    future from the driven state, `infos` the expert's reasoning there."""
    settings = DriveSettings(seconds=seconds, latency_ms=latency_ms, blocks=blocks)
    rows, scenes, infos, planned = [], [], [], []

    def record(i: int, sim: EgoWorld, scene: SceneSnapshot | None) -> None:
        ego = sim.ego
        rows.append((sim.t, ego.x, ego.y, ego.yaw, ego.v, ego.yaw_rate, ego.accel))
        if scene is not None:
            scenes.append(scene)
            info = sim.expert_control()[2]
            infos.append(info)
            held = holds_road_users(info)
            fork = sim.fork(sim.light_states(), hold_road_users=held)
            poses = (held_road_user_poses(fork) if held
                     else expert_poses(fork))  # poses: [HORIZON_STEPS + 1, 3]
            planned.append(to_frame(poses[0], poses[SUBSTEPS::SUBSTEPS]))

    drive = ClosedLoopDrive(seed, make_planner, model, settings, "policy", on_step=record)
    result = drive.run()
    log = DriveLog(drive.sim.world, float(seconds), np.asarray(rows, dtype=np.float64),
                   scenes, infos, planned=np.stack(planned))
    return log, result.metrics


_ENGINES: dict[PolicySpec, object] = {}


def policy_log(seed: int, seconds: float, policy: PolicySpec) -> DriveLog:
    """`simulate_policy` with the policy's engine (loaded once per process)."""
    from flashdrive_ros.closed_loop.variants import load_engine
    from flashdrive_ros.engine.dtype_choice import resolve_dtype

    if policy not in _ENGINES:
        _ENGINES[policy] = load_engine(Path(policy.model_dir), policy.variant, policy.device,
                                       resolve_dtype("auto", policy.device), 1)
    engine = _ENGINES[policy]
    log, _ = simulate_policy(seed, seconds, lambda sim: engine, engine.model.cfg,
                             policy.latency_ms)
    return log
