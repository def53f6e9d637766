"""`flashdrive-replay BAG --model-dir DIR --out OUTDIR [--mode flashdrive|baseline|compare]
[--through-ros [--node-param NAME=VALUE ...]] [--topics-yaml FILE] [--backend torch|tensorrt]`:
replay a rosbag through the planner and report. Exit status 0; 1 when no window was
planned (the main reasons on stderr), 2 when the replay cannot run."""

from __future__ import annotations

import argparse
import sys


from flashdrive_ros.eval.dds_profile import AUTO
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.input_notes import input_lines
from flashdrive_ros.eval.replay import run_replay
from flashdrive_ros.eval.replay_options import ReplayOptions, parse_node_params
from flashdrive_ros.eval.report import print_summary
from flashdrive_ros.eval.skip_advice import planned_nothing, skip_report
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.ros.transport import DEFAULT_LATE_TOLERANCE_S
from flashdrive_ros.settings import add_setting_argument


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdrive-replay", description=__doc__.split(":")[1])
    p.add_argument("bag", help="rosbag2 directory (mcap or sqlite3), or one .mcap / .db3 file "
                   "of a recording that was never closed")
    p.add_argument("--model-dir", default=None,
                   help="model directory (default: the embedded model)")
    p.add_argument("--out", required=True, help="output directory for report.json, "
                   "report.md and plots")
    add_setting_argument(p, ReplayOptions, "mode")
    p.add_argument("--through-ros", action="store_true",
                   help="play the bag over DDS into the real drive node and record its output")
    p.add_argument("--topics-yaml", help="YAML with keys cameras (list, slot order), "
                   "odometry, labels (flashdrive-topics BAG --out FILE proposes one)")
    p.add_argument("--camera-topics", help="comma-separated image topics in slot order")
    p.add_argument("--odom-topic", help="nav_msgs/Odometry topic")
    p.add_argument("--labels-topic", help="std_msgs/String JSON labels topic ('' = none)")
    p.add_argument("--rate", type=float, default=1.0,
                   help="playback speed factor through ROS (bag seconds per wall second)")
    for name in ("num_samples", "device", "dtype", "backend", "drafter_file"):
        add_setting_argument(p, ReplayOptions, name)
    add_setting_argument(p, ReplayOptions, "control_rate_hz", flag="--control-rate")
    p.add_argument("--late-tolerance", type=float, default=DEFAULT_LATE_TOLERANCE_S,
                   metavar="SECONDS",
                   help="how long after its stamp a message may be logged (transport "
                        "latency) and still count for the window at that time; through ROS, "
                        "the node's late_tolerance_s unless --node-param sets it (default "
                        "%(default)s)")
    p.add_argument("--max-windows", type=int, default=None, help="stop after N windows")
    p.add_argument("--node-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a drive_node parameter for --through-ros (YAML value, repeatable), "
                        "e.g. --node-param act_apart=true")
    p.add_argument("--dds-profile", default=AUTO, metavar="XML|auto|environment",
                   help="through ROS: Fast DDS profile for the player and the node. auto "
                        "(default): config/fastdds_large_images.xml when the bag's camera "
                        "messages do not fit Fast DDS's default 512 KiB shared-memory segment "
                        "and no profile is set in the environment; environment: the "
                        "environment's DDS configuration")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    return p


def embedded_model_dir() -> str:
    try:
        return str(default_model_dir())
    except OSError as exc:
        raise ReplayError(f"cannot locate the embedded model ({exc}); pass --model-dir") from None


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    cameras = [t.strip() for t in args.camera_topics.split(",")] if args.camera_topics else None
    overrides = {"cameras": cameras, "odometry": args.odom_topic, "labels": args.labels_topic}
    topics = (TopicMapping.from_yaml(args.topics_yaml, **overrides) if args.topics_yaml
              else TopicMapping().with_overrides(**overrides))
    return ReplayOptions(
        bag=args.bag, model_dir=args.model_dir or embedded_model_dir(), out_dir=args.out,
        mode=args.mode, topics=topics, through_ros=args.through_ros, rate=args.rate,
        num_samples=args.num_samples, device=args.device, dtype=args.dtype,
        backend=args.backend, drafter_file=args.drafter_file,
        control_rate_hz=args.control_rate, late_tolerance_s=args.late_tolerance,
        max_windows=args.max_windows, progress=not args.quiet, plots=not args.no_plots,
        node_params=parse_node_params(args.node_param), dds_profile=args.dds_profile)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        options = options_from_args(args)
        report = run_replay(options)
    except ReplayError as exc:
        print(f"flashdrive-replay: error: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print_summary(report)
    return outcome(report, args.out, "flashdrive-replay", args.quiet)


def outcome(report: dict, out, prog: str, quiet: bool = False) -> int:
    """Exit status of a replay (1 when no window was planned, else 0), with the main skip
    reasons and input notes printed (to stderr when nothing was planned)."""
    lines = skip_report(report) + input_lines(report)
    if empty := planned_nothing(report):
        print(f"{prog}: planned no window ({', '.join(empty)}); report in {out}",
              file=sys.stderr)
        print("\n".join(lines or ["  no window was due: the bag is shorter than one "
                                  "window's history and future"]), file=sys.stderr)
        return 1
    if lines and not quiet:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
