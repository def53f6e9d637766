"""RGB images -> the pixels of a sensor_msgs/Image in a camera encoding (the sensor_msgs
image_encodings names), as camera drivers and loggers write them: colour orders, 16-bit
(value * 257, so that 255 is full scale), Bayer mosaics and packed YUV 4:2:2 (BT.601,
limited range, as OpenCV converts it)."""

from __future__ import annotations

import cv2
import numpy as np

BAYER_PATTERNS = ("rggb", "bggr", "gbrg", "grbg")
BAYER_ENCODINGS = tuple(f"bayer_{p}8" for p in BAYER_PATTERNS)
YUV_ENCODINGS = ("yuv422", "yuv422_yuy2")
RAW_ENCODINGS = ("rgb8", "bgr8", "mono8", "rgb16", "bgr16", "mono16", "8UC3", "8UC1",
                 *BAYER_ENCODINGS, *YUV_ENCODINGS)
CELLS = {**dict.fromkeys(BAYER_ENCODINGS, (2, 2)), **dict.fromkeys(YUV_ENCODINGS, (2, 1))}
RGB_INDEX = {"r": 0, "g": 1, "b": 2}


def size_cell(encoding: str) -> tuple[int, int]:
    """(width, height) multiples an image in `encoding` must have."""
    return CELLS.get(encoding, (1, 1))


def bayer_mosaic(rgb: np.ndarray, pattern: str) -> np.ndarray:
    """RGB uint8 [H, W, 3] (H, W even) -> mosaic uint8 [H, W]: each pixel keeps the channel
    that `pattern` (the 2x2 cell, row-major) puts there."""
    mosaic = np.empty(rgb.shape[:2], np.uint8)
    for k, (row, column) in enumerate(((0, 0), (0, 1), (1, 0), (1, 1))):
        mosaic[row::2, column::2] = rgb[row::2, column::2, RGB_INDEX[pattern[k]]]
    return mosaic


def raw_pixels(rgb: np.ndarray, encoding: str) -> np.ndarray:
    """RGB uint8 [H, W, 3] -> pixels in `encoding`: uint8 [H, W, C] or [H, W], uint16 for
    the 16-bit encodings."""
    if encoding in ("bgr8", "8UC3"):
        return np.ascontiguousarray(rgb[:, :, ::-1])
    if encoding in ("mono8", "8UC1"):
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    if encoding == "rgb16":
        return rgb.astype(np.uint16) * 257
    if encoding == "bgr16":
        return np.ascontiguousarray(rgb[:, :, ::-1]).astype(np.uint16) * 257
    if encoding == "mono16":
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.uint16) * 257
    if encoding in BAYER_ENCODINGS:
        return bayer_mosaic(rgb, encoding[len("bayer_"):-1])
    if encoding == "yuv422":
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_UYVY)
    if encoding == "yuv422_yuy2":
        return cv2.cvtColor(rgb, cv2.COLOR_RGB2YUV_YUY2)
    if encoding == "rgb8":
        return rgb
    raise ValueError(f"encoding {encoding!r} not in {RAW_ENCODINGS}")
