"""Reading a rosbag2 (mcap or sqlite3) through rosbags into image, odometry and label records.

Stamps are the message header stamps (the node stamps its outputs with them); the bag's log
time orders the stream and stamps the header-less labels (std_msgs/String JSON). Every
bag-level problem raises a BagError subclass naming it; a single image that does not
deserialize or decode becomes an ImageRecord with `error` set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.highlevel import AnyReaderError
from rosbags.rosbag2 import ReaderError as Rosbag2ReaderError
from rosbags.typesys import Stores, get_typestore

from flashdrive_ros.eval.bag_source import BagSource, bag_source
from flashdrive_ros.eval.errors import (
    BagError,
    CorruptBag,
    EmptyBag,
    ImageDecodeError,
    MissingTopics,
    UnknownMessageType,
)
from flashdrive_ros.eval.images import (
    IMAGE_TYPES,
    decode_image,
    image_stamp_and_frame,
    video_codec_of,
)
from flashdrive_ros.eval.records import ImageRecord, LabelRecord, OdometryRecord, Record
from flashdrive_ros.eval.topics import PROPOSAL_COMMAND, TopicMapping
from flashdrive_ros.ros.convert import ZERO_STAMP_PROBLEM
from flashdrive_ros.ros.harness.bag_types import TolerantBagReader
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.ros.raw_encodings import alias_note
from flashdrive_ros.ros.transport import LatencyStats
from flashdrive_ros.ros.video_decode import VideoOutput, VideoStream, frame_rgb

ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
LABELS_TYPE = "std_msgs/msg/String"
READ_ERRORS = (AnyReaderError, Rosbag2ReaderError, OSError)


def header_seconds(msg: Any) -> float:
    return stamp_seconds(msg.header.stamp)


def stamp_seconds(stamp: Any) -> float:
    return int(stamp.sec) + int(stamp.nanosec) * 1e-9


def open_reader(source: BagSource) -> TolerantBagReader:
    """An opened reader of the bag's files (Jazzy types as the default; topics it cannot type
    are left unread, named in its `unreadable`)."""
    reader = TolerantBagReader(source.reader_paths(),
                               default_typestore=get_typestore(Stores.ROS2_JAZZY))
    try:
        reader.open()
    except (*READ_ERRORS, ValueError) as exc:
        raise CorruptBag(f"cannot open bag {source.path}: {exc}") from None
    return reader


def unread_topic_notes(unreadable: dict[str, str]) -> list[str]:
    """A line per topic of the bag left unread (`TolerantBagReader.unreadable`)."""
    return [f"{topic}: not read: {why}" for topic, why in sorted(unreadable.items())]


@dataclass(frozen=True)
class TopicInfo:
    topic: str
    msgtype: str
    count: int


def topic_infos(reader: TolerantBagReader) -> list[TopicInfo]:
    """The bag's topics, sorted by name, with their type and message count."""
    counts: dict[str, int] = {}
    types: dict[str, str] = {}
    for conn in reader.connections:
        counts[conn.topic] = counts.get(conn.topic, 0) + conn.msgcount
        types[conn.topic] = conn.msgtype
    return [TopicInfo(t, types[t], counts[t]) for t in sorted(types)]


class BagReader:
    """Open with `with BagReader(path, topics) as bag:`; validation happens on entry.
    path: a bag path, or a BagSource the caller cleans up (else the reader does, on close).
    image_size (height, width): images are reduced to it as they are read (the model size).
    `latency` holds, per mapped topic, log time - header stamp of the records read;
    `frame_ids` the header frame_id of each camera slot's first image; `zero_stamps` the
    log times of the messages dropped for a zero header stamp, per topic; `encoding_notes`
    the cameras whose encoding is read as another one (input_notes())."""

    def __init__(self, path: str | Path | BagSource, topics: TopicMapping,
                 image_size: tuple[int, int] | None = None) -> None:
        self.owns_source = not isinstance(path, BagSource)
        self.source = bag_source(path) if self.owns_source else path
        self.path = self.source.path
        self.topics = topics
        self.reducer = ImageReducer(image_size) if image_size is not None else None
        self.latency: dict[str, LatencyStats] = {}
        self.frame_ids: dict[int, str] = {}
        self._reader: TolerantBagReader | None = None
        self.image_types: dict[str, str] = {}
        self.has_labels = False
        self.skipped_messages: dict[str, int] = {}
        self.zero_stamps: dict[str, set[int]] = {}
        self.encoding_notes: dict[str, str] = {}
        self._track_records: tuple[list[OdometryRecord], list[LabelRecord]] | None = None

    def __enter__(self) -> BagReader:
        try:
            self._reader = open_reader(self.source)
            self._validate()
        except BagError:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.owns_source:
            self.source.cleanup()

    @property
    def reader(self) -> TolerantBagReader:
        if self._reader is None:
            raise RuntimeError("BagReader used outside its with-block")
        return self._reader

    @property
    def start_time(self) -> float:
        return self.reader.start_time * 1e-9

    @property
    def end_time(self) -> float:
        return self.reader.end_time * 1e-9

    def _validate(self) -> None:
        reader = self.reader
        if reader.message_count == 0:
            notes = "".join(f"; {note}" for note in self.source.all_notes())
            raise EmptyBag(f"bag {self.path} holds no messages{notes}")
        infos = topic_infos(reader)
        counts = {i.topic: i.count for i in infos}
        types = {i.topic: i.msgtype for i in infos}
        required = [*self.topics.cameras, self.topics.odometry]
        missing = [t for t in required if counts.get(t, 0) == 0]
        if missing:
            present = "\n".join(f"  {i.topic} ({i.msgtype}, {i.count} messages)"
                                 for i in infos)
            raise MissingTopics(
                f"bag {self.path} lacks messages on {missing}; map the bag's topics to the "
                f"model inputs with --topics-yaml FILE (or --camera-topics / --odom-topic); "
                f"`{PROPOSAL_COMMAND.replace('BAG', str(self.path))}` proposes one. "
                f"The bag holds:\n{present}")
        for topic in self.topics.cameras:
            if types[topic] not in IMAGE_TYPES:
                raise UnknownMessageType(f"camera topic {topic} has type {types[topic]}, "
                                         f"expected one of {IMAGE_TYPES}")
            self.image_types[topic] = types[topic]
        if types[self.topics.odometry] != ODOMETRY_TYPE:
            raise UnknownMessageType(f"odometry topic {self.topics.odometry} has type "
                                     f"{types[self.topics.odometry]}, expected {ODOMETRY_TYPE}")
        labels = self.topics.labels
        if labels and counts.get(labels, 0) > 0:
            if types[labels] != LABELS_TYPE:
                raise UnknownMessageType(f"labels topic {labels} has type {types[labels]}, "
                                         f"expected {LABELS_TYPE}")
            self.has_labels = True
        for topic in self._wanted_topics():
            if topic in reader.unreadable:
                raise UnknownMessageType(f"bag {self.path}: topic {topic} cannot be read: "
                                         f"{reader.unreadable[topic]}")

    def _wanted_topics(self) -> list[str]:
        topics = [*self.topics.cameras, self.topics.odometry]
        return topics + [self.topics.labels] if self.has_labels else topics

    def reduce_images_to(self, size: tuple[int, int]) -> None:
        """Images read from now on are reduced to `size` (height, width) as they are read."""
        self.reducer = ImageReducer(size)

    def _note_latency(self, topic: str, log_ns: int, stamp: float) -> None:
        stats = self.latency.get(topic)
        if stats is None:
            stats = self.latency[topic] = LatencyStats()
        stats.add(log_ns * 1e-9 - stamp)

    def input_notes(self) -> list[str]:
        """Console lines on the inputs: a recording read without being closed, topics left
        unread, encodings read as another one, zero stamps."""
        notes = self.source.all_notes() + unread_topic_notes(self.reader.unreadable)
        notes += [f"{topic}: {note}" for topic, note in sorted(self.encoding_notes.items())]
        return notes + [f"{topic}: {ZERO_STAMP_PROBLEM} ({len(times)} messages)"
                        for topic, times in sorted(self.zero_stamps.items())]

    def _zero_stamp(self, topic: str, log_ns: int, stamp: Any) -> bool:
        if int(stamp.sec) != 0 or int(stamp.nanosec) != 0:
            return False
        self.zero_stamps.setdefault(topic, set()).add(log_ns)
        return True

    def _skip(self, what: str) -> None:
        self.skipped_messages[what] = self.skipped_messages.get(what, 0) + 1

    def records(self, topics: list[str] | None = None) -> Iterator[Record]:
        """Records of `topics` (default: all mapped topics) in bag log-time order (a video
        camera's frames as its decoder gives them out)."""
        reader = self.reader
        wanted = set(topics or self._wanted_topics())
        connections = [c for c in reader.connections if c.topic in wanted]
        slots = {topic: i for i, topic in enumerate(self.topics.cameras)}
        videos: dict[str, VideoStream] = {}
        try:
            for conn, log_ns, raw in reader.messages(connections=connections):
                yield from self._convert(conn, log_ns, raw, slots, videos)
        except READ_ERRORS as exc:
            raise CorruptBag(f"bag {self.path} is unreadable past some point: {exc}") from None
        for topic, stream in videos.items():
            yield from self._video_records(slots[topic], stream.flush())

    def largest_first_camera_message(self) -> int:
        """Serialized bytes of the largest of the camera topics' first messages (0: none)."""
        reader = self.reader
        largest = 0
        try:
            for conn in reader.connections:
                if conn.topic in self.topics.cameras:
                    first = next(iter(reader.messages(connections=[conn])), None)
                    largest = max(largest, len(first[2]) if first is not None else 0)
        except READ_ERRORS as exc:
            raise CorruptBag(f"bag {self.path} is unreadable: {exc}") from None
        return largest

    def odometry(self) -> list[OdometryRecord]:
        return self._track()[0]

    def labels(self) -> list[LabelRecord]:
        return self._track()[1]

    def _track(self) -> tuple[list[OdometryRecord], list[LabelRecord]]:
        """The odometry and label records, read together in one pass (a bag with raw camera
        images is mostly image bytes, which every pass reads) and kept."""
        if self._track_records is None:
            topics = [self.topics.odometry] + ([self.topics.labels] if self.has_labels else [])
            odometry: list[OdometryRecord] = []
            labels: list[LabelRecord] = []
            for record in self.records(topics):
                if isinstance(record, OdometryRecord):
                    odometry.append(record)
                elif isinstance(record, LabelRecord):
                    labels.append(record)
            self._track_records = odometry, labels
        return self._track_records

    def _convert(self, conn, log_ns: int, raw: bytes, slots: dict[str, int],
                 videos: dict[str, VideoStream]) -> list[Record]:
        topic = conn.topic
        try:
            msg = self.reader.deserialize(raw, conn.msgtype)
        except Exception as exc:  # rosbags raises assorted errors on a bad CDR payload
            if topic in slots:
                return [ImageRecord(slots[topic], log_ns * 1e-9, None,
                                    f"{topic}: payload does not deserialize ({exc})")]
            self._skip(f"undeserializable {topic}")
            return []
        if topic in slots:
            return self._image_records(topic, slots[topic], conn.msgtype, log_ns, msg, videos)
        if topic == self.topics.odometry:
            if self._zero_stamp(topic, log_ns, msg.header.stamp):
                return []
            self._note_latency(topic, log_ns, header_seconds(msg))
            pose, twist = msg.pose.pose, msg.twist.twist
            return [OdometryRecord(
                header_seconds(msg),
                np.array([pose.position.x, pose.position.y, pose.position.z]),
                np.array([pose.orientation.x, pose.orientation.y, pose.orientation.z,
                          pose.orientation.w]),
                np.array([twist.linear.x, twist.linear.y, twist.linear.z]))]
        try:
            values = json.loads(msg.data)
        except ValueError:
            values = None
        if not isinstance(values, dict):
            self._skip(f"unparsable label on {topic}")
            return []
        return [LabelRecord(log_ns * 1e-9, values)]

    def _image_records(self, topic: str, slot: int, msgtype: str, log_ns: int, msg: Any,
                       videos: dict[str, VideoStream]) -> list[Record]:
        stamp_msg, frame_id = image_stamp_and_frame(msgtype, msg)
        if self._zero_stamp(topic, log_ns, stamp_msg):
            return []
        if note := alias_note(str(getattr(msg, "encoding", ""))):
            self.encoding_notes[topic] = note
        stamp = stamp_seconds(stamp_msg)
        self._note_latency(topic, log_ns, stamp)
        self.frame_ids.setdefault(slot, frame_id)
        try:
            codec = video_codec_of(msgtype, msg)
            if codec is None:
                return [ImageRecord(slot, stamp, decode_image(msgtype, msg, self.reducer))]
        except ImageDecodeError as exc:
            return [ImageRecord(slot, stamp, None, f"{topic}: {exc}")]
        stream = videos.get(topic)
        if stream is None or stream.codec != codec:
            stream = videos[topic] = VideoStream(codec)
        output = stream.push(stamp, msg.data)
        records = self._video_records(slot, output)
        if output.problem:
            records.append(ImageRecord(slot, stamp, None, f"{topic}: video: {output.problem}"))
        return records

    def _video_records(self, slot: int, output: VideoOutput) -> list[Record]:
        return [ImageRecord(slot, stamp, frame_rgb(frame, self.reducer))
                for stamp, frame in output.frames]
