"""Does the plan end behind a car standing in the lane? The lead-stop forks (sim/lead_stops.py)
of held-out drives place a car standing in the ego lane ahead and bring the ego up to it at
speed, late. In each fork every `every`-th frame with the car standing within NEAR_M of the
front bumper and the ego driving at MIN_MPS or more is planned under the expert's own CoC
(written to the cache in place of the model's, `Engine.step`), so that only the action expert
is asked where to stop. The expert's plan ends a margin short of the car. Both travels (the
furthest point of the plan ahead) are fitted as travel = a + b speed + c gap: the expert's
gives c near 1 and b near 0; a plan that runs on the ego's speed gives c near 0 and a large b.
`overrun` counts plans that end past the car. Unlike the lead probe's frozen approaches these
are the windows of training forks (the same world, renderer, history and labels) from seeds
never trained on. Writes fork_probe.json and fork_probe.md in OUT.

`python -m flashdrive_ros.eval.fork_probe --model-dir DIR --out DIR [--drives N]
[--first-seed N] [--seconds S] [--per-drive N] [--every N] [--device cpu|cuda]`
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator

import numpy as np

from flashdrive_ros.engine.types import Window
from flashdrive_ros.eval.scene_probe import add_probe_arguments, run_probe, table_cell
from flashdrive_ros.sim.drive import FRAME_HZ, HISTORY_STEPS, SUBSTEPS
from flashdrive_ros.sim.labels import STANDING_MPS, label_drive
from flashdrive_ros.sim.lead_stops import LeadStops, lead_stop_log, seed_lead_stops
from flashdrive_ros.sim.render import Renderer

JSON_FILE, MARKDOWN_FILE = "fork_probe.json", "fork_probe.md"
NEAR_M = 40.0  # m, front bumper to the standing car's rear: windows with the car nearer
MIN_MPS = 1.0  # m/s: windows with the ego slower than this are left out
GAP_BANDS_M = (0.0, 6.0, 12.0, 20.0, NEAR_M)  # m, the summary's gap bands


@dataclasses.dataclass(frozen=True)
class ForkWindow:
    """One probed frame of a fork: the window, the expert's CoC and travel and the gap to the
    standing car."""

    fork: int
    frame: int
    window: Window
    coc: str
    expert_travel: float
    gap: float


def fork_windows(seed: int, seconds: float, spec: LeadStops, num_frames: int,
                 frame_dt: float, every: int) -> Iterator[ForkWindow]:
    """The probed frames of the seed's lead-stop forks, labelled with standing-lead words."""
    frame_step = int(round(frame_dt * FRAME_HZ))
    first = max(HISTORY_STEPS - 1, (num_frames - 1) * frame_step)
    for fork, stop in enumerate(seed_lead_stops(seed, seconds, spec)):
        log, _ = lead_stop_log(seed, seconds, stop, spec)
        labels = label_drive(log.infos, log.frame_count, standing_lead=True)
        renderer = Renderer(log.world)
        rendered: dict[int, np.ndarray] = {}  # frame -> [N_cam, H, W, 3]
        for k in range(first, log.frame_count, every):
            info = log.infos[k]
            if (info.vehicle_gap is None or info.vehicle_gap >= NEAR_M
                    or info.vehicle_speed is None or info.vehicle_speed >= STANDING_MPS
                    or info.v < MIN_MPS):
                continue
            frames = [k - (num_frames - 1 - j) * frame_step for j in range(num_frames)]
            rendered = {f: rendered[f] if f in rendered
                        else np.stack(renderer.render(log.scenes[f])) for f in frames}
            images = np.stack([rendered[f] for f in frames],
                              axis=1)  # images: [N_cam, F, H, W, 3]
            stamps = np.tile(np.array(frames, dtype=float) / FRAME_HZ, (images.shape[0], 1))
            window = Window(t0=k / FRAME_HZ, images=images, image_stamps=stamps,
                            ego_history=log.history(k), speed=float(log.ego[k * SUBSTEPS, 4]))
            yield ForkWindow(fork, k, window, labels[k].coc,
                             float(np.max(log.future(k)[:, 0])), float(info.vehicle_gap))


def probe_seed(engine, seed: int, seconds: float, spec: LeadStops, every: int) -> list[dict]:
    """One row per probed frame: the gap, the speed, the expert's CoC and travel and the
    plan's travel under that CoC."""
    cfg = engine.model.cfg
    rows = []
    for item in fork_windows(seed, seconds, spec, cfg.prompt.num_frames, cfg.prompt.frame_dt,
                             every):
        engine.reset()
        plan = engine.step(item.window, engine.tokenizer.encode(item.coc))
        travel = float(np.max(plan.trajectories[0, :, 0]))
        rows.append({"seed": seed, "fork": item.fork, "frame": item.frame,
                     "speed": round(item.window.speed, 3), "gap_m": round(item.gap, 3),
                     "coc": item.coc, "expert_travel_m": round(item.expert_travel, 3),
                     "travel_m": round(travel, 3), "overrun": travel > item.gap})
    return rows


def fit_travel(speed: np.ndarray, gap: np.ndarray, travel: np.ndarray) -> dict | None:
    """Least squares travel = a + b speed + c gap ([N] each); None with fewer than 4 rows or
    speeds and gaps that do not tell b and c apart."""
    design = np.stack([np.ones_like(speed), speed, gap], axis=1)  # design: [N, 3]
    if len(travel) < 4 or np.linalg.matrix_rank(design) < 3:
        return None
    (a, b, c), *_ = np.linalg.lstsq(design, travel, rcond=None)
    return {"a_m": round(float(a), 3), "b_s": round(float(b), 3), "c": round(float(c), 3)}


def summarize(rows: list[dict]) -> list[dict]:
    """One entry per travel (the expert's, the plan's): the fit over all rows, the mean
    absolute difference from the expert's travel, the overruns, and per gap band the windows
    and the median travel."""
    speed = np.array([r["speed"] for r in rows], dtype=float)
    gap = np.array([r["gap_m"] for r in rows], dtype=float)
    expert = np.array([r["expert_travel_m"] for r in rows], dtype=float)
    plan = np.array([r["travel_m"] for r in rows], dtype=float)
    out = []
    for name, travel in (("expert", expert), ("plan", plan)):
        bands = []
        for low, high in zip(GAP_BANDS_M, GAP_BANDS_M[1:]):
            inside = (gap >= low) & (gap < high)
            bands.append({"gap_m": [low, high], "windows": int(inside.sum()),
                          "travel_m_median": (round(float(np.median(travel[inside])), 2)
                                              if inside.any() else None)})
        out.append({"travel": name, "windows": len(rows), "fit": fit_travel(speed, gap, travel),
                    "mean_abs_from_expert_m": (round(float(np.abs(travel - expert).mean()), 3)
                                               if rows else None),
                    "overruns": int((travel > gap).sum()), "bands": bands})
    return out


def markdown(summary: list[dict], model_dir: str, seeds: list[int]) -> str:
    lines = [f"# Fork probe: {model_dir}", "",
             f"Held-out seeds {seeds[0]} .. {seeds[-1]}: the lead-stop forks' frames with a car "
             f"standing within {NEAR_M:g} m ahead and the ego driving, planned under the "
             f"expert's CoC; {summary[0]['windows']} windows. Fit: travel = a + b speed + "
             f"c gap (the expert's c is about 1).", "",
             "| travel of | a (m) | b (s) | c (m per m of gap) | mean abs. from expert (m) "
             "| ends past the car |", "|---|---|---|---|---|---|"]
    for s in summary:
        fit = s["fit"] or {}
        coefs = " | ".join(table_cell(fit.get(key), ".2f") for key in ("a_m", "b_s", "c"))
        error = table_cell(s["mean_abs_from_expert_m"], ".2f")
        lines.append(f"| {s['travel']} | {coefs} | {error} | {s['overruns']} of "
                     f"{s['windows']} |")
    lines += ["", "| gap band (m) | windows | expert travel, median (m) | plan travel, "
              "median (m) |", "|---|---|---|---|"]
    for expert, plan in zip(summary[0]["bands"], summary[1]["bands"]):
        low, high = expert["gap_m"]
        lines.append(f"| {low:g}-{high:g} | {expert['windows']} | "
                     f"{table_cell(expert['travel_m_median'], '.1f')} | "
                     f"{table_cell(plan['travel_m_median'], '.1f')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_probe_arguments(p)
    p.set_defaults(drives=8)
    p.add_argument("--per-drive", type=int, default=2, help="forks drawn per drive")
    p.add_argument("--every", type=int, default=3, help="probe every N-th frame of a fork")
    args = p.parse_args(argv)
    if args.per_drive < 1 or args.every < 1:
        p.error("--per-drive and --every must be >= 1")
    spec = LeadStops(per_drive=args.per_drive)
    return run_probe(p, args, lambda engine, seed: probe_seed(engine, seed, args.seconds, spec,
                                                              args.every),
                     summarize, markdown, JSON_FILE, MARKDOWN_FILE)


if __name__ == "__main__":
    sys.exit(main())
