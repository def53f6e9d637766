"""Does the model's plan keep to the expert's line in tight bends and around parked cars, and
does it come back to that line from a sideways offset? Held-out drives are probed at frames
where the expert drives at 3 m/s or more with no red or yellow light within 30 m and no
pedestrian in its way: in a tight bend (|curvature| >= 1/45 1/m within 25 m ahead, right or
left), passing a parked car (the expert's nudge >= 0.3 m within 25 m ahead) or on a straight
road (|curvature| <= 1/300 1/m and no nudge within 40 m ahead, the control group); every 1 s
from the start of each stretch, at most 4 frames a stretch and 4 straight frames a drive.
Each frame's window is the logged one with the ego moved sideways by each offset d0 (left +)
in every scene its frames are rendered from and in its odometry, route arc length, heading
and speed kept, built as the engine's WindowBuilder builds a window, and planned on. `dev` at
1, 2, 3 s is the plan's lateral route offset less the expert's logged one from the unmoved
pose (m, left +): at d0 = 0 the plan's bias, at d0 != 0 `return_3s` = 1 - dev_3s / d0 tells
whether it steers back (1: on the expert's line by 3 s; 0: keeps its offset; < 0: moves
further off). `inside_3s` is dev_3s towards the inside of a bend, `towards_car_3s` towards
the parked car (cars stand on the right). At a nudge the plan's clearance is set against
the expert's: the least gap (m) between the ego's box along the plan (along the expert's
logged path) over its whole horizon and the parked cars of the t0 scene (the first frames of
a nudge stand 30-45 m before the car, beyond 3 s of driving). Writes lane_probe.json and
lane_probe.md in OUT.

`python -m flashdrive_ros.eval.lane_probe --model-dir DIR --out DIR [--drives N]
[--first-seed N] [--seconds S] [--offsets-m -1,-0.5,0,0.5,1] [--device cpu|cuda]`
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys

import numpy as np

from flashdrive_ros.engine.types import Window
from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.eval.scene_probe import (
    add_probe_arguments,
    table_cell,
    coc_decision,
    float_values,
    run_probe,
)
from flashdrive_ros.sim.bends import TIGHT_CURVATURE
from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.sim.drive import (
    FRAME_HZ,
    HISTORY_STEPS,
    SIM_HZ,
    SUBSTEPS,
    BoxSnapshot,
    DriveLog,
    SceneSnapshot,
    simulate,
)
from flashdrive_ros.sim.expert import Expert, ExpertInfo
from flashdrive_ros.sim.rectangles import gap, rectangle
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.vehicle import EGO_LENGTH, EGO_WIDTH, EgoState

JSON_FILE, MARKDOWN_FILE = "lane_probe.json", "lane_probe.md"
KINDS = ("right_bend", "left_bend", "nudge", "straight")
MIN_SPEED_MPS = 3.0  # m/s, the expert drives at least this fast at a probe frame
LIGHT_CLEAR_M = 30.0  # m, no red or yellow light this near ahead of the front bumper
AHEAD_M = 25.0  # m of route ahead in which a tight bend or a nudge sets the frame's kind
STRAIGHT_AHEAD_M = 40.0  # m of route ahead that a straight frame keeps straight and clear
STRAIGHT_CURVATURE = 1.0 / 300.0  # 1/m, the most |curvature| of a straight stretch
MIN_NUDGE_M = 0.3  # m, the least expert nudge of a parked car being passed
ROUTE_STEP_M = 0.5  # m between the route samples looked at ahead
FRAMES_APART = 10  # 10 Hz frames between the probe frames of one stretch (1 s)
PER_STRETCH = 4  # probe frames a stretch at most
STRAIGHT_PER_DRIVE = 4  # straight probe frames a drive at most, spread evenly
HORIZONS_S = (1.0, 2.0, 3.0)  # s after t0 at which the plan's offset is compared
CLEARANCE_S = 6.4  # s of plan and of the expert's path swept for the clearance
ROW_WINDOW_M = 10.0  # m about the frame's arc length searched to project a 50 Hz row
PLAN_WINDOW_M = 60.0  # m about t0's arc length searched to project a plan's point
DEFAULT_OFFSETS_M = (-1.0, -0.5, 0.0, 0.5, 1.0)
INSIDE_SIGN = {"right_bend": -1.0, "left_bend": 1.0}  # route offset towards a bend's inside


@dataclasses.dataclass(frozen=True)
class ProbeFrame:
    """A 10 Hz frame to probe and its kind (one of KINDS)."""

    frame: int
    kind: str


def frame_kind(route, expert: Expert, info: ExpertInfo) -> str | None:
    """The kind of the frame the expert saw as `info` (a nudge before a bend before a straight
    stretch), or None when it is no probe frame."""
    if (info.v < MIN_SPEED_MPS or info.ped_gap is not None
            or (info.light_state in ("red", "yellow") and info.light_gap is not None
                and info.light_gap < LIGHT_CLEAR_M)):
        return None
    near = info.route_s + np.arange(0.0, AHEAD_M + ROUTE_STEP_M / 2, ROUTE_STEP_M)
    far = info.route_s + np.arange(0.0, STRAIGHT_AHEAD_M + ROUTE_STEP_M / 2, ROUTE_STEP_M)
    if expert.nudge_at(near).max() >= MIN_NUDGE_M:
        return "nudge"
    curvature = route.curvature_at(near)
    sharpest = float(curvature[np.argmax(np.abs(curvature))])
    if abs(sharpest) >= TIGHT_CURVATURE:
        return "left_bend" if sharpest > 0 else "right_bend"
    if (np.abs(route.curvature_at(far)).max() <= STRAIGHT_CURVATURE
            and expert.nudge_at(far).max() == 0.0):
        return "straight"
    return None


def probe_frames(log: DriveLog, expert: Expert) -> list[ProbeFrame]:
    """The frames with a full history to probe, in order: every FRAMES_APART from the first
    frame of each stretch of one kind, PER_STRETCH a stretch at most, and at most
    STRAIGHT_PER_DRIVE of the straight ones, spread evenly."""
    route = log.world.route
    first = HISTORY_STEPS - 1
    kinds = [frame_kind(route, expert, log.infos[k]) for k in range(first, log.frame_count)]
    picked: list[ProbeFrame] = []
    for kind, stretch in itertools.groupby(range(first, log.frame_count),
                                           key=lambda k: kinds[k - first]):
        if kind is not None:
            picked += [ProbeFrame(k, kind) for k in list(stretch)[::FRAMES_APART]][:PER_STRETCH]
    straight = [p for p in picked if p.kind == "straight"]
    spread = np.round(np.linspace(0, len(straight) - 1,
                                  min(len(straight), STRAIGHT_PER_DRIVE))).astype(int)
    kept = {straight[i] for i in spread}
    return [p for p in picked if p.kind != "straight" or p in kept]


def route_positions(log: DriveLog) -> np.ndarray:
    """[N_rows, 2] (s, d) on the route of every 50 Hz ego row of the log (d: left +)."""
    route = log.world.route
    return np.array([route.project(row[1:3], hint=log.infos[i // SUBSTEPS].route_s,
                                   window=ROW_WINDOW_M)
                     for i, row in enumerate(log.ego)])


def sideways(route, s, d0: float) -> np.ndarray:
    """[..., 2] the move by d0 (m, left +) across the route at arc lengths s."""
    yaw = np.asarray(route.pose_at(s)[2])
    return d0 * np.stack([-np.sin(yaw), np.cos(yaw)], axis=-1)


def shifted_scene(route, scene: SceneSnapshot, d0: float) -> SceneSnapshot:
    """The scene with its ego moved by d0 across the route at its arc length, heading and
    speed kept."""
    dx, dy = sideways(route, scene.route_s, d0)
    return dataclasses.replace(scene, ego=dataclasses.replace(
        scene.ego, x=scene.ego.x + float(dx), y=scene.ego.y + float(dy)))


def shifted_poses(route, log: DriveLog, positions: np.ndarray, rows: slice, d0: float
                  ) -> np.ndarray:
    """[N, 3] (x, y, yaw) of the log's ego rows `rows` moved by d0 across the route at their
    arc lengths (positions: `route_positions(log)`)."""
    xy = log.ego[rows, 1:3] + sideways(route, positions[rows, 0], d0)  # xy: [N, 2]
    return np.concatenate([xy, log.ego[rows, 3:4]], axis=1)


def shifted_window(renderer: Renderer, log: DriveLog, positions: np.ndarray, k: int,
                   d0: float, prompt, action) -> Window:
    """The window of frame k with the ego moved sideways by d0 in the scenes of its frames
    and in the odometry of its history (positions: `route_positions(log)`), as a
    WindowBuilder of the model's frames and history builds it; ValueError where it is
    refused."""
    route = log.world.route
    builder = WindowBuilder(len(prompt.camera_names), prompt.num_frames, prompt.frame_dt,
                            action.num_history, action.history_dt)
    i0 = k * SUBSTEPS
    history_rows = int(np.ceil((action.num_history - 1) * action.history_dt * SIM_HZ))
    rows = slice(max(i0 - history_rows - 1, 0), i0 + 1)
    poses = shifted_poses(route, log, positions, rows, d0)  # poses: [N, 3] (x, y, yaw)
    for t, (x, y, yaw), v in zip(log.ego[rows, 0], poses, log.ego[rows, 4]):
        builder.add_odometry(t, [x, y, 0.0], [0.0, 0.0, np.sin(yaw / 2), np.cos(yaw / 2)],
                             [v, 0.0, 0.0])
    step = int(round(prompt.frame_dt * FRAME_HZ))
    for j in range(k - (prompt.num_frames - 1) * step, k + 1, step):
        scene = shifted_scene(route, log.scenes[j], d0)
        for camera, image in enumerate(renderer.render(scene)):
            builder.add_image(camera, scene.t, image)
    window = builder.build(log.scenes[k].t)
    if not isinstance(window, Window):
        raise ValueError(f"frame {k} moved by {d0:g} m gives no window: {window.reason}")
    return window


def to_world(origin: np.ndarray, local: np.ndarray) -> np.ndarray:
    """local [N, 3] (x, y, yaw) in the frame of origin (x, y, yaw) -> [N, 3] in the world."""
    c, s = np.cos(origin[2]), np.sin(origin[2])
    return np.stack([origin[0] + c * local[:, 0] - s * local[:, 1],
                     origin[1] + s * local[:, 0] + c * local[:, 1],
                     origin[2] + local[:, 2]], axis=1)


def horizon_rows(dt: float) -> np.ndarray:
    """[H] indices, at HORIZONS_S, of a path sampled every dt from dt after t0."""
    return np.round(np.asarray(HORIZONS_S) / dt).astype(int) - 1


def lateral_deviation(route, origin: np.ndarray, s0: float, trajectory: np.ndarray,
                      dt: float, expert_d: np.ndarray) -> np.ndarray:
    """[H] the route offset (m, left +) at HORIZONS_S of the plan `trajectory` ([N_wp, >=3]
    (x, y, yaw) in the frame of origin, waypoint i at (i + 1) * dt; origin at arc length s0)
    less expert_d ([H] the expert's offset then)."""
    poses = to_world(origin, trajectory[horizon_rows(dt), :3])  # poses: [H, 3] (x, y, yaw)
    plan_d = [route.project(pose[:2], hint=s0, window=PLAN_WINDOW_M)[1] for pose in poses]
    return np.asarray(plan_d) - expert_d


def clearance(poses: np.ndarray, parked: list[BoxSnapshot]) -> float | None:
    """The least gap (m) between the ego's box at base_link poses ([N, 3] (x, y, yaw) in the
    world) and a `parked` box; None without one."""
    if not parked:
        return None
    cars = [rectangle(b.x, b.y, b.yaw, b.length, b.width) for b in parked]
    egos = [rectangle(*EgoState(x, y, yaw, 0.0).center, yaw, EGO_LENGTH, EGO_WIDTH)
            for x, y, yaw in poses]
    return round(min(gap(ego, car) for ego in egos for car in cars), 3)


def probe_seed(engine, seed: int, seconds: float, offsets: tuple[float, ...]) -> list[dict]:
    """One row per (probe frame, offset): the plan's deviation from the expert's line at
    HORIZONS_S, its return, towards the inside of a bend or the parked car, the clearances
    near parked cars, its CoC and decision."""
    cfg = engine.model.cfg
    log = simulate(seed, seconds)
    route = log.world.route
    renderer = Renderer(log.world, cameras=rig(tuple(cfg.prompt.camera_names)))
    positions = route_positions(log)  # positions: [N_rows, 2] (s, d)
    sweep = SUBSTEPS * np.arange(1, int(round(CLEARANCE_S * FRAME_HZ)) + 1)
    rows = []
    for probe in probe_frames(log, Expert(log.world)):
        i0 = probe.frame * SUBSTEPS
        s0 = float(positions[i0, 0])
        expert_d = positions[i0 + np.round(np.asarray(HORIZONS_S) * SIM_HZ).astype(int), 1]
        parked = [box for box in log.scenes[probe.frame].boxes if box.kind == "parked"]
        nudge = probe.kind == "nudge"
        expert_clearance = (clearance(log.ego[i0 + sweep, 1:4], parked)
                            if nudge else None)
        for d0 in offsets:
            window = shifted_window(renderer, log, positions, probe.frame, d0, cfg.prompt,
                                    cfg.action)
            engine.reset()
            plan = engine.step(window)
            origin = shifted_poses(route, log, positions, slice(i0, i0 + 1), d0)[0]
            trajectory = plan.trajectories[0]  # trajectory: [N_wp, 3] (x, y, yaw)
            dev = lateral_deviation(route, origin, s0, trajectory, plan.dt, expert_d)
            swept = to_world(origin, trajectory[:int(round(CLEARANCE_S / plan.dt))])
            rows.append({
                "seed": seed, "frame": probe.frame, "kind": probe.kind, "offset_m": d0,
                "speed": round(float(log.infos[probe.frame].v), 3),
                "expert_d_m": round(float(positions[i0, 1]), 3),
                **{f"dev_{t:g}s": round(float(v), 3) for t, v in zip(HORIZONS_S, dev)},
                "return_3s": None if d0 == 0 else round(1.0 - float(dev[-1]) / d0, 3),
                "inside_3s": (round(INSIDE_SIGN[probe.kind] * float(dev[-1]), 3)
                              if probe.kind in INSIDE_SIGN else None),
                "towards_car_3s": round(-float(dev[-1]), 3) if nudge else None,
                "plan_clearance_m": clearance(swept, parked) if nudge else None,
                "expert_clearance_m": expert_clearance,
                "coc": plan.coc_text, "decision": coc_decision(plan.coc_text)})
    return rows


def _median(values: list) -> float | None:
    kept = [v for v in values if v is not None]
    return round(float(np.median(kept)), 3) if kept else None


def summarize(rows: list[dict]) -> list[dict]:
    """Per (kind, offset): frames, the median and mean deviation at HORIZONS_S, the median
    return by 3 s (None at offset 0), towards the inside of a bend or the parked car by 3 s,
    and the plans' and the expert's clearance to parked cars (None where not measured)."""
    cells: dict[tuple[str, float], list[dict]] = {}
    for row in rows:
        cells.setdefault((row["kind"], row["offset_m"]), []).append(row)
    out = []
    for (kind, d0), cell in sorted(cells.items(), key=lambda c: (KINDS.index(c[0][0]),
                                                                 c[0][1])):
        entry: dict = {"kind": kind, "offset_m": d0, "frames": len(cell)}
        for t in HORIZONS_S:
            devs = [row[f"dev_{t:g}s"] for row in cell]
            entry[f"dev_{t:g}s_median"] = _median(devs)
            entry[f"dev_{t:g}s_mean"] = round(float(np.mean(devs)), 3)
        for key in ("return_3s", "inside_3s", "towards_car_3s", "plan_clearance_m",
                    "expert_clearance_m"):
            entry[f"{key}_median"] = _median([row[key] for row in cell])
        out.append(entry)
    return out


def markdown(summary: list[dict], model_dir: str, seeds: list[int]) -> str:
    lines = [f"# Lane probe: {model_dir}", "",
             f"Held-out seeds {seeds[0]} .. {seeds[-1]}; the ego moved sideways by the offset "
             f"(left +) in the window of each probe frame. dev: the plan's route offset less "
             f"the expert's at 1 / 2 / 3 s (m, left +; median / mean). Inside / car: dev at "
             f"3 s towards the inside of the bend or the parked car (median). Back by 3 s: "
             f"1 - dev_3s / offset (median; 1 back on the expert's line, 0 keeps the offset). "
             f"Clearance: least gap between the ego's box along the whole path and a parked "
             f"car (median).", "",
             "| kind | offset (m) | frames | dev 1 s (m) | dev 2 s (m) | dev 3 s (m) "
             "| inside / car, 3 s (m) | back by 3 s | clearance: plan (m) "
             "| clearance: expert (m) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        devs = " | ".join(f"{s[f'dev_{t:g}s_median']:+.2f} / {s[f'dev_{t:g}s_mean']:+.2f}"
                          for t in HORIZONS_S)
        towards = s["inside_3s_median"] if s["inside_3s_median"] is not None else s[
            "towards_car_3s_median"]
        lines.append(f"| {s['kind']} | {s['offset_m']:+g} | {s['frames']} | {devs} | "
                     f"{table_cell(towards, '+.2f')} | "
                     f"{table_cell(s['return_3s_median'], '.2f')} | "
                     f"{table_cell(s['plan_clearance_m_median'], '.2f')} | "
                     f"{table_cell(s['expert_clearance_m_median'], '.2f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_probe_arguments(p)
    p.add_argument("--offsets-m", type=float_values("--offsets-m", -2.0, 2.0),
                   default=DEFAULT_OFFSETS_M,
                   help="sideways moves of the ego from the expert's pose (m, left +)")
    args = p.parse_args(argv)
    return run_probe(p, args, lambda engine, seed: probe_seed(
        engine, seed, args.seconds, args.offsets_m), summarize, markdown, JSON_FILE,
        MARKDOWN_FILE)


if __name__ == "__main__":
    sys.exit(main())
