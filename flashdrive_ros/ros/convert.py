"""Input messages -> numpy: images (compressed and raw), odometry, stamps.

Readers take the message fields duck-typed, so the numpy helpers run without rclpy;
every failure is a ConversionError subclass whose message names the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from flashdrive_ros.engine.window import MAX_ODOMETRY_MAGNITUDE

NS_PER_S = 1_000_000_000
RAW_CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}
JPEG_SOI = b"\xff\xd8"
JPEG_EOI = b"\xff\xd9"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_IEND = b"IEND\xaeB`\x82"


class ConversionError(ValueError):
    """A message could not be turned into a valid model input."""

    reason = "invalid"


class CorruptPayload(ConversionError):
    reason = "corrupt_payload"


class UnsupportedEncoding(ConversionError):
    reason = "unsupported_encoding"


class SizeMismatch(ConversionError):
    reason = "size_mismatch"


class NonFiniteValue(ConversionError):
    reason = "non_finite"


class InvalidOrientation(ConversionError):
    reason = "invalid_orientation"


class InvalidStamp(ConversionError):
    reason = "invalid_stamp"


def stamp_to_seconds(stamp: Any) -> float:
    """builtin_interfaces/Time (sec, nanosec) -> float seconds."""
    sec, nanosec = int(stamp.sec), int(stamp.nanosec)
    if not 0 <= nanosec < NS_PER_S:
        raise InvalidStamp(f"nanosec {nanosec} outside [0, 1e9)")
    return sec + nanosec * 1e-9


def seconds_to_sec_nanosec(seconds: float) -> tuple[int, int]:
    """float seconds -> (sec, nanosec) with nanosec in [0, 1e9), rounded to the nanosecond."""
    if not math.isfinite(seconds):
        raise InvalidStamp(f"stamp {seconds} is not finite")
    if not -(2 ** 31) <= seconds < 2 ** 31:
        raise InvalidStamp(f"stamp {seconds} s does not fit builtin_interfaces/Time")
    total_ns = int(round(seconds * NS_PER_S))
    sec, nanosec = divmod(total_ns, NS_PER_S)
    if not -(2 ** 31) <= sec < 2 ** 31:
        raise InvalidStamp(f"stamp {seconds} s does not fit builtin_interfaces/Time")
    return sec, nanosec


def seconds_to_stamp(seconds: float):
    from builtin_interfaces.msg import Time

    sec, nanosec = seconds_to_sec_nanosec(seconds)
    return Time(sec=sec, nanosec=nanosec)


def _compressed_kind(fmt: str, data: bytes) -> str:
    tokens = fmt.lower().replace(";", " ").split()
    declared = {"jpeg": "jpeg", "jpg": "jpeg", "png": "png"}
    named = [declared[t] for t in tokens if t in declared]
    unsupported = [t for t in tokens if t in ("compresseddepth", "h264", "h265", "tiff", "webp")]
    if unsupported:
        raise UnsupportedEncoding(f"compressed format {fmt!r} is not JPEG or PNG")
    if data.startswith(JPEG_SOI):
        sniffed = "jpeg"
    elif data.startswith(PNG_SIGNATURE):
        sniffed = "png"
    else:
        raise CorruptPayload(f"payload of {len(data)} bytes is neither JPEG nor PNG "
                             f"(format {fmt!r})")
    if named and named[-1] != sniffed:
        raise CorruptPayload(f"format {fmt!r} says {named[-1]} but payload is {sniffed}")
    return sniffed


def decode_compressed(fmt: str, data: bytes) -> np.ndarray:
    """CompressedImage payload (JPEG or PNG) -> RGB uint8 [H, W, 3]."""
    data = bytes(data)
    if not data:
        raise CorruptPayload("empty compressed payload")
    kind = _compressed_kind(fmt, data)
    if kind == "jpeg" and not data.rstrip(b"\x00").endswith(JPEG_EOI):
        raise CorruptPayload("JPEG payload is truncated (no end-of-image marker)")
    if kind == "png" and not data.endswith(PNG_IEND):
        raise CorruptPayload("PNG payload is truncated (no IEND chunk)")
    try:
        bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise CorruptPayload(f"{kind} payload does not decode: {exc}") from None
    if bgr is None or bgr.ndim != 3 or bgr.shape[2] != 3 or bgr.size == 0:
        raise CorruptPayload(f"{kind} payload of {len(data)} bytes does not decode")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def raw_to_rgb(encoding: str, height: int, width: int, step: int, data: bytes,
               is_bigendian: int = 0) -> np.ndarray:
    """sensor_msgs/Image fields (rgb8, bgr8, mono8, rgba8, bgra8; rows may be padded)
    -> RGB uint8 [H, W, 3]."""
    channels = RAW_CHANNELS.get(encoding.lower())
    if channels is None:
        raise UnsupportedEncoding(f"image encoding {encoding!r} not in {sorted(RAW_CHANNELS)}")
    if height <= 0 or width <= 0:
        raise SizeMismatch(f"image size {width}x{height} is empty")
    row_bytes = width * channels
    if step < row_bytes:
        raise SizeMismatch(f"step {step} < width {width} * {channels} channels")
    buffer = np.frombuffer(bytes(data), np.uint8)
    if buffer.size != step * height:
        raise SizeMismatch(f"data has {buffer.size} bytes, expected step {step} * height "
                           f"{height} = {step * height}")
    pixels = buffer.reshape(height, step)[:, :row_bytes].reshape(height, width, channels)
    name = encoding.lower()
    if name == "rgb8":
        return np.ascontiguousarray(pixels)
    if name == "bgr8":
        return np.ascontiguousarray(pixels[:, :, ::-1])
    if name == "mono8":
        return np.ascontiguousarray(np.repeat(pixels, 3, axis=2))
    if name == "rgba8":
        return np.ascontiguousarray(pixels[:, :, :3])
    return np.ascontiguousarray(pixels[:, :, 2::-1])


def image_msg_to_rgb(msg: Any) -> np.ndarray:
    """sensor_msgs/CompressedImage or sensor_msgs/Image -> RGB uint8 [H, W, 3]."""
    if hasattr(msg, "format"):
        return decode_compressed(msg.format, msg.data)
    if hasattr(msg, "encoding"):
        return raw_to_rgb(msg.encoding, msg.height, msg.width, msg.step, msg.data,
                          msg.is_bigendian)
    raise UnsupportedEncoding(f"{type(msg).__name__} is not an image message")


@dataclass(frozen=True)
class OdometrySample:
    """Ego state from nav_msgs/Odometry (pose in the odometry frame, twist in the child frame).

    position: [3]; quaternion: [4] (x, y, z, w), unit norm; linear, angular: [3].
    """

    stamp: float
    position: np.ndarray
    quaternion: np.ndarray
    linear: np.ndarray
    angular: np.ndarray

    @property
    def yaw(self) -> float:
        x, y, z, w = self.quaternion
        return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))

    @property
    def speed(self) -> float:
        return float(np.linalg.norm(self.linear[:2]))


def odometry_arrays(msg: Any) -> dict[str, np.ndarray]:
    """nav_msgs/Odometry -> unvalidated float64 arrays: position [3], orientation [4] xyzw,
    linear velocity [3], angular velocity [3]."""
    pose = msg.pose.pose
    twist = msg.twist.twist
    fields = {
        "position": [pose.position.x, pose.position.y, pose.position.z],
        "orientation": [pose.orientation.x, pose.orientation.y, pose.orientation.z,
                        pose.orientation.w],
        "linear velocity": [twist.linear.x, twist.linear.y, twist.linear.z],
        "angular velocity": [twist.angular.x, twist.angular.y, twist.angular.z],
    }
    return {name: np.asarray(values, dtype=np.float64) for name, values in fields.items()}


def odometry_to_sample(msg: Any) -> OdometrySample:
    """nav_msgs/Odometry -> OdometrySample; NaN/inf, a position or velocity beyond
    MAX_ODOMETRY_MAGNITUDE or a zero quaternion raise."""
    arrays = odometry_arrays(msg)
    for name, values in arrays.items():
        if not np.isfinite(values).all():
            raise NonFiniteValue(f"odometry {name} holds NaN or inf: {values.tolist()}")
        if name != "orientation" and np.abs(values).max() > MAX_ODOMETRY_MAGNITUDE:
            raise NonFiniteValue(f"odometry {name} beyond {MAX_ODOMETRY_MAGNITUDE:g}: "
                                 f"{values.tolist()}")
    orientation = arrays["orientation"]
    norm = float(np.linalg.norm(orientation))
    if norm < 1e-6:
        raise InvalidOrientation("odometry orientation quaternion has zero norm")
    if not math.isfinite(norm):
        orientation = orientation / np.abs(orientation).max()
        norm = float(np.linalg.norm(orientation))
    return OdometrySample(
        stamp=stamp_to_seconds(msg.header.stamp),
        position=arrays["position"],
        quaternion=orientation / norm,
        linear=arrays["linear velocity"],
        angular=arrays["angular velocity"],
    )


def camera_info_intrinsics(msg: Any) -> tuple[float, float, float, float, int, int]:
    """sensor_msgs/CameraInfo -> (fx, fy, cx, cy, width, height); an uncalibrated (zero) or
    non-finite K raises."""
    k = np.asarray(msg.k, dtype=np.float64)
    if k.shape != (9,) or not np.isfinite(k).all():
        raise NonFiniteValue(f"CameraInfo K must be 9 finite values, got {k.tolist()}")
    fx, fy, cx, cy = float(k[0]), float(k[4]), float(k[2]), float(k[5])
    if fx <= 0 or fy <= 0:
        raise SizeMismatch(f"CameraInfo K has fx {fx}, fy {fy} (uncalibrated camera)")
    if msg.width <= 0 or msg.height <= 0:
        raise SizeMismatch(f"CameraInfo size {msg.width}x{msg.height} is empty")
    return fx, fy, cx, cy, int(msg.width), int(msg.height)
