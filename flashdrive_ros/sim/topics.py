"""Default topic and frame names of a synthetic drive (the replay tool and the node use them)."""

from __future__ import annotations

from flashdrive_ros.model.config import PromptConfig

CAMERA_NAMES: tuple[str, ...] = PromptConfig().camera_names
ODOMETRY_TOPIC = "/localization/odometry"
LABELS_TOPIC = "/sim/labels"
TF_STATIC_TOPIC = "/tf_static"
ODOM_FRAME = "odom"
BASE_FRAME = "base_link"


def camera_image_topic(name: str) -> str:
    return f"/sensing/camera/{name}/image_raw/compressed"


def camera_info_topic(name: str) -> str:
    return f"/sensing/camera/{name}/camera_info"


def camera_frame(name: str) -> str:
    return name
