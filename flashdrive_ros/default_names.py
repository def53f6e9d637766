"""Default camera, topic and frame names: the drive node's defaults, under which the simulator
writes its drives."""

from __future__ import annotations

from flashdrive_ros.model.config import PromptConfig

CAMERA_NAMES: tuple[str, ...] = PromptConfig().camera_names
ODOMETRY_TOPIC = "/localization/odometry"
ODOM_FRAME = "odom"
BASE_FRAME = "base_link"


def camera_image_topic(name: str) -> str:
    return f"/sensing/camera/{name}/image_raw/compressed"


def camera_info_topic(name: str) -> str:
    return f"/sensing/camera/{name}/camera_info"
