"""`flashdrive-drive --model-dir DIR --seconds S --seed N --out OUTDIR [--through-ros]
[--mode flashdrive|baseline|compare] [--drives K] [--variants A,B] [--latency-ms MS]`:
closed-loop drives in the simulator, the planner's trajectory tracked by a controller."""

from __future__ import annotations

import argparse
import sys

from flashdrive_ros.closed_loop.controller import TrackingConfig
from flashdrive_ros.closed_loop.report import markdown
from flashdrive_ros.closed_loop.run import RunOptions, run
from flashdrive_ros.closed_loop.runner import DriveSettings
from flashdrive_ros.closed_loop.variants import MODE_VARIANTS, VARIANT_NAMES, parse_variants
from flashdrive_ros.eval.replay_options import parse_node_params
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.settings import add_setting_argument, default_of, owned_field
from flashdrive_ros.sim.cameras import DEFAULT_HEIGHT, DEFAULT_WIDTH


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdrive-drive", description=__doc__.split(":")[1])
    p.add_argument("--model-dir", default=None,
                   help="model directory (default: the embedded model)")
    p.add_argument("--seconds", type=float, required=True, help="length of each drive")
    p.add_argument("--world-seconds", type=float, default=None,
                   help="drive in each seed's world of a drive this long (>= --seconds), so "
                        "that a short drive is the start of that longer one (default: "
                        "--seconds; a seed's world depends on the drive's length)")
    seeds = p.add_mutually_exclusive_group(required=True)
    seeds.add_argument("--seed", type=int, help="first simulator seed")
    seeds.add_argument("--seeds", default=None, metavar="S1,S2,...",
                       help="simulator seeds to drive, in place of --seed and --drives")
    p.add_argument("--drives", type=int, default=1, help="drives on seeds seed, seed+1, ...")
    p.add_argument("--out", required=True, help="output directory (report.json, report.md, "
                   "a top-down PNG per drive)")
    p.add_argument("--mode", choices=sorted(MODE_VARIANTS), default="flashdrive")
    p.add_argument("--variants", default=None,
                   help=f"comma-separated planners to run instead of --mode: {VARIANT_NAMES}")
    p.add_argument("--through-ros", action="store_true",
                   help="plan with the real drive_node over DDS (real latency)")
    p.add_argument("--latency-ms", default=None,
                   help="in process: apply each plan this long after its input time, MS for "
                        "every variant or NAME=MS,... per variant (default: each plan's "
                        "measured total latency)")
    p.add_argument("--rate", type=float, default=1.0,
                   help="through ROS: simulated seconds per wall-clock second")
    for name in ("num_samples", "device", "dtype", "drafter_file"):
        add_setting_argument(p, RunOptions, name)
    p.add_argument("--forward-only", choices=("on", "off"),
                   default="on" if default_of(RunOptions, "forward_only") else "off",
                   help=owned_field(RunOptions, "forward_only").metadata["description"])
    p.add_argument("--width", type=int, default=DEFAULT_WIDTH, help="rendered camera width")
    p.add_argument("--height", type=int, default=DEFAULT_HEIGHT,
                   help="rendered camera height")
    p.add_argument("--max-plan-age", type=float, default=TrackingConfig.max_plan_age_s,
                   help="in process: the controller brakes when its plan is older (s)")
    p.add_argument("--node-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a drive_node parameter for --through-ros (YAML value, repeatable)")
    p.add_argument("--workers", type=int, default=RunOptions.workers,
                   help="in process: drives run in this many processes at once")
    p.add_argument("--threads", type=int, default=RunOptions.threads_per_worker,
                   help="torch / OpenCV threads of each drive's process (this process too with "
                        "one worker or one drive)")
    p.add_argument("--no-pictures", action="store_true")
    p.add_argument("--plan-trace", action="store_true",
                   help="write plans_VARIANT_SEED.csv per drive: each followed plan with the "
                   "ego speed, the gap to the vehicle ahead, the next stop line and its light, "
                   "the plan's distance and "
                   "speeds, and its CoC (in process; through ROS the CoC column is empty)")
    p.add_argument("--quiet", action="store_true", help="no summary table")
    return p


def parse_latency(text: str | None) -> tuple[float | None, dict[str, float]]:
    """'MS' -> (MS, {}); 'NAME=MS,...' -> (None, {NAME: MS}); None -> (None, {})."""
    if text is None:
        return None, {}
    try:
        if "=" not in text:
            return float(text), {}
        pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
        return None, {name.strip(): float(ms) for name, ms in pairs}
    except ValueError:
        raise ValueError(f"--latency-ms wants MS or NAME=MS,..., got {text!r}") from None


def parse_seeds(args: argparse.Namespace) -> tuple[int, ...]:
    """The drives' seeds: --seeds S1,S2,... (distinct), else --drives seeds from --seed."""
    if args.seeds is None:
        if args.drives < 1:
            raise ValueError(f"--drives must be >= 1, got {args.drives}")
        return tuple(range(args.seed, args.seed + args.drives))
    try:
        seeds = tuple(int(item) for item in args.seeds.split(","))
    except ValueError:
        raise ValueError(f"--seeds wants S1,S2,... (integers), got {args.seeds!r}") from None
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds names a seed twice: {args.seeds!r}")
    return seeds


def options_from_args(args: argparse.Namespace) -> RunOptions:
    seeds = parse_seeds(args)
    variants = parse_variants(args.variants) if args.variants else MODE_VARIANTS[args.mode]
    if args.model_dir is None:
        try:
            args.model_dir = str(default_model_dir())
        except OSError as exc:
            raise ValueError(f"cannot locate the embedded model ({exc}); pass --model-dir") \
                from None
    latency_ms, variant_latency_ms = parse_latency(args.latency_ms)
    drive = DriveSettings(seconds=args.seconds, latency_ms=latency_ms, width=args.width,
                          height=args.height, world_seconds=args.world_seconds,
                          tracking=TrackingConfig(max_plan_age_s=args.max_plan_age))
    return RunOptions(model_dir=args.model_dir, out_dir=args.out,
                      seeds=seeds,
                      variants=variants, drive=drive, through_ros=args.through_ros,
                      num_samples=args.num_samples, device=args.device, dtype=args.dtype,
                      drafter_file=args.drafter_file,
                      forward_only=args.forward_only == "on",
                      node_params=parse_node_params(args.node_param), rate=args.rate,
                      pictures=not args.no_pictures, plan_trace=args.plan_trace,
                      variant_latency_ms=variant_latency_ms,
                      workers=args.workers, threads_per_worker=args.threads)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        report = run(options_from_args(args))
    except (ValueError, ConfigError, ReplayError, OSError, RuntimeError) as exc:
        print(f"flashdrive-drive: error: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
