"""Writing a synthetic drive as a rosbag2 (mcap or sqlite3) with the rosbags library.

Topics (names in flashdrive_ros.sim.topics): per camera a CompressedImage (JPEG) and a
CameraInfo at 10 Hz, Odometry at 50 Hz, /sim/labels (std_msgs/String JSON) at 10 Hz and one
/tf_static message with the camera mounts. Header stamps are sim time from SIM_EPOCH_NS
(sim/clock.py); bag timestamps equal header stamps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer

from flashdrive_ros.sim import messages as M
from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.sim.clock import stamp_ns
from flashdrive_ros.sim.drive import SUBSTEPS, DriveLog, simulate
from flashdrive_ros.sim.frames import render_frames
from flashdrive_ros.sim.humble_bag import rewrite_as_humble
from flashdrive_ros.sim.labels import Label, label_drive
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.topics import (
    LABELS_TOPIC,
    ODOMETRY_TOPIC,
    TF_STATIC_TOPIC,
    camera_image_topic,
    camera_info_topic,
)

FORMATS = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
COMPRESSIONS = {"none": CompressionMode.NONE, "storage": CompressionMode.STORAGE,
                "file": CompressionMode.FILE, "message": CompressionMode.MESSAGE}
BAG_VERSION = 9
LAYOUTS = ("jazzy", "humble")
_ZERO = QosTime(0, 0)
_LATCHED = Qos(QosHistory.KEEP_LAST, 1, QosReliability.RELIABLE, QosDurability.TRANSIENT_LOCAL,
               _ZERO, _ZERO, QosLiveliness.AUTOMATIC, _ZERO, False)


@dataclass(frozen=True)
class BagSummary:
    path: Path
    seconds: float
    frames: int
    odometry: int
    topics: tuple[str, ...]


@dataclass(frozen=True)
class BagTopic:
    """A topic of a bag being written (its connection in each file of a split bag)."""

    topic: str
    msgtype: str
    latched: bool = False


class BagOut:
    """A rosbag2 being written: messages CDR-serialized on write, compressed as `compression`
    says (COMPRESSIONS: mcap chunks or sqlite3 files / messages with zstd, as `ros2 bag
    record` writes them), split into a new file once a message's log time passes the next
    multiple of `split_ns` from the first (`ros2 bag record --max-bag-duration`)."""

    def __init__(self, out: Path, fmt: str, compression: str = "none",
                 split_ns: int | None = None) -> None:
        self.out, self.fmt, self.compression, self.split_ns = out, fmt, compression, split_ns
        self.topics: list[BagTopic] = []
        self.parts: list[Path] = []
        self.writer: Writer | None = None
        self.connections: dict[BagTopic, object] = {}
        self.part_end_ns: int | None = None
        self._open_part()

    def connection(self, topic: str, msgtype: str, latched: bool = False) -> BagTopic:
        handle = BagTopic(topic, msgtype, latched)
        self.topics.append(handle)
        self._connect(handle)
        return handle

    def put(self, handle: BagTopic, log_ns: int, msg) -> None:
        if self.split_ns is not None:
            if self.part_end_ns is None:
                self.part_end_ns = log_ns + self.split_ns
            elif log_ns >= self.part_end_ns:
                self._close_part()
                self._open_part()
                while self.part_end_ns <= log_ns:
                    self.part_end_ns += self.split_ns
        self.writer.write(self.connections[handle], log_ns,
                          M.TYPESTORE.serialize_cdr(msg, handle.msgtype))

    def close(self) -> None:
        self._close_part()
        if self.split_ns is not None:
            merge_split_parts(self.out, self.parts)

    def _open_part(self) -> None:
        path = self.out if self.split_ns is None else self.out / f".part_{len(self.parts)}"
        self.writer = Writer(path, version=BAG_VERSION, storage_plugin=FORMATS[self.fmt])
        mode = COMPRESSIONS[self.compression]
        if mode != CompressionMode.NONE:
            self.writer.set_compression(mode, CompressionFormat.ZSTD)
        self.writer.open()
        self.parts.append(path)
        self.connections = {}
        for handle in self.topics:
            self._connect(handle)

    def _connect(self, handle: BagTopic) -> None:
        qos = {"offered_qos_profiles": [_LATCHED]} if handle.latched else {}
        self.connections[handle] = self.writer.add_connection(
            handle.topic, handle.msgtype, typestore=M.TYPESTORE, **qos)

    def _close_part(self) -> None:
        self.writer.close()


def merge_split_parts(out: Path, parts: list[Path]) -> None:
    """Move the files of the part bags `parts` (directories in `out`) into `out` as
    <name>_<i>.<ext> and write the one metadata.yaml that lists them, as a split recording
    has."""
    infos, paths = [], []
    for i, part in enumerate(parts):
        info = yaml.safe_load((part / "metadata.yaml").read_text())[
            "rosbag2_bagfile_information"]
        (relative,) = info["relative_file_paths"]
        name = f"{out.name}_{i}{relative[len(part.name):]}"
        (part / relative).rename(out / name)
        (part / "metadata.yaml").unlink()
        part.rmdir()
        infos.append(info)
        paths.append(name)
    merged = dict(infos[0])
    starts = [i["starting_time"]["nanoseconds_since_epoch"] for i in infos]
    ends = [s + i["duration"]["nanoseconds"] for s, i in zip(starts, infos)]
    counts: dict[str, int] = {}
    for info in infos:
        for entry in info["topics_with_message_count"]:
            name = entry["topic_metadata"]["name"]
            counts[name] = counts.get(name, 0) + entry["message_count"]
    merged.update(
        relative_file_paths=paths,
        starting_time={"nanoseconds_since_epoch": min(starts)},
        duration={"nanoseconds": max(ends) - min(starts)},
        message_count=sum(i["message_count"] for i in infos),
        topics_with_message_count=[
            {**entry, "message_count": counts[entry["topic_metadata"]["name"]]}
            for entry in infos[0]["topics_with_message_count"]],
        files=[{**i["files"][0], "path": path} for i, path in zip(infos, paths)])
    (out / "metadata.yaml").write_text(yaml.safe_dump(
        {"rosbag2_bagfile_information": merged}, default_flow_style=False, sort_keys=False))


def check_compression(fmt: str, compression: str) -> None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {sorted(COMPRESSIONS)}, got "
                         f"{compression!r}")
    if compression == "storage" and fmt != "mcap":
        raise ValueError("storage (chunk) compression is for mcap; sqlite3 takes 'file' or "
                         "'message'")


def check_layout(layout: str, compression: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "humble" and compression == "file":
        raise ValueError("the humble layout is written for bags without file compression "
                         "(none, storage or message)")


def check_bag_output(out: Path, fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"bag format must be one of {sorted(FORMATS)}, got {fmt!r}")
    if out.exists():
        raise FileExistsError(f"bag output {out} already exists; choose a new path")


@contextmanager
def open_bag(out: Path, fmt: str, compression: str = "none",
             split_s: float | None = None, layout: str = "jazzy") -> Iterator[BagOut]:
    """A new bag directory `out` in storage `fmt` (mcap or sqlite3), compressed and split as
    BagOut says; `layout` humble rewrites it as ROS 2 Humble writes it (sim/humble_bag.py)
    once it is closed."""
    check_bag_output(out, fmt)
    check_compression(fmt, compression)
    check_layout(layout, compression)
    if split_s is not None:
        if not split_s > 0:
            raise ValueError(f"split seconds must be > 0, got {split_s}")
        out.mkdir(parents=True)
    bag = BagOut(out, fmt, compression,
                 None if split_s is None else int(round(split_s * 1e9)))
    try:
        yield bag
    finally:
        bag.close()
    if layout == "humble":
        rewrite_as_humble(out)


def last_odometry_step(seconds: float) -> int:
    """Index of the last 50 Hz ego row a bag of `seconds` holds."""
    return int(round(seconds * SUBSTEPS * 10))


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))


def simulate_for_bag(out: Path, fmt: str, seconds: float, seed: int, width: int,
                     height: int) -> tuple[DriveLog, list[Label]]:
    """The checked arguments of a bag writer, then the drive and its labels."""
    check_bag_output(out, fmt)
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    Renderer.check_size(width, height)
    log = simulate(seed, seconds)
    return log, label_drive(log.infos, log.frame_count)


def write_bag(out: str | Path, seconds: float, seed: int, fmt: str = "mcap",
              width: int = 480, height: int = 272, workers: int | None = None) -> BagSummary:
    """Simulate `seconds` of driving for `seed` and write it to the new bag directory `out`."""
    out = Path(out)
    log, labels = simulate_for_bag(out, fmt, seconds, seed, width, height)
    specs = rig()
    workers = default_workers() if workers is None else workers
    n_odom = 0
    with open_bag(out, fmt) as bag:
        tf_conn = bag.connection(TF_STATIC_TOPIC, "tf2_msgs/msg/TFMessage", latched=True)
        img_conns = [bag.connection(camera_image_topic(s.name),
                                    "sensor_msgs/msg/CompressedImage") for s in specs]
        info_conns = [bag.connection(camera_info_topic(s.name), "sensor_msgs/msg/CameraInfo")
                      for s in specs]
        odom_conn = bag.connection(ODOMETRY_TOPIC, "nav_msgs/msg/Odometry")
        label_conn = bag.connection(LABELS_TOPIC, "std_msgs/msg/String")
        put = bag.put
        t0 = stamp_ns(0.0)
        put(tf_conn, t0, M.camera_tf_static(t0, specs))
        frames = render_frames(log, width, height, jpeg=True, workers=workers)
        last_step = last_odometry_step(seconds)
        for k, jpegs in enumerate(frames):
            t_ns = stamp_ns(log.scenes[k].t)
            for spec, c_img, c_info, data in zip(specs, img_conns, info_conns, jpegs):
                put(c_img, t_ns, M.compressed_image(t_ns, spec.name, data))
                put(c_info, t_ns, M.camera_info(t_ns, spec, width, height))
            put(label_conn, t_ns, M.label_message(labels[k]))
            for i in range(k * SUBSTEPS, min((k + 1) * SUBSTEPS, last_step + 1)):
                t, x, y, yaw, v, yaw_rate, _ = log.ego[i]
                put(odom_conn, stamp_ns(t), M.odometry(stamp_ns(t), x, y, yaw, v, yaw_rate))
                n_odom += 1
    topics = (TF_STATIC_TOPIC, *(c.topic for c in img_conns), *(c.topic for c in info_conns),
              ODOMETRY_TOPIC, LABELS_TOPIC)
    return BagSummary(out, float(seconds), log.frame_count, n_odom, topics)
