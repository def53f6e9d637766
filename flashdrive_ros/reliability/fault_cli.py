"""`flashdrive-faults BAG --faults SPEC --out DIR [--through-ros]`: replay a bag once clean
and once per fault (seeded), offline and optionally through ROS, and write DIR/faults.json
and DIR/faults.md (the fault table)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.reliability.fault_run import run_offline, run_through_ros
from flashdrive_ros.reliability.fault_table import WindowSpan, fault_row, markdown_table
from flashdrive_ros.reliability.faults import (
    FAULT_DEFAULTS,
    FaultedStream,
    FaultSpecError,
    apply_fault,
    parse_faults,
)
from flashdrive_ros.ros.harness.stream import read_stream
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.settings import add_setting_argument


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdrive-faults", description=__doc__.split(":")[1])
    p.add_argument("bag", help="rosbag2 directory (a flashdrive-sim drive)")
    p.add_argument("--faults", default="all",
                   help=f"'all' or comma-separated name[=value] of {', '.join(FAULT_DEFAULTS)}")
    p.add_argument("--out", required=True)
    p.add_argument("--model-dir", default=None, help="default: the embedded model")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start", type=float, default=4.0,
                   help="seconds into the bag at which each fault begins")
    p.add_argument("--duration", type=float, default=3.0,
                   help="seconds the probabilistic faults (drop, jitter, ...) act")
    p.add_argument("--through-ros", action="store_true",
                   help="also play each faulted stream into a drive node process over DDS")
    p.add_argument("--no-offline", action="store_true", help="through ROS only")
    p.add_argument("--rate", type=float, default=1.0, help="playback rate through ROS")
    add_setting_argument(p, EngineConfig, "device")
    return p


def run(args: argparse.Namespace) -> list[dict]:
    from flashdrive_ros.engine.engine import Engine
    from flashdrive_ros.ros.node import window_builder

    faults = parse_faults(args.faults, args.start, args.duration)
    model_dir = Path(args.model_dir or default_model_dir())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    params = DriveParams(model_dir=str(model_dir), device=args.device, overlay_camera="")
    topics = {topic: "sensor_msgs/msg/CompressedImage" for topic in params.camera_topics}
    topics[params.odom_topic] = "nav_msgs/msg/Odometry"
    messages = read_stream(args.bag, list(topics))
    streams = {f.name: apply_fault(messages, f, args.seed, params.camera_topics,
                                   params.odom_topic) for f in faults}
    clean = FaultedStream(messages)
    rows: list[dict] = []
    if not args.no_offline:
        engine = Engine.load(model_dir, EngineConfig(device=args.device))
        engine.warmup()
        cfg = engine.model.cfg
        span = WindowSpan((cfg.prompt.num_frames - 1) * cfg.prompt.frame_dt,
                          window_builder(cfg, 1).limits.frame_tolerance,
                          (cfg.action.num_history - 1) * cfg.action.history_dt)

        def offline(stream):
            return run_offline(stream, engine, window_builder(cfg, len(params.camera_names)),
                               params)

        baseline = offline(clean)
        rows += [fault_row(f, "offline", offline(streams[f.name]), baseline, streams[f.name],
                           span, params.odom_topic) for f in faults]
    if args.through_ros:
        from flashdrive_ros.model.config import ModelConfig

        cfg = ModelConfig.load(model_dir / "config.json")
        span = WindowSpan((cfg.prompt.num_frames - 1) * cfg.prompt.frame_dt, 0.04,
                          (cfg.action.num_history - 1) * cfg.action.history_dt)
        parameters = {"model_dir": str(model_dir.resolve()), "device": args.device,
                      "overlay_camera": "", "image_reliability": "reliable"}

        def through_ros(label, stream):
            return run_through_ros(stream, f"drive_node_faults_{os.getpid()}_{label}",
                                   parameters, topics, out, args.rate)

        baseline = through_ros("clean", clean)
        rows += [fault_row(f, "ROS", through_ros(f.name, streams[f.name]), baseline,
                           streams[f.name], span, params.odom_topic) for f in faults]
    command = "flashdrive-faults " + " ".join(sys.argv[1:])
    (out / "faults.json").write_text(json.dumps({"command": command, "seed": args.seed,
                                                 "rows": rows}, indent=2) + "\n")
    (out / "faults.md").write_text(f"`{command}`\n\n{markdown_table(rows)}")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        rows = run(args)
    except (FaultSpecError, ValueError, RuntimeError, OSError) as exc:
        print(f"flashdrive-faults: {exc}", file=sys.stderr)
        return 2
    print(markdown_table(rows))
    return 0 if all(r["stayed_up"] and r["recovered"] and r["fault_named"]
                    and r["plans_from_spoiled_windows"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
