"""Plays a rosbag2 over DDS: every message is published as its stored CDR bytes on its topic
at its log time (scaled by `rate`), with rosgraph_msgs/Clock on /clock for use_sim_time. The
bag is read on a thread of its own up to READ_AHEAD_BYTES ahead of the publishing."""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosbags.typesys import Stores, get_typestore
from rosgraph_msgs.msg import Clock

from flashdrive_ros.ros.convert import seconds_to_stamp
from flashdrive_ros.ros.harness.bag_types import TolerantBagReader
from flashdrive_ros.ros.harness.read_ahead import ReadAhead

LATCHED_TOPICS = ("/tf_static",)
PUBLISH_DEPTH = 100
READ_AHEAD_BYTES = 256 << 20


def message_class(msgtype: str):
    """'sensor_msgs/msg/Image' -> the rclpy message class; ImportError when its package is
    not installed."""
    package, kind, name = msgtype.split("/")
    module = importlib.import_module(f"{package}.{kind}")
    try:
        return getattr(module, name)
    except AttributeError:
        raise ImportError(f"{package}.{kind} has no message {name}") from None


def unmatched_after(publishers: dict, topics: list[str], timeout_s: float) -> list[str]:
    """Wait until the publisher of every topic in `topics` has a matched subscription;
    returns the topics still unmatched at the timeout (empty on success)."""
    deadline = time.monotonic() + timeout_s
    while True:
        unmatched = [t for t in topics if publishers[t].get_subscription_count() < 1]
        if not unmatched or time.monotonic() > deadline:
            return unmatched
        time.sleep(0.02)


@dataclass
class PlayStats:
    per_topic: dict[str, int] = field(default_factory=dict)  # messages published per topic
    bag_seconds: float = 0.0
    wall_seconds: float = 0.0
    max_lateness_s: float = 0.0

    @property
    def messages(self) -> int:
        return sum(self.per_topic.values())


class BagPlayer:
    """Publishers are created on construction so subscribers can match before `play`.
    Topics whose message package is not installed or whose recorded type the reader cannot
    use (bag_types.py) are not played; `unplayable` names them."""

    def __init__(self, node: Node, bag: str | Path | list[Path], rate: float = 1.0,
                 topics: list[str] | None = None, publish_clock: bool = True) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.node = node
        self.paths = [Path(p) for p in bag] if isinstance(bag, list) else [Path(bag)]
        self.rate = rate
        self.typestore = get_typestore(Stores.ROS2_JAZZY)
        self.publishers = {}
        self.unplayable: dict[str, str] = {}
        with TolerantBagReader(self.paths, default_typestore=self.typestore) as reader:
            self.start_s = reader.start_time * 1e-9
            self.end_s = reader.end_time * 1e-9
            self.connections = [c for c in reader.connections
                                if topics is None or c.topic in topics]
            self.unplayable.update({topic: why for topic, why in reader.unreadable.items()
                                    if topics is None or topic in topics})
            for conn in self.connections:
                if conn.topic in self.publishers or conn.topic in self.unplayable:
                    continue
                try:
                    msg_class = message_class(conn.msgtype)
                except ImportError as exc:
                    self.unplayable[conn.topic] = f"{conn.msgtype}: {exc}"
                    continue
                durability = (DurabilityPolicy.TRANSIENT_LOCAL if conn.topic in LATCHED_TOPICS
                              else DurabilityPolicy.VOLATILE)
                qos = QoSProfile(depth=PUBLISH_DEPTH, reliability=ReliabilityPolicy.RELIABLE,
                                 durability=durability)
                self.publishers[conn.topic] = node.create_publisher(msg_class, conn.topic, qos)
        self.clock_publisher = (node.create_publisher(Clock, "/clock", 10)
                                if publish_clock else None)

    def wait_for_subscribers(self, topics: list[str], timeout_s: float) -> list[str]:
        """Wait until every topic in `topics` has a matched subscription; returns the topics
        still unmatched at the timeout (empty on success)."""
        return unmatched_after(self.publishers, topics, timeout_s)

    def play(self, stop: threading.Event | None = None,
             on_message: Callable[[float], None] | None = None) -> PlayStats:
        """Publish the whole bag; `on_message(bag seconds played)` after each message."""
        stats = PlayStats()
        with TolerantBagReader(self.paths, default_typestore=self.typestore) as reader:
            connections = [c for c in reader.connections if c.topic in self.publishers]
            wall_start = time.monotonic()
            with ReadAhead(reader.messages(connections=connections),
                           size=lambda message: len(message[2]),
                           max_bytes=READ_AHEAD_BYTES) as messages:
                self._publish(messages, wall_start, stats, stop, on_message)
            stats.wall_seconds = time.monotonic() - wall_start
        return stats

    def _publish(self, messages: ReadAhead, wall_start: float, stats: PlayStats,
                 stop: threading.Event | None,
                 on_message: Callable[[float], None] | None) -> None:
        first_ns = None
        last_clock_ns = -1
        for conn, log_ns, raw in messages:
            if stop is not None and stop.is_set():
                break
            if first_ns is None:
                first_ns = log_ns
            target = wall_start + (log_ns - first_ns) * 1e-9 / self.rate
            delay = target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                stats.max_lateness_s = max(stats.max_lateness_s, -delay)
            if self.clock_publisher is not None and log_ns > last_clock_ns:
                self.clock_publisher.publish(Clock(clock=seconds_to_stamp(log_ns * 1e-9)))
                last_clock_ns = log_ns
            self.publishers[conn.topic].publish(bytes(raw))
            stats.per_topic[conn.topic] = stats.per_topic.get(conn.topic, 0) + 1
            stats.bag_seconds = (log_ns - first_ns) * 1e-9
            if on_message is not None:
                on_message(stats.bag_seconds)

    def publish_clock(self, seconds: float) -> None:
        if self.clock_publisher is not None:
            self.clock_publisher.publish(Clock(clock=seconds_to_stamp(seconds)))
