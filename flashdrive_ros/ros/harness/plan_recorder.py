"""Records the drive node's outputs into an mcap bag (stored CDR bytes, via rosbags) while a
BagPlayer plays a bag into it; drives the node through its lifecycle services.

`record_replay` is the whole through-ROS session in this process: configure and activate the
node, wait for matched endpoints, play, let the last plans arrive, deactivate, close the bag.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from lifecycle_msgs.msg import Transition
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore
from tqdm import tqdm

from flashdrive_ros.ros.harness.bag_player import BagPlayer, PlayStats, message_class
from flashdrive_ros.ros.harness.lifecycle_client import LifecycleClient, LifecycleError
from flashdrive_ros.ros.harness.loopback import local_context
from flashdrive_ros.ros.names import (
    DIAGNOSTICS_TOPIC,
    FINISHED_PLANS_TOPIC,
    NODE_NAME,
    OVERLAY_TOPIC,
    REASONING_TOPIC,
    SAMPLES_TOPIC,
    TRAJECTORY_TOPIC,
    resolved,
)

OUTPUT_TYPES = {
    TRAJECTORY_TOPIC: "nav_msgs/msg/Path",
    SAMPLES_TOPIC: "visualization_msgs/msg/MarkerArray",
    REASONING_TOPIC: "std_msgs/msg/String",
    FINISHED_PLANS_TOPIC: "visualization_msgs/msg/MarkerArray",
    OVERLAY_TOPIC: "sensor_msgs/msg/Image",
    DIAGNOSTICS_TOPIC: "diagnostic_msgs/msg/DiagnosticArray",
}
REQUIRED_OUTPUTS = (TRAJECTORY_TOPIC, SAMPLES_TOPIC, REASONING_TOPIC, FINISHED_PLANS_TOPIC,
                    DIAGNOSTICS_TOPIC)
RECORD_DEPTH = 200


class PlanRecorder:
    """Subscribes (raw) to each output topic with the reliability its publisher offers, and
    writes every message with the receiving node's clock time as log time."""

    def __init__(self, node: Node, out_bag: str | Path, topics: dict[str, str]) -> None:
        self.node = node
        self.topics = dict(topics)
        self.typestore = get_typestore(Stores.ROS2_JAZZY)
        self.writer = Writer(Path(out_bag), version=9, storage_plugin=StoragePlugin.MCAP)
        self.writer.open()
        self.connections = {t: self.writer.add_connection(t, m, typestore=self.typestore)
                            for t, m in self.topics.items()}
        self.subscriptions = {}
        self.counts = dict.fromkeys(self.topics, 0)
        self.last_receipt = dict.fromkeys(self.topics, time.monotonic())
        self._lock = threading.Lock()
        self._closed = False

    def subscribe(self, topic: str) -> None:
        offered = self.node.get_publishers_info_by_topic(topic)
        reliable = bool(offered) and all(
            i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in offered)
        qos = QoSProfile(depth=RECORD_DEPTH, durability=DurabilityPolicy.VOLATILE,
                         reliability=ReliabilityPolicy.RELIABLE if reliable
                         else ReliabilityPolicy.BEST_EFFORT)
        self.subscriptions[topic] = self.node.create_subscription(
            message_class(self.topics[topic]), topic, partial(self._on_message, topic), qos,
            raw=True)

    def subscribe_when_published(self, topics: list[str], timeout_s: float) -> list[str]:
        """Subscribe to each topic once a publisher shows up; returns those that never did."""
        deadline = time.monotonic() + timeout_s
        pending = [t for t in topics if t not in self.subscriptions]
        while pending and time.monotonic() < deadline:
            for topic in list(pending):
                if self.node.count_publishers(topic) > 0:
                    self.subscribe(topic)
                    pending.remove(topic)
            time.sleep(0.02)
        return pending

    def wait_matched(self, timeout_s: float) -> list[str]:
        deadline = time.monotonic() + timeout_s
        while True:
            unmatched = [t for t, s in self.subscriptions.items() if s.get_publisher_count() < 1]
            if not unmatched or time.monotonic() > deadline:
                return unmatched
            time.sleep(0.02)

    def _on_message(self, topic: str, data: bytes) -> None:
        with self._lock:
            if self._closed:
                return
            self.writer.write(self.connections[topic], self.node.get_clock().now().nanoseconds,
                              data)
            self.counts[topic] += 1
            self.last_receipt[topic] = time.monotonic()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self.writer.close()


@dataclass
class SessionSettings:
    rate: float = 1.0
    node_name: str = NODE_NAME
    configure_timeout_s: float = 300.0
    match_timeout_s: float = 30.0
    drain_quiet_s: float = 3.0
    drain_timeout_s: float = 60.0
    domain_id: int | None = None
    input_topics: list[str] = field(default_factory=list)
    node_alive: Callable[[], bool] | None = None
    progress: bool = True


@dataclass
class SessionResult:
    play: PlayStats
    counts: dict[str, int]
    unplayable: dict[str, str]


def _drain(recorder: PlanRecorder, player: BagPlayer, end_s: float, new_plan_topic: str,
           settings: SessionSettings) -> None:
    """Keep /clock running past the bag's end until no new plan arrived for drain_quiet_s,
    and while no plan arrived at all (a slow first plan), up to drain_timeout_s."""
    start = time.monotonic()
    while time.monotonic() - start < settings.drain_timeout_s:
        quiet_s = time.monotonic() - max(recorder.last_receipt[new_plan_topic], start)
        if recorder.counts[new_plan_topic] and quiet_s > settings.drain_quiet_s:
            return
        time.sleep(0.05)
        player.publish_clock(end_s + (time.monotonic() - start) * settings.rate)


def record_replay(bag: str | Path | list[Path], out_bag: str | Path,
                  settings: SessionSettings) -> SessionResult:
    """Play `bag` (a rosbag2 directory, or storage files read as one bag) into the running
    node `settings.node_name` and record its outputs."""
    context = local_context(settings.domain_id)
    node = Node("flashdrive_replay", context=context,
                parameter_overrides=[Parameter("use_sim_time", value=True)])
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    topics = {resolved(t, node_name=settings.node_name): m for t, m in OUTPUT_TYPES.items()}
    recorder = PlanRecorder(node, out_bag, topics)
    try:
        player = BagPlayer(node, bag, rate=settings.rate)
        player.publish_clock(player.start_s)
        lifecycle = LifecycleClient(node, f"/{settings.node_name}", settings.node_alive)
        lifecycle.transition(Transition.TRANSITION_CONFIGURE, settings.configure_timeout_s)
        lifecycle.transition(Transition.TRANSITION_ACTIVATE, settings.configure_timeout_s)
        required = [resolved(t, node_name=settings.node_name) for t in REQUIRED_OUTPUTS]
        missing = recorder.subscribe_when_published(required, settings.match_timeout_s)
        if missing:
            raise LifecycleError(f"{settings.node_name} publishes none of {missing}")
        recorder.subscribe_when_published([resolved(OVERLAY_TOPIC,
                                                    node_name=settings.node_name)], 0.5)
        unmatched_outputs = recorder.wait_matched(settings.match_timeout_s)
        if unmatched_outputs:
            raise LifecycleError(f"recorder never matched {unmatched_outputs}")
        unmatched = player.wait_for_subscribers(settings.input_topics, settings.match_timeout_s)
        if unmatched:
            raise LifecycleError(f"{settings.node_name} never subscribed to {unmatched}")
        with tqdm(total=round(player.end_s - player.start_s, 1), unit="bag s",
                  desc=f"playing into {settings.node_name}",
                  disable=None if settings.progress else True) as bar:
            stats = player.play(on_message=lambda played: bar.update(
                round(played, 1) - bar.n))
        _drain(recorder, player, player.end_s,
               resolved(FINISHED_PLANS_TOPIC, node_name=settings.node_name), settings)
        lifecycle.transition(Transition.TRANSITION_DEACTIVATE, settings.match_timeout_s)
        return SessionResult(play=stats, counts=dict(recorder.counts),
                             unplayable=player.unplayable)
    finally:
        recorder.close()
        executor.shutdown()
        node.destroy_node()
        context.shutdown()
        spinner.join(timeout=5.0)

