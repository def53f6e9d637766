"""A simulated drive as the records a bag of it gives, without writing or reading a bag (no
rosbags needed): the simulation, rendering, JPEG encoding, odometry and labels of
`sim/bag.py`, decoded and stamped as `eval/bag.py` reads them (header stamps for images and
odometry, log time for labels), in log-time order."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np

from flashdrive_ros.eval.images import decode_compressed
from flashdrive_ros.eval.records import ImageRecord, LabelRecord, OdometryRecord, Record
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.sim.clock import header_seconds_of, stamp_ns
from flashdrive_ros.sim.drive import SUBSTEPS, simulate
from flashdrive_ros.sim.frames import render_frames
from flashdrive_ros.sim.labels import label_drive
from flashdrive_ros.sim.topics import camera_image_topic


class SimDriveSource:
    """Use as `with SimDriveSource(...) as source:` wherever a `BagReader` is read."""

    def __init__(self, seed: int, seconds: float, width: int = 480, height: int = 272,
                 workers: int = 1, topics: TopicMapping | None = None) -> None:
        self.topics = topics or TopicMapping()
        self.seed = seed
        log = simulate(seed, seconds)
        labels = label_drive(log.infos, log.frame_count)
        slots = {i: self.topics.cameras.index(camera_image_topic(spec.name))
                 for i, spec in enumerate(rig())
                 if camera_image_topic(spec.name) in self.topics.cameras}
        events: list[tuple[int, str, object]] = []
        last_step = int(round(seconds * SUBSTEPS * 10))
        for k, jpegs in enumerate(render_frames(log, width, height, jpeg=True,
                                                workers=workers)):
            t_ns = stamp_ns(log.scenes[k].t)
            events += [(t_ns, "image", (slots[i], jpeg)) for i, jpeg in enumerate(jpegs)
                       if i in slots]
            if self.topics.labels:
                events.append((t_ns, "label", json.loads(json.dumps(labels[k].to_dict(),
                                                                    sort_keys=True))))
            for i in range(k * SUBSTEPS, min((k + 1) * SUBSTEPS, last_step + 1)):
                t, x, y, yaw, v, _, _ = log.ego[i]
                events.append((stamp_ns(t), "odometry", OdometryRecord(
                    header_seconds_of(stamp_ns(t)), np.array([float(x), float(y), 0.0]),
                    np.array([0.0, 0.0, float(np.sin(yaw / 2)), float(np.cos(yaw / 2))]),
                    np.array([float(v), 0.0, 0.0]))))
        self._events = sorted(events, key=lambda event: event[0])
        self._start_ns = stamp_ns(0.0)
        self._end_ns = max(self._start_ns, self._events[-1][0]) + 1

    def __enter__(self) -> SimDriveSource:
        return self

    def __exit__(self, *exc_info) -> None:
        return None

    @property
    def start_time(self) -> float:
        return self._start_ns * 1e-9

    @property
    def end_time(self) -> float:
        return self._end_ns * 1e-9

    def records(self) -> Iterator[Record]:
        for t_ns, kind, payload in self._events:
            if kind == "image":
                slot, jpeg = payload
                yield ImageRecord(slot, header_seconds_of(t_ns),
                                  decode_compressed("jpeg", jpeg))
            elif kind == "label":
                yield LabelRecord(t_ns * 1e-9, payload)
            else:
                yield payload

    def odometry(self) -> list[OdometryRecord]:
        return [p for _, kind, p in self._events if kind == "odometry"]

    def labels(self) -> list[LabelRecord]:
        return [LabelRecord(t_ns * 1e-9, p) for t_ns, kind, p in self._events if kind == "label"]
