"""Does the model read the traffic light while the ego stands at a stop line? At the middle of
every red-light wait of held-out drives, the standing scene is rendered with the lights red
and with them green, with the ego where the expert waits and moved back along its heading,
and planned on (the same frame four times, a standing history). A plan goes when its CoC does
not name stopping. A model that reads the lamp goes under green and stays under red; one that
does not answers both colours alike. Writes lamp_probe.json and lamp_probe.md in OUT.

`python -m flashdrive_ros.eval.lamp_probe --model-dir DIR --out DIR [--drives N]
[--first-seed N] [--seconds S] [--back-m 0,1,2] [--device cpu|cuda]`
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from flashdrive_ros.engine.types import Window
from flashdrive_ros.eval.scene_probe import add_probe_arguments, run_probe
from flashdrive_ros.sim.drive import SceneSnapshot, simulate
from flashdrive_ros.sim.labels import DECISION_WORDS
from flashdrive_ros.sim.lamp_pairs import scene_moved_back
from flashdrive_ros.sim.light_branches import red_waits
from flashdrive_ros.sim.render import Renderer

JSON_FILE, MARKDOWN_FILE = "lamp_probe.json", "lamp_probe.md"
COLOURS = ("red", "green")
STOP_WORD = DECISION_WORDS["stop"]


def moved_back(scene: SceneSnapshot, back_m: float, colour: str) -> SceneSnapshot:
    """The scene with the ego `back_m` behind its pose along its heading and every light
    showing `colour`."""
    return dataclasses.replace(scene_moved_back(scene, back_m, scene.ego.yaw),
                               light_states=tuple(colour for _ in scene.light_states))


def standing_window(renderer: Renderer, scene: SceneSnapshot, num_frames: int,
                    num_history: int, frame_dt: float) -> Window:
    """The scene as a window of a car that has stood still: every frame the same picture."""
    views = np.stack(renderer.render(scene))  # views: [N_cam, H_cam, W_cam, 3]
    images = np.repeat(views[:, None], num_frames, axis=1)
    stamps = np.tile(np.arange(num_frames) * frame_dt, (images.shape[0], 1))
    return Window(t0=float(stamps[0, -1]), images=images, image_stamps=stamps,
                  ego_history=np.zeros((num_history, 4)), speed=0.0)


def probe_seed(engine, seed: int, seconds: float, backs: tuple[float, ...]) -> list[dict]:
    """One row per (wait, back, colour): the plan's CoC and whether it goes."""
    cfg = engine.model.cfg
    log = simulate(seed, seconds)
    renderer = Renderer(log.world)
    rows = []
    for wait in red_waits(log):
        k = (wait.first + wait.last) // 2
        for back in backs:
            for colour in COLOURS:
                window = standing_window(renderer, moved_back(log.scenes[k], back, colour),
                                         cfg.prompt.num_frames, cfg.action.num_history,
                                         cfg.prompt.frame_dt)
                engine.reset()
                coc = engine.step(window).coc_text
                rows.append({"seed": seed, "frame": k, "back_m": back, "colour": colour,
                             "coc": coc, "goes": coc.split(maxsplit=1)[:1] != [STOP_WORD]})
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Per back_m: scenes, plans that go under red and under green, and scenes whose two
    plans differ (go under green, stay under red: `read`)."""
    out = []
    for back in sorted({row["back_m"] for row in rows}):
        pairs: dict[tuple, dict[str, bool]] = {}
        for row in rows:
            if row["back_m"] == back:
                pairs.setdefault((row["seed"], row["frame"]), {})[row["colour"]] = row["goes"]
        out.append({"back_m": back, "scenes": len(pairs),
                    "red_go": sum(p["red"] for p in pairs.values()),
                    "green_go": sum(p["green"] for p in pairs.values()),
                    "read": sum(p["green"] and not p["red"] for p in pairs.values())})
    return out


def markdown(summary: list[dict], model_dir: str, seeds: list[int]) -> str:
    lines = [f"# Lamp probe: {model_dir}", "",
             f"Held-out seeds {seeds[0]} .. {seeds[-1]}; one standing scene per red wait, "
             f"under red and under green.", "",
             "| ego moved back | scenes | go under red | go under green | read (green go, "
             "red stay) |", "|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['back_m']:g} m | {s['scenes']} | {s['red_go']} | {s['green_go']} "
                     f"| {s['read']} |")
    return "\n".join(lines) + "\n"


def _backs(text: str) -> tuple[float, ...]:
    values = tuple(float(v) for v in text.split(","))
    if not values or any(not (np.isfinite(v) and 0.0 <= v <= 10.0) for v in values):
        raise argparse.ArgumentTypeError(f"--back-m takes distances in [0, 10] m, got {text}")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_probe_arguments(p)
    p.add_argument("--back-m", type=_backs, default=(0.0, 1.0, 2.0),
                   help="distances the ego is moved back from the expert's waiting spot")
    args = p.parse_args(argv)
    return run_probe(p, args, lambda engine, seed: probe_seed(
        engine, seed, args.seconds, args.back_m), summarize, markdown, JSON_FILE,
        MARKDOWN_FILE)


if __name__ == "__main__":
    sys.exit(main())
