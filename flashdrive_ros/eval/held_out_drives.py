"""Held-out 60 s drives straight from the simulator, replayed by a model directory's engine
with streaming on and with full recompute (every window's prompt prefilled afresh) on the
same windows, one drive per worker process; writes held_out.json and held_out.md in OUT and
prints the tables (eval/held_out_breakdown.py).

`python -m flashdrive_ros.eval.held_out_drives --model-dir DIR --out DIR [--drives N]
[--seconds S] [--first-seed N] [--workers W] [--threads T] [--device cpu|cuda]
[--num-samples K] [--streaming-only]`
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.held_out import DriveWindows, replay_drive
from flashdrive_ros.eval.held_out_breakdown import Targets, held_out_report, markdown
from flashdrive_ros.eval.model_compare import PREFILLS, CompareSettings
from flashdrive_ros.eval.process_pool import map_in_processes
from flashdrive_ros.eval.sim_source import SimDriveSource
from flashdrive_ros.model.manifest import read_manifest
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.settings import add_setting_argument, derived, field_problems
from flashdrive_ros.sim.seeds import EVAL_SEEDS, is_eval_seed

DEVICES = ("cpu", "cuda")
JSON_FILE, MARKDOWN_FILE = "held_out.json", "held_out.md"


@dataclass(frozen=True)
class HeldOutSettings:
    """Held-out drives; engines as `CompareSettings` builds them; `streaming_only` skips the
    full-prefill engine (about a third of the time; no streaming-vs-full agreement)."""

    drives: int = 4  # on seeds first_seed .. first_seed + drives - 1, all held out
    seconds: float = 60.0  # length of each drive
    first_seed: int = EVAL_SEEDS.start
    workers: int = 1  # processes, one drive each; 1: in this process
    threads_per_worker: int = 1  # torch threads of each worker process
    device: str = derived(EngineConfig, "device", choices=DEVICES)
    num_samples: int = derived(EngineConfig, "num_samples", help="trajectory samples per "
                               "window (minADE6 needs 6)")
    max_windows: int | None = None  # per drive (None: every window)
    streaming_only: bool = False  # only the streaming engine

    def __post_init__(self) -> None:
        if self.drives < 1:
            raise ValueError(f"drives must be >= 1, got {self.drives}")
        if not self.seconds > 0:
            raise ValueError(f"seconds must be > 0, got {self.seconds}")
        if not (is_eval_seed(self.first_seed) and is_eval_seed(self.first_seed + self.drives - 1)):
            raise ValueError(f"seeds {self.first_seed} .. {self.first_seed + self.drives - 1} "
                             f"leave the held-out range {EVAL_SEEDS.start} .. "
                             f"{EVAL_SEEDS.stop - 1}")
        if self.workers < 1 or self.threads_per_worker < 1:
            raise ValueError(f"workers and threads_per_worker must be >= 1, got "
                             f"{self.workers}, {self.threads_per_worker}")
        if problems := field_problems(self):
            raise ValueError("; ".join(problems))
        self.compare_settings()

    @property
    def seeds(self) -> list[int]:
        return list(range(self.first_seed, self.first_seed + self.drives))

    def compare_settings(self) -> CompareSettings:
        return CompareSettings(num_samples=self.num_samples, device=self.device,
                               max_windows=self.max_windows)


def _engines(model_dir: str, settings: HeldOutSettings) -> dict:
    from flashdrive_ros.engine.engine import Engine

    compare = settings.compare_settings()
    return {name: Engine.load(Path(model_dir), compare.engine_config(Path(model_dir), streaming))
            for name, streaming in PREFILLS.items() if streaming or not settings.streaming_only}


def evaluate_drive(seed: int, model_dir: str, settings: HeldOutSettings) -> DriveWindows:
    """One held-out drive replayed with streaming on and off (the `PREFILLS` names)."""
    engines = _engines(model_dir, settings)
    model = next(iter(engines.values())).model.cfg
    return replay_drive(engines, model, SimDriveSource(seed, settings.seconds),
                        settings.max_windows)


def evaluate_drives(model_dir: Path, settings: HeldOutSettings) -> list[DriveWindows]:
    """Every drive of `settings.seeds`, in seed order."""
    job = partial(evaluate_drive, model_dir=str(model_dir), settings=settings)
    return map_in_processes(job, settings.seeds, settings.workers,
                            settings.threads_per_worker)


def run(model_dir: Path, out: Path, settings: HeldOutSettings,
        targets: Targets | None = None) -> dict:
    """Evaluate, write JSON_FILE and MARKDOWN_FILE in `out`, return the report."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"no model directory (config.json) at {model_dir}")
    drives = evaluate_drives(model_dir, settings)
    if not any(drive.speeds for drive in drives):
        reasons = sorted({code for drive in drives for code in drive.skipped.counts})
        raise ValueError(f"no window was planned (skipped: {', '.join(reasons)}); drives of "
                         f"{settings.seconds:g} s may be too short for the frame history and "
                         f"the 6.4 s future")
    report = {"model_dir": str(model_dir), "model_sha256": _weights_sha256(model_dir),
              "settings": asdict(settings),
              **held_out_report(drives, settings.seeds, targets)}
    out.mkdir(parents=True, exist_ok=True)
    (out / JSON_FILE).write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    (out / MARKDOWN_FILE).write_text(
        f"# Held-out drives: {model_dir}\n\n{settings.drives} drives x {settings.seconds:g} s, "
        f"seeds {settings.seeds[0]} .. {settings.seeds[-1]}, {settings.num_samples} "
        f"sample(s) per window, {settings.device}\n\n{table(report)}")
    return report


def table(report: dict) -> str:
    return markdown(report, minade6=report["settings"]["num_samples"] >= 6)


def _weights_sha256(model_dir: Path) -> str | None:
    files = read_manifest(model_dir) or {}
    return files.get("model.safetensors", {}).get("sha256")


def main(argv: list[str] | None = None) -> int:
    defaults = HeldOutSettings()
    p = argparse.ArgumentParser(prog="held_out_drives", description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", default=None, help="model directory (default: embedded)")
    p.add_argument("--out", required=True)
    p.add_argument("--drives", type=int, default=defaults.drives)
    p.add_argument("--seconds", type=float, default=defaults.seconds)
    p.add_argument("--first-seed", type=int, default=defaults.first_seed)
    p.add_argument("--workers", type=int, default=defaults.workers,
                   help="processes, one drive each")
    p.add_argument("--threads", type=int, default=defaults.threads_per_worker,
                   help="torch threads per worker")
    add_setting_argument(p, HeldOutSettings, "device")
    add_setting_argument(p, HeldOutSettings, "num_samples")
    p.add_argument("--max-windows", type=int, default=None, help="per drive")
    p.add_argument("--streaming-only", action="store_true",
                   help="skip the full-prefill replay (no streaming-vs-full agreement)")
    args = p.parse_args(argv)
    try:
        settings = HeldOutSettings(
            drives=args.drives, seconds=args.seconds, first_seed=args.first_seed,
            workers=args.workers, threads_per_worker=args.threads, device=args.device,
            num_samples=args.num_samples, max_windows=args.max_windows,
            streaming_only=args.streaming_only)
    except ValueError as exc:
        p.error(str(exc))
    try:
        report = run(Path(args.model_dir or default_model_dir()), Path(args.out), settings)
    except (ReplayError, ValueError, OSError) as exc:
        print(f"held_out_drives: error: {exc}", file=sys.stderr)
        return 2
    print(table(report), end="")
    print(f"written: {Path(args.out) / JSON_FILE}, {Path(args.out) / MARKDOWN_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
