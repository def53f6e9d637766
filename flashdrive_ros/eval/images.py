"""Bag image messages (CompressedImage JPEG/PNG, raw Image) -> RGB uint8 [H, W, 3]."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from flashdrive_ros.eval.errors import ImageDecodeError

COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
RAW_TYPE = "sensor_msgs/msg/Image"
IMAGE_TYPES = (COMPRESSED_TYPE, RAW_TYPE)
RAW_CHANNELS = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}


def decode_compressed(fmt: str, data: Any) -> np.ndarray:
    payload = np.frombuffer(bytes(data), np.uint8)
    if payload.size == 0:
        raise ImageDecodeError(f"empty compressed payload (format {fmt!r})")
    bgr = cv2.imdecode(payload, cv2.IMREAD_COLOR)
    if bgr is None or bgr.ndim != 3 or bgr.shape[2] != 3:
        raise ImageDecodeError(f"compressed payload of {payload.size} bytes (format {fmt!r}) "
                               f"does not decode")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def decode_raw(encoding: str, height: int, width: int, step: int, data: Any) -> np.ndarray:
    name = encoding.lower()
    channels = RAW_CHANNELS.get(name)
    if channels is None:
        raise ImageDecodeError(f"image encoding {encoding!r} not in {sorted(RAW_CHANNELS)}")
    if height <= 0 or width <= 0 or step < width * channels:
        raise ImageDecodeError(f"image size {width}x{height} with step {step} is invalid")
    buffer = np.frombuffer(bytes(data), np.uint8)
    if buffer.size != step * height:
        raise ImageDecodeError(f"image data has {buffer.size} bytes, expected {step * height}")
    pixels = buffer.reshape(height, step)[:, :width * channels].reshape(height, width, channels)
    if name == "mono8":
        return np.ascontiguousarray(np.repeat(pixels, 3, axis=2))
    if name.startswith("bgr"):
        return np.ascontiguousarray(pixels[:, :, 2::-1])
    return np.ascontiguousarray(pixels[:, :, :3])


def decode_image(msgtype: str, msg: Any) -> np.ndarray:
    """A deserialized CompressedImage or Image -> RGB uint8 [H, W, 3]."""
    if msgtype == COMPRESSED_TYPE:
        return decode_compressed(msg.format, msg.data)
    if msgtype == RAW_TYPE:
        return decode_raw(msg.encoding, int(msg.height), int(msg.width), int(msg.step), msg.data)
    raise ImageDecodeError(f"{msgtype} is not an image type {IMAGE_TYPES}")
