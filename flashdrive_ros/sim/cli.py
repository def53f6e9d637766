"""`flashdrive-sim`: write a synthetic drive as a rosbag2, in the simulator's conventions or
(--style vehicle) the way a vehicle logger records it."""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import fields
from pathlib import Path

import yaml

from flashdrive_ros.sim.bag import COMPRESSIONS, FORMATS, LAYOUTS, default_workers, write_bag
from flashdrive_ros.sim.cameras import DEFAULT_HEIGHT, DEFAULT_WIDTH
from flashdrive_ros.sim.vehicle_bag import (
    ENCODINGS,
    VIDEO_MESSAGES,
    VehicleStyle,
    write_vehicle_bag,
)

VEHICLE = VehicleStyle()
FLAGS = {"sizes": "--camera-sizes", "vehicle_topics": "--sim-topics",
         "extra_topics": "--no-extra-topics", "labels": "--no-labels",
         "split_s": "--split-seconds"}


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


def _floats(count: int):
    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            values = ()
        if len(values) != count:
            raise argparse.ArgumentTypeError(f"want {count} comma-separated numbers, got "
                                             f"{text!r}")
        return values
    return parse


def _sizes(text: str) -> tuple[tuple[int, int], ...]:
    try:
        return tuple(tuple(int(v) for v in item.lower().split("x", 1))
                     for item in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"want WxH per camera, comma-separated, got "
                                         f"{text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in text.split(","))


def _pairs(items) -> str:
    return ",".join(f"{a:g}" if isinstance(a, float) else str(a) for a in items)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flashdrive-sim", description=__doc__)
    p.add_argument("--out", required=True, help="bag directory to create (must not exist)")
    p.add_argument("--seconds", type=_positive_float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--format", choices=sorted(FORMATS), default="mcap")
    p.add_argument("--width", type=_size, default=DEFAULT_WIDTH, help="render width")
    p.add_argument("--height", type=_size, default=DEFAULT_HEIGHT, help="render height")
    p.add_argument("--workers", type=int, default=default_workers(),
                   help="render processes (output is identical for any value)")
    p.add_argument("--style", choices=("sim", "vehicle"), default="sim",
                   help="simulator conventions, or as a vehicle logger records "
                        "(the options below)")
    v = p.add_argument_group("vehicle style (with --style vehicle; defaults: VehicleStyle)")
    v.add_argument("--camera-hz", type=_positive_float)
    v.add_argument("--latency-ms", type=_floats(2), metavar="LOW,HIGH",
                   help="range of each camera's transport latency "
                        f"(default {_pairs(VEHICLE.latency_ms)})")
    v.add_argument("--latency-jitter-ms", type=float)
    v.add_argument("--drop-rate", type=float, help="fraction of camera frames not recorded "
                   f"(default {VEHICLE.drop_rate:g})")
    v.add_argument("--stamp-offset-ms", type=float,
                   help="largest per-camera header stamp offset")
    v.add_argument("--camera-sizes", dest="sizes", type=_sizes, metavar="WxH,...",
                   help="per camera in rig order (default "
                        f"{','.join(f'{w}x{h}' for w, h in VEHICLE.sizes)})")
    v.add_argument("--encodings", type=_names, metavar="E,...",
                   help=f"per camera in rig order, each one of {', '.join(ENCODINGS)} "
                        f"(default {','.join(VEHICLE.encodings)})")
    v.add_argument("--odometry-frame", help=f"default {VEHICLE.odometry_frame}")
    v.add_argument("--odometry-offset", type=_floats(3), metavar="X,Y,Z",
                   help="metres added to every odometry position "
                        f"(default {_pairs(VEHICLE.odometry_offset)})")
    v.add_argument("--odometry-latency-ms", type=float)
    v.add_argument("--sim-topics", dest="vehicle_topics", action="store_const", const=False,
                   help="keep the simulator's topic names")
    v.add_argument("--no-extra-topics", dest="extra_topics", action="store_const",
                   const=False, help="no /tf, /rosout and vehicle velocity status")
    v.add_argument("--no-labels", dest="labels", action="store_const", const=False,
                   help="no /sim/labels")
    v.add_argument("--compression", choices=sorted(COMPRESSIONS),
                   help="zstd as ros2 bag record writes it: storage (mcap chunks), file or "
                        "message (default none)")
    v.add_argument("--split-seconds", dest="split_s", type=_positive_float,
                   help="a new bag file every this many seconds (ros2 bag record "
                        "--max-bag-duration)")
    v.add_argument("--layout", choices=LAYOUTS,
                   help="rosbag2 layout: jazzy, or humble (metadata version 5; sqlite3 files "
                        "without message definitions) (default jazzy)")
    v.add_argument("--video-message", choices=tuple(VIDEO_MESSAGES),
                   help="the type of h264 / h265 cameras' packets: sensor_msgs/CompressedImage, "
                        "foxglove_msgs/CompressedVideo or ffmpeg_image_transport_msgs/"
                        "FFMPEGPacket (default compressed_image)")
    v.add_argument("--keyframe-every", type=int,
                   help=f"frames from one video keyframe to the next (default "
                        f"{VEHICLE.keyframe_every})")
    v.add_argument("--topics-out", default=None,
                   help="write the bag's topic mapping as a topics YAML for flashdrive-replay")
    return p


def vehicle_options(args: argparse.Namespace) -> dict:
    """The VehicleStyle fields given on the command line."""
    names = [f.name for f in fields(VehicleStyle)]
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if args.topics_out is not None:
        given["topics_out"] = args.topics_out
    return given


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        print("flashdrive-sim: --workers must be >= 1", file=sys.stderr)
        return 2
    given = vehicle_options(args)
    if args.style == "sim" and given:
        flags = ", ".join(FLAGS.get(k, f"--{k.replace('_', '-')}") for k in given)
        print(f"flashdrive-sim: vehicle options ({flags}) apply with --style vehicle only",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        if args.style == "vehicle":
            given.pop("topics_out", None)
            summary = write_vehicle_bag(args.out, args.seconds, args.seed, VehicleStyle(**given),
                                        args.format, args.width, args.height, args.workers)
        else:
            summary = write_bag(args.out, args.seconds, args.seed, args.format, args.width,
                                args.height, workers=args.workers)
    except (FileExistsError, ValueError) as exc:
        print(f"flashdrive-sim: {exc}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - start
    if args.style == "vehicle":
        if args.topics_out:
            Path(args.topics_out).write_text(yaml.safe_dump(summary.topics, sort_keys=False))
        print(f"wrote {summary.path} ({args.format}, vehicle style): {summary.seconds:g} s, "
              f"{sum(summary.camera_frames)} camera frames ({summary.dropped} dropped), "
              f"{summary.odometry} odometry, in {elapsed:.1f} s")
        print(yaml.safe_dump(summary.topics, sort_keys=False).rstrip())
        return 0
    print(f"wrote {summary.path} ({args.format}): {summary.seconds:g} s, {summary.frames} "
          f"frames from {(len(summary.topics) - 3) // 2} cameras, {summary.odometry} odometry, "
          f"in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
