"""`flashdrive-soak --bag BAG --minutes M --out DIR`: loop a bag through ROS into the drive
node and record its memory, threads and latency over time (DIR/soak.json)."""

from __future__ import annotations

import argparse
import json
import sys

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.reliability.soak import SoakSettings, run_soak
from flashdrive_ros.settings import add_setting_argument


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdrive-soak", description=__doc__.split(":")[1])
    p.add_argument("--bag", required=True, help="rosbag2 directory (a flashdrive-sim drive)")
    p.add_argument("--minutes", type=float, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--model-dir", default=None, help="default: the embedded model")
    add_setting_argument(p, EngineConfig, "device")
    p.add_argument("--sample-s", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--rate", type=float, default=1.0, help="bag seconds per wall second")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = SoakSettings(bag=args.bag, model_dir=args.model_dir or default_model_dir(),
                                out_dir=args.out, seconds=args.minutes * 60.0,
                                sample_s=args.sample_s, rate=args.rate, device=args.device)
        report = run_soak(settings)
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"flashdrive-soak: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in report.items() if k != "timeline"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
