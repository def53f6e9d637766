"""The camera rig: four pinhole cameras laid out like Alpamayo's, intrinsics and extrinsics.

Camera frames follow the ROS optical convention (z forward, x right, y down); extrinsics are
the camera pose in base_link (x forward, y left, z up, origin at the rear-axle centre on the
ground).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.topics import CAMERA_NAMES

DEFAULT_WIDTH = 480
DEFAULT_HEIGHT = 272

_BASE_FROM_OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


@dataclass(frozen=True)
class CameraSpec:
    """name, horizontal field of view (deg), mount position in base_link (m), yaw left and
    pitch down (deg)."""

    name: str
    hfov_deg: float
    x: float
    y: float
    z: float
    yaw_deg: float
    pitch_deg: float

    def __post_init__(self) -> None:
        if not 1.0 <= self.hfov_deg < 179.0:
            raise ValueError(f"camera {self.name}: hfov {self.hfov_deg} outside [1, 179) deg")

    def intrinsics(self, width: int, height: int) -> np.ndarray:
        """K [3, 3] for an image of width x height pixels (square pixels, centred)."""
        if width < 8 or height < 8:
            raise ValueError(f"image size {width}x{height} too small (min 8x8)")
        fx = (width / 2.0) / np.tan(np.deg2rad(self.hfov_deg) / 2.0)
        return np.array([[fx, 0.0, width / 2.0], [0.0, fx, height / 2.0], [0.0, 0.0, 1.0]])

    def rotation_base_from_camera(self) -> np.ndarray:
        """R [3, 3] taking optical-frame vectors into base_link."""
        yaw, pitch = np.deg2rad(self.yaw_deg), np.deg2rad(self.pitch_deg)
        rz = np.array([[np.cos(yaw), -np.sin(yaw), 0.0], [np.sin(yaw), np.cos(yaw), 0.0],
                       [0.0, 0.0, 1.0]])
        ry = np.array([[np.cos(pitch), 0.0, np.sin(pitch)], [0.0, 1.0, 0.0],
                       [-np.sin(pitch), 0.0, np.cos(pitch)]])
        return rz @ ry @ _BASE_FROM_OPTICAL

    def base_from_camera(self) -> np.ndarray:
        """T [4, 4]: camera pose in base_link (maps optical-frame points into base_link)."""
        t = np.eye(4)
        t[:3, :3] = self.rotation_base_from_camera()
        t[:3, 3] = (self.x, self.y, self.z)
        return t

    def quaternion_xyzw(self) -> tuple[float, float, float, float]:
        return _quaternion(self.rotation_base_from_camera())


_SPECS = {
    "camera_cross_left_120fov": CameraSpec("camera_cross_left_120fov", 120.0, 2.2, 0.85, 1.55,
                                           60.0, 4.0),
    "camera_front_wide_120fov": CameraSpec("camera_front_wide_120fov", 120.0, 1.9, 0.0, 1.6,
                                           0.0, 4.0),
    "camera_cross_right_120fov": CameraSpec("camera_cross_right_120fov", 120.0, 2.2, -0.85,
                                            1.55, -60.0, 4.0),
    "camera_front_tele_30fov": CameraSpec("camera_front_tele_30fov", 30.0, 1.9, 0.0, 1.6,
                                          0.0, 0.5),
}


def rig(names: tuple[str, ...] = CAMERA_NAMES) -> tuple[CameraSpec, ...]:
    """The specs of the named cameras, in the given order."""
    unknown = [n for n in names if n not in _SPECS]
    if unknown:
        raise ValueError(f"unknown camera names {unknown}; known: {sorted(_SPECS)}")
    return tuple(_SPECS[n] for n in names)


def sim_mount(name: str) -> tuple[float, ...]:
    """The rig's mount of camera `name`: x, y, z, roll, pitch, yaw (pitch > 0 looks down)."""
    spec = rig((name,))[0]
    return (spec.x, spec.y, spec.z, 0.0, math.radians(spec.pitch_deg),
            math.radians(spec.yaw_deg))


def _quaternion(r: np.ndarray) -> tuple[float, float, float, float]:
    tr = np.trace(r)
    if tr > 0:
        s = np.sqrt(tr + 1.0) * 2
        q = (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, s / 4
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = np.sqrt(1.0 + r[i, i] - r[j, j] - r[k, k]) * 2
        v = [0.0, 0.0, 0.0]
        v[i] = s / 4
        v[j] = (r[j, i] + r[i, j]) / s
        v[k] = (r[k, i] + r[i, k]) / s
        q = (*v, (r[k, j] - r[j, k]) / s)
    return tuple(float(c) for c in q)
