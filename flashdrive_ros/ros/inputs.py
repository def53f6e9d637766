"""The drive node's inputs: camera, odometry and CameraInfo subscriptions feeding an
InputHandler (decoding, sync, hand-over to the PlannerLoop)."""

from __future__ import annotations

from nav_msgs.msg import Odometry
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CameraInfo, CompressedImage, Image

from flashdrive_ros.ros.camera_worker import BEHIND_EXTRA, CameraWorker
from flashdrive_ros.ros.convert import ConversionError, camera_info_intrinsics
from flashdrive_ros.ros.events import no_subscription_events
from flashdrive_ros.ros.input_handler import InputHandler
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import ODOMETRY_INPUT, PlannerLoop

ODOMETRY_DEPTH = 250  # 5 s at 50 Hz
CAMERA_QUEUE_PER_CAMERA = 8  # camera messages waiting for the camera thread, per camera


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

    def __init__(self, node, params: DriveParams, loop: PlannerLoop, on_camera_info,
                 image_size: tuple[int, int] | None = None) -> None:
        """image_size (height, width): the model input size images are reduced to."""
        self.node = node
        self.params = params
        self.loop = loop
        image_type = CompressedImage if params.image_transport == "compressed" else Image
        self.handler = InputHandler(params, loop, image_size, now=self._now,
                                    warn=node.get_logger().warning,
                                    frame_gate=params.frame_gate,
                                    deserialize=lambda data: deserialize_message(data,
                                                                                 image_type))
        self._topics = dict(zip(params.camera_names, params.camera_topics))
        self._topics[ODOMETRY_INPUT] = params.odom_topic
        qos = camera_qos(params.image_reliability)
        on_image = (self.handler.on_serialized_image if params.serialized_images
                    else self.handler.on_image)
        self.worker = None
        if params.camera_thread:
            self.worker = CameraWorker(on_image, CAMERA_QUEUE_PER_CAMERA
                                       * len(params.camera_topics),
                                       self._camera_dropped, self._camera_error)
            on_image = self.worker.put
        self.subscriptions = []
        for index, topic in enumerate(params.camera_topics):
            self.subscriptions.append(node.create_subscription(
                image_type, topic, lambda msg, i=index: on_image(i, msg), qos,
                callback_group=MutuallyExclusiveCallbackGroup(),
                event_callbacks=no_subscription_events(), raw=params.serialized_images))
        self.subscriptions.append(node.create_subscription(
            Odometry, params.odom_topic, self.handler.on_odometry,
            any_publisher_qos(ODOMETRY_DEPTH),
            callback_group=MutuallyExclusiveCallbackGroup(),
            event_callbacks=no_subscription_events()))
        self._on_camera_info = on_camera_info
        if params.overlay_camera:
            info_topic = params.camera_info_topics[params.camera_names.index(
                params.overlay_camera)]
            self.subscriptions.append(node.create_subscription(
                CameraInfo, info_topic, self._on_info, any_publisher_qos(1),
                event_callbacks=no_subscription_events()))

    def _now(self) -> float:
        return self.node.get_clock().now().nanoseconds * 1e-9

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
        if self.worker is not None:
            self.worker.stop()
        self.handler.clear()

    def _camera_dropped(self, index: int, msg, dropped: int) -> None:
        self.loop.set_extra(BEHIND_EXTRA, dropped)
        self.handler.note_dropped(index, msg)

    def _camera_error(self, index: int, exc: Exception) -> None:
        self.loop.note_fault(self.params.camera_names[index],
                             f"camera_error: {type(exc).__name__}: {exc}")

    def _on_info(self, msg: CameraInfo) -> None:
        try:
            self._on_camera_info(camera_info_intrinsics(msg))
        except ConversionError as exc:
            self.loop.note_fault(self.params.overlay_camera,
                                 f"camera_info {exc.reason}: {exc}")
