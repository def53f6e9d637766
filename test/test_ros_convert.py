import math

import cv2
import numpy as np
import pytest
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CompressedImage, Image

from flashdrive_ros.ros.convert import (
    ConversionError,
    CorruptPayload,
    InvalidOrientation,
    InvalidStamp,
    NonFiniteValue,
    SizeMismatch,
    UnsupportedEncoding,
    decode_compressed,
    image_msg_to_rgb,
    odometry_to_sample,
    raw_to_rgb,
    seconds_to_sec_nanosec,
    seconds_to_stamp,
    stamp_to_seconds,
)


def rgb_image(h=24, w=32, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def encode(rgb, ext):
    ok, buf = cv2.imencode(ext, cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    return buf.tobytes()


def test_png_roundtrip_is_exact_and_rgb_ordered():
    rgb = rgb_image()
    msg = CompressedImage(format="rgb8; png compressed bgr8", data=encode(rgb, ".png"))
    np.testing.assert_array_equal(image_msg_to_rgb(msg), rgb)


def test_jpeg_decodes_close_in_rgb_order():
    rgb = np.zeros((32, 48, 3), np.uint8)
    rgb[..., 0] = 200
    rgb[..., 2] = 30
    out = decode_compressed("jpeg", encode(rgb, ".jpg"))
    assert out.shape == (32, 48, 3) and out.dtype == np.uint8
    assert abs(int(out[..., 0].mean()) - 200) < 4 and abs(int(out[..., 2].mean()) - 30) < 4


@pytest.mark.parametrize("fmt, payload, error", [
    ("jpeg", b"", CorruptPayload),
    ("jpeg", b"not an image at all", CorruptPayload),
    ("jpeg", "truncated", CorruptPayload),
    ("png", "truncated-png", CorruptPayload),
    ("png", "jpeg-bytes", CorruptPayload),
    ("h264", "jpeg-bytes", UnsupportedEncoding),
    ("16UC1; compressedDepth", "png-bytes", UnsupportedEncoding),
])
def test_compressed_failures_are_typed(fmt, payload, error):
    jpeg = encode(rgb_image(), ".jpg")
    png = encode(rgb_image(), ".png")
    payload = {"truncated": jpeg[: len(jpeg) // 2], "truncated-png": png[: len(png) // 2],
               "jpeg-bytes": jpeg, "png-bytes": png}.get(payload, payload)
    with pytest.raises(error) as info:
        decode_compressed(fmt, payload)
    assert isinstance(info.value, ConversionError) and str(info.value)


def test_jpeg_with_broken_markers_in_the_middle_is_rejected():
    jpeg = bytearray(encode(rgb_image(64, 64), ".jpg"))
    jpeg[2:200] = bytes(198)
    with pytest.raises(CorruptPayload):
        decode_compressed("jpeg", bytes(jpeg))


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8"])
def test_raw_color_encodings_with_padding(encoding):
    rgb = rgb_image(5, 7)
    channels = 4 if encoding.endswith("a8") else 3
    pixels = np.zeros((5, 7, channels), np.uint8)
    order = [0, 1, 2] if encoding.startswith("rgb") else [2, 1, 0]
    pixels[..., :3] = rgb[..., order]
    if channels == 4:
        pixels[..., 3] = 255
    step = 7 * channels + 5
    rows = np.full((5, step), 77, np.uint8)
    rows[:, : 7 * channels] = pixels.reshape(5, -1)
    msg = Image(height=5, width=7, encoding=encoding, step=step, data=rows.tobytes())
    np.testing.assert_array_equal(image_msg_to_rgb(msg), rgb)


def test_raw_mono8():
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4)
    out = raw_to_rgb("mono8", 3, 4, 4, gray.tobytes())
    assert out.shape == (3, 4, 3)
    np.testing.assert_array_equal(out[..., 1], gray)


@pytest.mark.parametrize("args, error", [
    (("nv12", 2, 2, 2, bytes(6)), UnsupportedEncoding),
    (("32FC1", 2, 2, 8, bytes(16)), UnsupportedEncoding),
    (("bayer_rggb8", 3, 2, 2, bytes(6)), SizeMismatch),
    (("yuv422", 2, 3, 6, bytes(12)), SizeMismatch),
    (("rgb16", 2, 2, 6, bytes(12)), SizeMismatch),
    (("rgb8", 2, 2, 5, bytes(10)), SizeMismatch),
    (("rgb8", 2, 2, 6, bytes(11)), SizeMismatch),
    (("rgb8", 0, 2, 6, b""), SizeMismatch),
])
def test_raw_failures(args, error):
    with pytest.raises(error):
        raw_to_rgb(*args)


def test_stamps_roundtrip_and_reject_bad_values():
    assert seconds_to_sec_nanosec(12.25) == (12, 250_000_000)
    assert seconds_to_sec_nanosec(-0.5) == (-1, 500_000_000)
    stamp = seconds_to_stamp(1700000000.123456789)
    assert stamp_to_seconds(stamp) == pytest.approx(1700000000.123456789, abs=1e-6)
    with pytest.raises(InvalidStamp):
        seconds_to_stamp(float("nan"))
    with pytest.raises(InvalidStamp):
        stamp_to_seconds(type("T", (), {"sec": 1, "nanosec": 2_000_000_000})())


def odometry(yaw=0.3, vx=5.0):
    msg = Odometry()
    msg.header.stamp = Time(sec=10, nanosec=500_000_000)
    msg.pose.pose.position.x = 1.0
    msg.pose.pose.position.y = -2.0
    msg.pose.pose.orientation.z = 2.0 * math.sin(yaw / 2)
    msg.pose.pose.orientation.w = 2.0 * math.cos(yaw / 2)
    msg.twist.twist.linear.x = vx
    msg.twist.twist.angular.z = 0.1
    return msg


def test_odometry_sample():
    sample = odometry_to_sample(odometry())
    assert sample.stamp == pytest.approx(10.5)
    assert sample.yaw == pytest.approx(0.3)
    assert np.linalg.norm(sample.quaternion) == pytest.approx(1.0)
    assert sample.speed == pytest.approx(5.0)
    np.testing.assert_allclose(sample.position, [1.0, -2.0, 0.0])


@pytest.mark.parametrize("field", ["position", "orientation", "linear", "angular"])
def test_odometry_rejects_non_finite(field):
    msg = odometry()
    target = {"position": msg.pose.pose.position, "orientation": msg.pose.pose.orientation,
              "linear": msg.twist.twist.linear, "angular": msg.twist.twist.angular}[field]
    target.x = float("nan") if field != "linear" else float("inf")
    with pytest.raises(NonFiniteValue, match="NaN or inf"):
        odometry_to_sample(msg)


def test_odometry_rejects_zero_quaternion():
    msg = odometry()
    msg.pose.pose.orientation.z = 0.0
    msg.pose.pose.orientation.w = 0.0
    with pytest.raises(InvalidOrientation):
        odometry_to_sample(msg)
