"""Bag image messages (CompressedImage JPEG/PNG, raw Image in any encoding that
ros/raw_encodings.py reads) -> RGB uint8 [H, W, 3], decoded
as the drive node decodes them (ros/convert.py), reduced to the model size on the way when a
reducer is given. H.264 / H.265 packets (CompressedImage with a video format,
foxglove_msgs/CompressedVideo or ffmpeg_image_transport_msgs/FFMPEGPacket) are decoded per
camera stream (ros/video_decode.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from flashdrive_ros.eval.errors import ImageDecodeError
from flashdrive_ros.ros import convert
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.ros.video_decode import encoder_codec, video_codec
from flashdrive_ros.sim.messages import COMPRESSED_VIDEO_TYPE, FFMPEG_PACKET_TYPE

COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
RAW_TYPE = "sensor_msgs/msg/Image"
IMAGE_TYPES = (COMPRESSED_TYPE, RAW_TYPE, COMPRESSED_VIDEO_TYPE, FFMPEG_PACKET_TYPE)
NOT_SUBSCRIBED_TYPES = (COMPRESSED_VIDEO_TYPE, FFMPEG_PACKET_TYPE)


def image_stamp_and_frame(msgtype: str, msg: Any) -> tuple[Any, str]:
    """(builtin_interfaces/Time, frame_id) of an image message (CompressedVideo has no
    header: its timestamp and frame_id fields)."""
    if msgtype == COMPRESSED_VIDEO_TYPE:
        return msg.timestamp, str(msg.frame_id)
    return msg.header.stamp, str(msg.header.frame_id)


def video_codec_of(msgtype: str, msg: Any) -> str | None:
    """The decoder of a video packet (None: a still image)."""
    if msgtype == RAW_TYPE:
        return None
    if msgtype == FFMPEG_PACKET_TYPE:
        codec = encoder_codec(str(msg.encoding))
        if codec is None:
            raise ImageDecodeError(f"unsupported_encoding: FFMPEGPacket encoding "
                                   f"{msg.encoding!r} is not H.264 or H.265")
        return codec
    try:
        codec = video_codec(str(msg.format))
    except convert.ConversionError as exc:
        raise ImageDecodeError(f"{exc.reason}: {exc}") from None
    if codec is None and msgtype == COMPRESSED_VIDEO_TYPE:
        raise ImageDecodeError(f"unsupported_encoding: CompressedVideo format {msg.format!r} "
                               f"is not H.264 or H.265")
    return codec


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
