"""The main job: a held-out synthetic drive replayed through the real drive node over DDS with
the embedded default model, then the summary table (minADE vs constant velocity, latency per
stage, accepted length, control rate held; per scenario tag of the drive's labels: minADE1,
constant velocity, decision match).

`python -m flashdrive_ros.demo [--out DIR] [--seconds S] [--seed N] [--num-samples K]
[--offline] [--compare]`

The sample drive is written once and kept in DIR; each run replaces the replay of the run
before it (DIR/replay_through_ros or DIR/replay_offline).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from flashdrive_ros.eval.cli import outcome
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.replay import ReplayOptions, run_replay
from flashdrive_ros.eval.report import print_summary
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.settings import add_setting_argument
from flashdrive_ros.sim.bag import write_bag
from flashdrive_ros.sim.seeds import EVAL_SEEDS

SAMPLE_SEED = EVAL_SEEDS.start + 3


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdrive-demo", description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/demo", help="output directory")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the sample drive")
    p.add_argument("--seed", type=int, default=SAMPLE_SEED,
                   help="sim seed of the sample drive (default: held out from training)")
    p.add_argument("--model-dir", default=None, help="model directory (default: embedded)")
    add_setting_argument(p, DriveParams, "num_samples", help="trajectory samples per window "
                         "(default: the drive node's; minADE6 needs 6)")
    p.add_argument("--offline", action="store_true",
                   help="feed the engine directly instead of replaying through the ROS node")
    p.add_argument("--compare", action="store_true",
                   help="offline baseline vs flashdrive on the same windows")
    return p


def sample_drive(out: Path, seconds: float, seed: int) -> Path:
    bag = out / f"sample_drive_seed{seed}_{seconds:g}s"
    if not (bag / "metadata.yaml").is_file():
        print(f"writing the sample drive {bag} ({seconds:g} s, seed {seed}) ...", flush=True)
        write_bag(bag, seconds, seed)
    return bag


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bag = sample_drive(out, args.seconds, args.seed)
    through_ros = not (args.offline or args.compare)
    options = ReplayOptions(
        bag=bag, model_dir=args.model_dir or default_model_dir(),
        out_dir=out / ("replay_through_ros" if through_ros else "replay_offline"),
        mode="compare" if args.compare else "flashdrive", through_ros=through_ros,
        num_samples=args.num_samples)
    if options.out_dir.exists():
        print(f"replacing the previous demo replay in {options.out_dir}", flush=True)
        shutil.rmtree(options.out_dir)
    try:
        report = run_replay(options)
    except ReplayError as exc:
        print(f"flashdrive-demo: error: {exc}", file=sys.stderr)
        return 2
    print_summary(report)
    print(f"report: {options.out_dir / 'report.md'}")
    return outcome(report, options.out_dir, "flashdrive-demo")


if __name__ == "__main__":
    sys.exit(main())
