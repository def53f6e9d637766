"""A bag as a list of raw messages in publish order, with header stamps read and rewritten in
the CDR bytes (no deserialization), and a seamless loop of it for long runs."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from rosbags.typesys import Stores, get_typestore

from flashdrive_ros.ros.harness.bag_types import TolerantBagReader

NS_PER_S = 1_000_000_000
CDR_LITTLE_ENDIAN = (b"\x00\x01", b"\x00\x03")
STAMP = struct.Struct("<iI")
STAMP_OFFSET = 4
HEADER_TYPES = frozenset({
    "sensor_msgs/msg/CompressedImage", "sensor_msgs/msg/Image", "sensor_msgs/msg/CameraInfo",
    "nav_msgs/msg/Odometry",
})
TYPESTORE = get_typestore(Stores.ROS2_JAZZY)


@dataclass(frozen=True)
class StreamMessage:
    """One message: its topic and type, the clock time it is published at (ns) and its CDR
    bytes (little endian)."""

    topic: str
    msgtype: str
    clock_ns: int
    raw: bytes

    @property
    def has_header(self) -> bool:
        return self.msgtype in HEADER_TYPES

    @property
    def stamp_ns(self) -> int:
        """Header stamp in ns; only for messages whose type starts with a std_msgs/Header."""
        sec, nanosec = STAMP.unpack_from(self.raw, STAMP_OFFSET)
        return sec * NS_PER_S + nanosec

    def with_stamp_ns(self, stamp_ns: int) -> StreamMessage:
        sec, nanosec = divmod(int(stamp_ns), NS_PER_S)
        raw = bytearray(self.raw)
        STAMP.pack_into(raw, STAMP_OFFSET, sec, nanosec)
        return replace(self, raw=bytes(raw))

    def shifted(self, delta_ns: int) -> StreamMessage:
        """Clock time and (where there is one) header stamp moved by delta_ns."""
        moved = self.with_stamp_ns(self.stamp_ns + delta_ns) if self.has_header else self
        return replace(moved, clock_ns=self.clock_ns + delta_ns)

    def message(self):
        """The deserialized message (rosbags dataclass)."""
        return TYPESTORE.deserialize_cdr(self.raw, self.msgtype)

    def with_message(self, msg) -> StreamMessage:
        return replace(self, raw=bytes(TYPESTORE.serialize_cdr(msg, self.msgtype)))


def read_stream(bag: str | Path, topics: list[str] | None = None) -> list[StreamMessage]:
    """Every message of `bag` (of `topics` when given) in log-time order."""
    out = []
    with TolerantBagReader([Path(bag)], default_typestore=TYPESTORE) as reader:
        connections = [c for c in reader.connections if topics is None or c.topic in topics]
        for conn, log_ns, raw in reader.messages(connections=connections):
            raw = bytes(raw)
            if raw[:2] not in CDR_LITTLE_ENDIAN:
                raise ValueError(f"{conn.topic}: message is not little-endian CDR")
            out.append(StreamMessage(conn.topic, conn.msgtype, int(log_ns), raw))
    return out


def looped(messages: list[StreamMessage], gap_ns: int) -> Iterator[StreamMessage]:
    """The stream repeated without end, loop k shifted forward by k * (span + gap_ns), so time
    never runs backwards (gap_ns: e.g. the camera period, to keep frames evenly spaced)."""
    if not messages:
        return
    if gap_ns <= 0:
        raise ValueError(f"gap_ns must be > 0, got {gap_ns}")
    period_ns = messages[-1].clock_ns - messages[0].clock_ns + gap_ns
    loop = 0
    while True:
        for message in messages:
            yield message.shifted(loop * period_ns) if loop else message
        loop += 1
