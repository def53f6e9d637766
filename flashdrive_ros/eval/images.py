"""Bag image messages (CompressedImage JPEG/PNG, raw Image in any encoding that
ros/raw_encodings.py reads) -> RGB uint8 [H, W, 3], decoded
as the drive node decodes them (ros/convert.py), reduced to the model size on the way when a
reducer is given."""

from __future__ import annotations

from typing import Any

import numpy as np

from flashdrive_ros.eval.errors import ImageDecodeError
from flashdrive_ros.ros import convert
from flashdrive_ros.ros.image_reduce import ImageReducer

COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
RAW_TYPE = "sensor_msgs/msg/Image"
IMAGE_TYPES = (COMPRESSED_TYPE, RAW_TYPE)


def decode_compressed(fmt: str, data: Any, reducer: ImageReducer | None = None) -> np.ndarray:
    try:
        return convert.decode_compressed(fmt, data, reducer)
    except convert.ConversionError as exc:
        raise ImageDecodeError(f"{exc.reason}: {exc}") from None


def decode_raw(encoding: str, height: int, width: int, step: int, data: Any,
               is_bigendian: int = 0, reducer: ImageReducer | None = None) -> np.ndarray:
    try:
        return convert.raw_to_rgb(encoding, height, width, step, data, is_bigendian, reducer)
    except convert.ConversionError as exc:
        raise ImageDecodeError(f"{exc.reason}: {exc}") from None


def decode_image(msgtype: str, msg: Any, reducer: ImageReducer | None = None) -> np.ndarray:
    """A deserialized CompressedImage or Image -> RGB uint8 [H, W, 3] (the model size with a
    reducer)."""
    if msgtype == COMPRESSED_TYPE:
        return decode_compressed(msg.format, msg.data, reducer)
    if msgtype == RAW_TYPE:
        return decode_raw(msg.encoding, int(msg.height), int(msg.width), int(msg.step),
                          msg.data, int(msg.is_bigendian), reducer)
    raise ImageDecodeError(f"{msgtype} is not an image type {IMAGE_TYPES}")
