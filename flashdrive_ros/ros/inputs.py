"""The drive node's inputs: camera and odometry subscriptions, decoding with named faults,
approximate-time camera sync, and hand-over to the PlannerLoop."""

from __future__ import annotations

import math
import threading

from nav_msgs.msg import Odometry
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy,
                       qos_profile_sensor_data)
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from flashdrive_ros.ros.convert import (ConversionError, InvalidOrientation, NonFiniteValue,
                                        camera_info_intrinsics, image_msg_to_rgb,
                                        odometry_arrays, odometry_to_sample, stamp_to_seconds)
from flashdrive_ros.ros.events import no_subscription_events
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import ODOMETRY_INPUT, PlannerLoop
from flashdrive_ros.ros.sync import ApproximateTimeSynchronizer

ODOMETRY_DEPTH = 250  # 5 s at 50 Hz


def camera_qos(reliability: str) -> QoSProfile:
    """SensorDataQoS (keep last 5, volatile) with the configured reliability."""
    policy = (ReliabilityPolicy.RELIABLE if reliability == "reliable"
              else ReliabilityPolicy.BEST_EFFORT)
    return QoSProfile(history=qos_profile_sensor_data.history,
                      depth=qos_profile_sensor_data.depth, reliability=policy,
                      durability=qos_profile_sensor_data.durability)


def any_publisher_qos(depth: int) -> QoSProfile:
    """Best effort + volatile matches reliable and best-effort publishers alike."""
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.VOLATILE)


class InputSubscriptions:
    """Created on activate, destroyed on deactivate.

    The executor takes one message per subscription per wait, so while callbacks run slowly
    the 50 Hz odometry queues up first; its queue (ODOMETRY_DEPTH) outlasts such a stall
    instead of dropping its oldest samples, which would leave a gap in the ego history."""

    def __init__(self, node, params: DriveParams, loop: PlannerLoop, on_camera_info) -> None:
        self.node = node
        self.params = params
        self.loop = loop
        self.sync = ApproximateTimeSynchronizer(len(params.camera_names),
                                                params.sync_queue_size, params.sync_slop_s)
        self.sync.register_callback(self._on_camera_set)
        self._sync_lock = threading.Lock()
        self._last_received = [-math.inf] * len(params.camera_names)
        self._last_handed = [-math.inf] * len(params.camera_names)
        self._last_odometry_stamp = -math.inf
        self.late_sets_dropped = 0
        self._topics = dict(zip(params.camera_names, params.camera_topics))
        self._topics[ODOMETRY_INPUT] = params.odom_topic
        image_type = CompressedImage if params.image_transport == "compressed" else Image
        qos = camera_qos(params.image_reliability)
        self.subscriptions = []
        for index, topic in enumerate(params.camera_topics):
            self.subscriptions.append(node.create_subscription(
                image_type, topic, lambda msg, i=index: self._on_image(i, msg), qos,
                callback_group=MutuallyExclusiveCallbackGroup(),
                event_callbacks=no_subscription_events()))
        self.subscriptions.append(node.create_subscription(
            Odometry, params.odom_topic, self._on_odometry, any_publisher_qos(ODOMETRY_DEPTH),
            callback_group=MutuallyExclusiveCallbackGroup(),
            event_callbacks=no_subscription_events()))
        self._on_camera_info = on_camera_info
        if params.overlay_camera:
            info_topic = params.camera_info_topics[params.camera_names.index(
                params.overlay_camera)]
            self.subscriptions.append(node.create_subscription(
                CameraInfo, info_topic, self._on_info, any_publisher_qos(1),
                event_callbacks=no_subscription_events()))

    def silence_hint(self, input_name: str) -> str:
        """Whether the topic of a silent input has publishers at all."""
        topic = self._topics.get(input_name)
        if topic is None:
            return ""
        count = self.node.count_publishers(topic)
        if count == 0:
            return f"no publisher on {topic}"
        return f"{count} publisher(s) on {topic} but no data (QoS or type mismatch?)"

    def destroy(self) -> None:
        for subscription in self.subscriptions:
            self.node.destroy_subscription(subscription)
        self.subscriptions = []
        self.sync.clear()

    def _on_image(self, index: int, msg) -> None:
        name = self.params.camera_names[index]
        self.loop.note_received(name)
        try:
            stamp = stamp_to_seconds(msg.header.stamp)
            rgb = image_msg_to_rgb(msg)
        except ConversionError as exc:
            self.loop.note_fault(name, f"{exc.reason}: {exc}")
            return
        with self._sync_lock:
            if stamp < self._last_received[index]:
                self.loop.note_fault(name, f"time_backwards: stamp went back from "
                                           f"{self._last_received[index]:.3f} to {stamp:.3f}")
                self.sync.clear()
                self._last_handed = [-math.inf] * len(self._last_handed)
            self._last_received[index] = stamp
            self.sync.add(index, (stamp, rgb), stamp_ns=round(stamp * 1e9))

    def _on_camera_set(self, *items) -> None:
        stamps = [stamp for stamp, _ in items]
        if any(s < last for s, last in zip(stamps, self._last_handed)):
            self.late_sets_dropped += 1
            self.loop.set_extra("late_camera_sets_dropped", self.late_sets_dropped)
            return
        self._last_handed = stamps
        self.loop.add_camera_set(stamps, [rgb for _, rgb in items])

    def _on_odometry(self, msg: Odometry) -> None:
        self.loop.note_received(ODOMETRY_INPUT)
        frame = msg.header.frame_id
        try:
            stamp = stamp_to_seconds(msg.header.stamp)
        except ConversionError as exc:
            self.loop.note_fault(ODOMETRY_INPUT, f"{exc.reason}: {exc}")
            return
        if frame and frame != self.params.odom_frame:
            self.loop.note_fault(ODOMETRY_INPUT, f"frame: odometry frame_id {frame!r} is not "
                                                 f"odom_frame {self.params.odom_frame!r}")
            return
        if stamp < self._last_odometry_stamp:
            self.loop.note_fault(ODOMETRY_INPUT, f"time_backwards: stamp went back from "
                                                 f"{self._last_odometry_stamp:.3f} to "
                                                 f"{stamp:.3f}")
        self._last_odometry_stamp = stamp
        try:
            sample = odometry_to_sample(msg)
        except (NonFiniteValue, InvalidOrientation) as exc:
            arrays = odometry_arrays(msg)
            self.loop.add_odometry(stamp, arrays["position"], arrays["orientation"],
                                   arrays["linear velocity"], fault=f"{exc.reason}: {exc}")
            return
        self.loop.add_odometry(sample.stamp, sample.position, sample.quaternion, sample.linear)

    def _on_info(self, msg: CameraInfo) -> None:
        try:
            self._on_camera_info(camera_info_intrinsics(msg))
        except ConversionError as exc:
            self.loop.note_fault(self.params.overlay_camera,
                                 f"camera_info {exc.reason}: {exc}")
