"""`flashdrive-sim`: write a synthetic drive as a rosbag2, or training shards."""

from __future__ import annotations

import argparse
import sys
import time

from flashdrive_ros.sim.bag import FORMATS, default_workers, write_bag
from flashdrive_ros.sim.cameras import DEFAULT_HEIGHT, DEFAULT_WIDTH


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _size(text: str) -> int:
    value = int(text)
    if value < 8 or value > 4096:
        raise argparse.ArgumentTypeError(f"image size must be in 8..4096, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdrive-sim", description=__doc__)
    p.add_argument("--out", required=True, help="bag directory to create (must not exist)")
    p.add_argument("--seconds", type=_positive_float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=sorted(FORMATS), default="mcap")
    p.add_argument("--width", type=_size, default=DEFAULT_WIDTH)
    p.add_argument("--height", type=_size, default=DEFAULT_HEIGHT)
    p.add_argument("--workers", type=int, default=default_workers(),
                   help="render processes (output is identical for any value)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        print("flashdrive-sim: --workers must be >= 1", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        summary = write_bag(args.out, args.seconds, args.seed, args.format, args.width,
                            args.height, workers=args.workers)
    except (FileExistsError, ValueError) as exc:
        print(f"flashdrive-sim: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {summary.path} ({args.format}): {summary.seconds:g} s, {summary.frames} "
          f"frames from {(len(summary.topics) - 3) // 2} cameras, {summary.odometry} odometry, "
          f"in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
