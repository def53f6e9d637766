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
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.ros.raw_encodings import ACCEPTED_ENCODINGS, layout_of, pixels_to_rgb

NS_PER_S = 1_000_000_000
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


class ZeroStamp(InvalidStamp):
    reason = "zero_stamp"


ZERO_STAMP_PROBLEM = ("header stamp is zero: the driver does not stamp its messages (set "
                      "header.stamp at capture); dropped")


def stamp_to_seconds(stamp: Any) -> float:
    """builtin_interfaces/Time (sec, nanosec) -> float seconds."""
    sec, nanosec = int(stamp.sec), int(stamp.nanosec)
    if not 0 <= nanosec < NS_PER_S:
        raise InvalidStamp(f"nanosec {nanosec} outside [0, 1e9)")
    return sec + nanosec * 1e-9


def stamped_seconds(stamp: Any) -> float:
    """stamp_to_seconds of a header stamp that a driver set: zero raises ZeroStamp."""
    if int(stamp.sec) == 0 and int(stamp.nanosec) == 0:
        raise ZeroStamp(ZERO_STAMP_PROBLEM)
    return stamp_to_seconds(stamp)


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


def byte_view(data) -> np.ndarray:
    """A message's uint8[] field (bytes, array.array, numpy, list) as uint8 [N], without a
    copy where the field exposes a buffer."""
    try:
        return np.frombuffer(data, np.uint8)
    except (TypeError, ValueError):
        return np.asarray(data, dtype=np.uint8).reshape(-1)


def decode_compressed(fmt: str, data: bytes, reducer: ImageReducer | None = None
                      ) -> np.ndarray:
    """CompressedImage payload (JPEG or PNG) -> RGB uint8 [H, W, 3]; with a reducer, at the
    model size (JPEG decoded at a reduced scale where the reducer allows)."""
    buffer = byte_view(data)
    data = buffer.tobytes()
    if not data:
        raise CorruptPayload("empty compressed payload")
    kind = _compressed_kind(fmt, data)
    if kind == "jpeg" and not data.rstrip(b"\x00").endswith(JPEG_EOI):
        raise CorruptPayload("JPEG payload is truncated (no end-of-image marker)")
    if kind == "png" and not data.endswith(PNG_IEND):
        raise CorruptPayload("PNG payload is truncated (no IEND chunk)")
    flag = cv2.IMREAD_COLOR
    if reducer is not None and kind == "jpeg":
        flag = reducer.jpeg_flag(data)
    try:
        bgr = cv2.imdecode(buffer, flag)
    except cv2.error as exc:
        raise CorruptPayload(f"{kind} payload does not decode: {exc}") from None
    if bgr is None or bgr.ndim != 3 or bgr.shape[2] != 3 or bgr.size == 0:
        raise CorruptPayload(f"{kind} payload of {len(data)} bytes does not decode")
    if reducer is None:
        return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    return reducer.finish(cv2.cvtColor(reducer.stage(bgr), cv2.COLOR_BGR2RGB))


def raw_to_rgb(encoding: str, height: int, width: int, step: int, data: bytes,
               is_bigendian: int = 0, reducer: ImageReducer | None = None) -> np.ndarray:
    """sensor_msgs/Image fields (an encoding of ros/raw_encodings.py; rows may be padded;
    16-bit samples in the byte order is_bigendian says) -> RGB uint8 [H, W, 3]; with a
    reducer, at the model size."""
    layout = layout_of(encoding)
    if layout is None:
        raise UnsupportedEncoding(f"image encoding {encoding!r} not in "
                                  f"{list(ACCEPTED_ENCODINGS)}")
    if height <= 0 or width <= 0:
        raise SizeMismatch(f"image size {width}x{height} is empty")
    cell_rows, cell_columns = layout.cell
    if height % cell_rows or width % cell_columns:
        raise SizeMismatch(f"{encoding} image size {width}x{height} is not a multiple of its "
                           f"{cell_columns}x{cell_rows} cell")
    row_bytes = width * layout.pixel_bytes
    if step < row_bytes:
        raise SizeMismatch(f"step {step} < width {width} * {layout.pixel_bytes} bytes per "
                           f"pixel")
    buffer = byte_view(data)
    if buffer.size != step * height:
        raise SizeMismatch(f"data has {buffer.size} bytes, expected step {step} * height "
                           f"{height} = {step * height}")
    rows = buffer.reshape(height, step)[:, :row_bytes]  # [H, row_bytes]
    if layout.sample_bytes == 2:
        order = ">" if is_bigendian else "<"
        rows = np.ascontiguousarray(rows).view(order + "u2").astype(np.uint16, copy=False)
    return pixels_to_rgb(layout, rows.reshape(height, width, layout.channels), reducer)


def image_msg_to_rgb(msg: Any, reducer: ImageReducer | None = None) -> np.ndarray:
    """sensor_msgs/CompressedImage or sensor_msgs/Image -> RGB uint8 [H, W, 3] (at the model
    size with a reducer)."""
    if hasattr(msg, "format"):
        return decode_compressed(msg.format, msg.data, reducer)
    if hasattr(msg, "encoding"):
        return raw_to_rgb(msg.encoding, int(msg.height), int(msg.width), int(msg.step),
                          msg.data, msg.is_bigendian, reducer)
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
