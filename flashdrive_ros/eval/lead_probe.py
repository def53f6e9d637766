"""Does the model plan a stop for a car standing in its lane? At the first frame of every lead the
expert follows on a straight road in held-out drives (no light or pedestrian ahead), the rest
of the world is frozen and the ego comes up behind the lead at `speed` in its lane, its front
bumper `gap` metres short of the lead's rear at t0; the four frames of that approach are
rendered and planned on, once with the lead standing (brake lights on) and once with it driving
ahead at the ego's speed, or at `--moving-mps` (a slow lead), with them off. A plan stops short
when its path ends before the lead stands (`clearance` = gap less the plan's travel, >= 0).
Stopping takes speed^2 / (2 gap) m/s^2, inside the expert's braking on the default grid. A
model that reads the lead stops short behind the standing one and follows the moving one
(`read`); one that does not answers both alike. Per speed, the slope of the standing plans'
travel against the gap tells whether the plan follows the gap at all: about 1 for a plan that
ends a fixed margin behind the car, about 0 for one that ignores where it stands. Writes
lead_probe.json and lead_probe.md in OUT.

`python -m flashdrive_ros.eval.lead_probe --model-dir DIR --out DIR [--drives N]
[--first-seed N] [--seconds S] [--gaps-m 8,15,25] [--speeds 4,8] [--moving-mps V]
[--device cpu|cuda]`
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from flashdrive_ros.engine.types import Window
from flashdrive_ros.eval.scene_probe import (
    add_probe_arguments,
    table_cell,
    coc_decision,
    float_values,
    run_probe,
)
from flashdrive_ros.sim.drive import HISTORY_STEPS, DriveLog, SceneSnapshot, simulate, to_frame
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.vehicle import EGO_WIDTH, FRONT_OFFSET, EgoState

JSON_FILE, MARKDOWN_FILE = "lead_probe.json", "lead_probe.md"
STRAIGHT_CURVATURE = 1.0 / 300.0  # 1/m, the most the road may bend over the probe's stretch
CLEAR_AHEAD_M = 60.0  # m, no traffic light or pedestrian this near ahead of the front bumper
LEADS = ("standing", "moving")


@dataclasses.dataclass(frozen=True)
class LeadScene:
    """A frame with a lead to probe: the scene, the lead's box index in it, the lead's route
    arc length and lateral offset and the ego's (m, left +)."""

    frame: int
    scene: SceneSnapshot
    lead_index: int
    lead_s: float
    lead_d: float
    ego_d: float


def lead_scenes(log: DriveLog) -> list[LeadScene]:
    """The first frame with a full history of each lead episode (consecutive frames whose
    binding obstacle is a lead) on a straight stretch with no light or pedestrian ahead, and
    its lead box."""
    route = log.world.route
    out: list[LeadScene] = []
    following = False
    for k in range(HISTORY_STEPS - 1, log.frame_count):
        info = log.infos[k]
        was_following, following = following, info.reason == "lead"
        if not following or was_following:
            continue
        ahead = info.route_s + np.arange(0.0, CLEAR_AHEAD_M, 2.0)
        if (np.abs(route.curvature_at(ahead)).max() > STRAIGHT_CURVATURE
                or (info.light_gap is not None and info.light_gap < CLEAR_AHEAD_M)
                or info.ped_gap is not None):
            continue
        lead = _lead_box(log.scenes[k], route, info.route_s, info.route_d)
        if lead is not None:
            out.append(LeadScene(k, log.scenes[k], *lead, info.route_d))
    return out


def _lead_box(scene: SceneSnapshot, route, ego_s: float, ego_d: float
              ) -> tuple[int, float, float] | None:
    """(box index, route arc length, lateral offset) of the nearest vehicle ahead in the
    ego's lane."""
    best = None
    for i, box in enumerate(scene.boxes):
        if box.kind == "pedestrian":
            continue
        s, d = route.project((box.x, box.y), hint=ego_s, window=2 * CLEAR_AHEAD_M)
        if s > ego_s and abs(d - ego_d) < (box.width + EGO_WIDTH) / 2 and (
                best is None or s < best[1]):
            best = (i, s, d)
    return best


def approach_scenes(route, lead: LeadScene, gap: float, speed: float, moving: bool,
                    num_frames: int, frame_dt: float, moving_mps: float | None = None
                    ) -> list[SceneSnapshot]:
    """The frames (oldest first) of the ego coming up in its lane at `speed` with its front
    bumper `gap` short of the lead's rear at the last, the lead standing with its brake
    lights on or (`moving`) driving ahead at `moving_mps` (None: the ego's speed) with them
    off."""
    lead_mps = (speed if moving_mps is None else moving_mps) if moving else 0.0
    box = lead.scene.boxes[lead.lead_index]
    s0 = lead.lead_s - box.length / 2 - FRONT_OFFSET - gap
    scenes = []
    for i in range(num_frames):
        back = speed * (num_frames - 1 - i) * frame_dt
        x, y, yaw = lane_pose(route, s0 - back, lead.ego_d)
        lead_back = lead_mps * (num_frames - 1 - i) * frame_dt
        lead_x, lead_y, lead_yaw = lane_pose(route, lead.lead_s - lead_back, lead.lead_d)
        shown = dataclasses.replace(box, x=lead_x, y=lead_y, yaw=lead_yaw, braking=not moving)
        boxes = tuple(shown if j == lead.lead_index else b
                      for j, b in enumerate(lead.scene.boxes))
        scenes.append(dataclasses.replace(lead.scene, ego=EgoState(x, y, yaw, speed),
                                          route_s=s0 - back, boxes=boxes))
    return scenes


def lane_pose(route, s: float, d: float) -> tuple[float, float, float]:
    """(x, y, yaw) at route arc length s and lateral offset d (left +)."""
    x, y = route.offset_point(s, d)
    return x, y, route.pose_at(s)[2]


def approach_window(renderer: Renderer, route, lead: LeadScene, gap: float, speed: float,
                    moving: bool, num_frames: int, frame_dt: float, num_history: int,
                    history_dt: float, moving_mps: float | None = None) -> Window:
    """`approach_scenes` rendered, with the straight constant-speed history that leads to
    the last."""
    scenes = approach_scenes(route, lead, gap, speed, moving, num_frames, frame_dt,
                             moving_mps)
    images = np.stack([np.stack(renderer.render(scene)) for scene in scenes],
                      axis=1)  # images: [N_cam, F, H, W, 3]
    stamps = np.tile(np.arange(num_frames) * frame_dt, (images.shape[0], 1))
    s0 = scenes[-1].route_s
    past = np.array([lane_pose(route, s0 - speed * (num_history - 1 - j) * history_dt,
                               lead.ego_d)
                     for j in range(num_history)])  # past: [N_hist, 3] (x, y, yaw)
    local = to_frame(np.array(lane_pose(route, s0, lead.ego_d)), past)
    history = np.stack([local[:, 0], local[:, 1], np.zeros(num_history), local[:, 2]], axis=1)
    return Window(t0=float(stamps[0, -1]), images=images, image_stamps=stamps,
                  ego_history=history, speed=speed)


def probe_seed(engine, seed: int, seconds: float, gaps: tuple[float, ...],
               speeds: tuple[float, ...], coc_ids: list[int] | None = None,
               moving_mps: float | None = None) -> list[dict]:
    """One row per (lead scene, speed, gap, standing or moving at `moving_mps`, None: the
    ego's speed): the plan's CoC, decision, travel and clearance; with `coc_ids` every plan
    is made under that CoC (`Engine.step`)."""
    cfg = engine.model.cfg
    log = simulate(seed, seconds)
    renderer = Renderer(log.world)
    rows = []
    for lead in lead_scenes(log):
        for speed in speeds:
            for gap in gaps:
                for kind in LEADS:
                    window = approach_window(renderer, log.world.route, lead, gap, speed,
                                             kind == "moving", cfg.prompt.num_frames,
                                             cfg.prompt.frame_dt, cfg.action.num_history,
                                             cfg.action.history_dt, moving_mps)
                    engine.reset()
                    plan = engine.step(window, coc_ids)
                    travel = float(np.max(plan.trajectories[0, :, 0]))
                    rows.append({"seed": seed, "frame": lead.frame, "speed": speed,
                                 "gap_m": gap, "lead": kind, "coc": plan.coc_text,
                                 "decision": coc_decision(plan.coc_text),
                                 "travel_m": round(travel, 3),
                                 "clearance_m": round(gap - travel, 3),
                                 "stops_short": travel <= gap,
                                 "coc_forced": coc_ids is not None})
    return rows


def _decisions(rows: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["decision"]] = counts.get(row["decision"], 0) + 1
    return dict(sorted(counts.items()))


def travel_per_gap(rows: list[dict]) -> float | None:
    """Least-squares slope of the travel (gap less clearance) of `rows` against their gap;
    None with fewer than two gaps."""
    gaps = np.array([row["gap_m"] for row in rows], dtype=float)
    if np.unique(gaps).size < 2:
        return None
    travel = gaps - np.array([row["clearance_m"] for row in rows], dtype=float)
    return round(float(np.polyfit(gaps, travel, 1)[0]), 3)


def summarize(rows: list[dict]) -> list[dict]:
    """Per (speed, gap): lead scenes, plans stopping short behind the standing and behind the
    moving lead, scenes read (stop short behind the standing one only), the standing plans'
    median clearance, the decisions of each, and the slope of the standing plans' travel
    against the gap over all gaps of that speed."""
    cells: dict[tuple, dict[tuple, dict[str, dict]]] = {}
    for row in rows:
        cell = cells.setdefault((row["speed"], row["gap_m"]), {})
        cell.setdefault((row["seed"], row["frame"]), {})[row["lead"]] = row
    slopes = {speed: travel_per_gap([r for r in rows
                                     if r["speed"] == speed and r["lead"] == "standing"])
              for speed in {row["speed"] for row in rows}}
    out = []
    for (speed, gap), pairs in sorted(cells.items()):
        standing = [p["standing"] for p in pairs.values()]
        moving = [p["moving"] for p in pairs.values()]
        out.append({"speed": speed, "gap_m": gap, "leads": len(pairs),
                    "standing_stops_short": sum(r["stops_short"] for r in standing),
                    "moving_stops_short": sum(r["stops_short"] for r in moving),
                    "read": sum(p["standing"]["stops_short"] and not p["moving"]["stops_short"]
                                for p in pairs.values()),
                    "standing_clearance_m_median": float(np.median(
                        [r["clearance_m"] for r in standing])),
                    "standing_decisions": _decisions(standing),
                    "moving_decisions": _decisions(moving),
                    "standing_travel_per_gap": slopes[speed]})
    return out


def markdown(summary: list[dict], model_dir: str, seeds: list[int],
             forced_coc: str | None = None, moving_mps: float | None = None) -> str:
    moving = "the ego's speed" if moving_mps is None else f"{moving_mps:g} m/s"
    lines = [f"# Lead probe: {model_dir}", "",
             f"Held-out seeds {seeds[0]} .. {seeds[-1]}; the first frame of each lead on a "
             f"straight road, the ego coming up at the speed shown, the lead standing or "
             f"driving at {moving}.", ""]
    if forced_coc is not None:
        lines += [f"Every plan is made under the CoC \"{forced_coc}\" (written to the cache in "
                  f"place of the model's own).", ""]
    lines += ["| speed (m/s) | gap (m) | stopping takes (m/s^2) | leads | stop short: standing "
              "| stop short: moving | read | standing: clearance, median (m) | decisions: "
              "standing | decisions: moving | standing: travel per m of gap |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]

    def names(counts: dict[str, int]) -> str:
        return ", ".join(f"{name} {n}" for name, n in counts.items())

    for s in summary:
        lines.append(f"| {s['speed']:g} | {s['gap_m']:g} | "
                     f"{s['speed'] ** 2 / (2 * s['gap_m']):.1f} | {s['leads']} | "
                     f"{s['standing_stops_short']} | {s['moving_stops_short']} | {s['read']} | "
                     f"{s['standing_clearance_m_median']:.1f} | "
                     f"{names(s['standing_decisions'])} | {names(s['moving_decisions'])} | "
                     f"{table_cell(s['standing_travel_per_gap'], '.2f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_probe_arguments(p)
    p.add_argument("--gaps-m", type=float_values("--gaps-m", 3.0, 50.0), default=(8.0, 15.0, 25.0),
                   help="front bumper to the lead's rear at t0 (m)")
    p.add_argument("--speeds", type=float_values("--speeds", 1.0, 15.0), default=(4.0, 8.0),
                   help="the ego's speed coming up (m/s)")
    p.add_argument("--coc", default=None,
                   help="plan every approach under this CoC instead of the model's own, "
                        "which shows whether the action expert follows the words")
    p.add_argument("--moving-mps", type=float_values("--moving-mps", 0.5, 15.0), default=None,
                   help="the moving lead's speed (m/s; default: the ego's, so that the gap "
                        "holds); a slow one closes the gap as a standing one does, only slower")
    args = p.parse_args(argv)
    if args.moving_mps is not None and len(args.moving_mps) != 1:
        p.error("--moving-mps takes one speed")
    moving_mps = None if args.moving_mps is None else args.moving_mps[0]
    return run_probe(p, args, lambda engine, seed: probe_seed(
        engine, seed, args.seconds, args.gaps_m, args.speeds,
        engine.tokenizer.encode(args.coc) if args.coc else None, moving_mps), summarize,
        lambda summary, model_dir, seeds: markdown(summary, model_dir, seeds, args.coc,
                                                   moving_mps),
        JSON_FILE, MARKDOWN_FILE)


if __name__ == "__main__":
    sys.exit(main())
