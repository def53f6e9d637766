"""Publishes a StreamMessage sequence over DDS as stored CDR bytes, paced by its clock times
(scaled by `rate`), with rosgraph_msgs/Clock following each message's clock time, backwards
jumps included (a looped bag)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock

from flashdrive_ros.ros.convert import seconds_to_stamp
from flashdrive_ros.ros.harness.bag_player import message_class, unmatched_after
from flashdrive_ros.ros.harness.stream import NS_PER_S, StreamMessage

PUBLISH_DEPTH = 100


class StreamPlayer:
    """Publishers for `topics` (topic -> message type) exist from construction on, so that
    subscribers can match before `play`."""

    def __init__(self, node: Node, topics: dict[str, str], rate: float = 1.0) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate = rate
        qos = QoSProfile(depth=PUBLISH_DEPTH, reliability=ReliabilityPolicy.RELIABLE)
        self.publishers = {topic: node.create_publisher(message_class(msgtype), topic, qos)
                           for topic, msgtype in topics.items()}
        self.clock = node.create_publisher(Clock, "/clock", 10)
        self.messages = 0
        self.last_clock_ns: int | None = None

    def wait_for_subscribers(self, topics: list[str], timeout_s: float) -> list[str]:
        """Topics still without a matched subscription after timeout_s (empty on success)."""
        return unmatched_after(self.publishers, topics, timeout_s)

    def publish_clock(self, clock_ns: int) -> None:
        self.clock.publish(Clock(clock=seconds_to_stamp(clock_ns / NS_PER_S)))
        self.last_clock_ns = clock_ns

    def play(self, messages: Iterable[StreamMessage], stop: threading.Event | None = None,
             on_message: Callable[[StreamMessage], None] | None = None) -> None:
        """Publish in order; the wall time between two messages is their clock difference
        divided by rate (none when the clock goes backwards)."""
        wall = time.monotonic()
        previous_ns = None
        for message in messages:
            if stop is not None and stop.is_set():
                return
            if previous_ns is not None:
                wall += max(message.clock_ns - previous_ns, 0) / NS_PER_S / self.rate
                delay = wall - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            previous_ns = message.clock_ns
            if message.clock_ns != self.last_clock_ns:
                self.publish_clock(message.clock_ns)
            self.publishers[message.topic].publish(message.raw)
            self.messages += 1
            if on_message is not None:
                on_message(message)
