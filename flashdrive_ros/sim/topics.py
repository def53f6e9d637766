"""Topic and frame names of a synthetic drive: the node's defaults and the simulator's own."""

from __future__ import annotations

from flashdrive_ros.default_names import (
    BASE_FRAME,
    CAMERA_NAMES,
    ODOM_FRAME,
    ODOMETRY_TOPIC,
    camera_image_topic,
    camera_info_topic,
)

__all__ = ["BASE_FRAME", "CAMERA_NAMES", "LABELS_TOPIC", "ODOM_FRAME", "ODOMETRY_TOPIC",
           "TF_STATIC_TOPIC", "camera_frame", "camera_image_topic", "camera_info_topic"]

LABELS_TOPIC = "/sim/labels"
TF_STATIC_TOPIC = "/tf_static"


def camera_frame(name: str) -> str:
    return name
