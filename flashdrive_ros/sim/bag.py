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

from rosbags.interfaces import (Qos, QosDurability, QosHistory, QosLiveliness,
                                QosReliability, QosTime)
from rosbags.rosbag2 import StoragePlugin, Writer

from flashdrive_ros.sim import messages as M
from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.sim.clock import stamp_ns
from flashdrive_ros.sim.drive import SUBSTEPS, DriveLog, simulate
from flashdrive_ros.sim.frames import render_frames
from flashdrive_ros.sim.labels import Label, label_drive
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.topics import (LABELS_TOPIC, ODOMETRY_TOPIC, TF_STATIC_TOPIC,
                                       camera_image_topic, camera_info_topic)

FORMATS = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
BAG_VERSION = 9
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


class BagOut:
    """A rosbag2 being written: connections by topic, messages CDR-serialized on write."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer

    def connection(self, topic: str, msgtype: str, latched: bool = False):
        qos = {"offered_qos_profiles": [_LATCHED]} if latched else {}
        return self.writer.add_connection(topic, msgtype, typestore=M.TYPESTORE, **qos)

    def put(self, connection, log_ns: int, msg) -> None:
        self.writer.write(connection, log_ns,
                          M.TYPESTORE.serialize_cdr(msg, connection.msgtype))


def check_bag_output(out: Path, fmt: str) -> None:
    if fmt not in FORMATS:
        raise ValueError(f"bag format must be one of {sorted(FORMATS)}, got {fmt!r}")
    if out.exists():
        raise FileExistsError(f"bag output {out} already exists; choose a new path")


@contextmanager
def open_bag(out: Path, fmt: str) -> Iterator[BagOut]:
    """A new bag directory `out` in storage `fmt` (mcap or sqlite3)."""
    check_bag_output(out, fmt)
    with Writer(out, version=BAG_VERSION, storage_plugin=FORMATS[fmt]) as writer:
        yield BagOut(writer)


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
    return log, label_drive(log.infos, seed, log.frame_count)


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
