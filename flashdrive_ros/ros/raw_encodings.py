"""sensor_msgs/Image encodings (the sensor_msgs/image_encodings names) -> RGB uint8: 8-bit
colour orders, 16-bit colour and mono (scaled to 8 bit), Bayer mosaics (demosaiced) and packed
YUV 4:2:2. With a reducer, a Bayer mosaic is demosaiced at half size (one RGB pixel per 2x2
cell) when the reducer would halve the full-size image, and a YUV image is converted at full
size, then reduced (the faster of the two at 1920x1080, docs/PERFORMANCE.md), so neither is
area-averaged in its own layout; the others are reduced in their own channel order before
conversion."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from flashdrive_ros.ros.image_reduce import MIN_FACTOR, ImageReducer

COLOUR, BAYER, YUV = "colour", "bayer", "yuv"
SCALE_16_TO_8 = 255.0 / 65535.0
ENCODING_ALIASES = {"8uc3": "bgr8", "8uc1": "mono8"}


@dataclass(frozen=True)
class RawLayout:
    """channels: values per pixel; sample_bytes: bytes per value; kind: COLOUR, BAYER or YUV;
    to_rgb: the cv2 conversion code to RGB (None: already RGB); pattern: the Bayer 2x2 cell
    (row-major, e.g. "rggb") or the YUV byte order of two pixels (e.g. "uyvy")."""

    channels: int
    sample_bytes: int
    kind: str
    to_rgb: int | None
    pattern: str = ""

    @property
    def pixel_bytes(self) -> int:
        return self.channels * self.sample_bytes

    @property
    def cell(self) -> tuple[int, int]:
        """(rows, columns) the image size must be a multiple of."""
        return {BAYER: (2, 2), YUV: (1, 2)}.get(self.kind, (1, 1))


RAW_LAYOUTS = {
    "rgb8": RawLayout(3, 1, COLOUR, None),
    "bgr8": RawLayout(3, 1, COLOUR, cv2.COLOR_BGR2RGB),
    "mono8": RawLayout(1, 1, COLOUR, cv2.COLOR_GRAY2RGB),
    "rgba8": RawLayout(4, 1, COLOUR, cv2.COLOR_RGBA2RGB),
    "bgra8": RawLayout(4, 1, COLOUR, cv2.COLOR_BGRA2RGB),
    "rgb16": RawLayout(3, 2, COLOUR, None),
    "bgr16": RawLayout(3, 2, COLOUR, cv2.COLOR_BGR2RGB),
    "mono16": RawLayout(1, 2, COLOUR, cv2.COLOR_GRAY2RGB),
    # OpenCV names a mosaic by the 2x2 cell starting at its second row and column:
    # ROS's RGGB is OpenCV's BG, and so on.
    "bayer_rggb8": RawLayout(1, 1, BAYER, cv2.COLOR_BayerBG2RGB, "rggb"),
    "bayer_bggr8": RawLayout(1, 1, BAYER, cv2.COLOR_BayerRG2RGB, "bggr"),
    "bayer_gbrg8": RawLayout(1, 1, BAYER, cv2.COLOR_BayerGR2RGB, "gbrg"),
    "bayer_grbg8": RawLayout(1, 1, BAYER, cv2.COLOR_BayerGB2RGB, "grbg"),
    "yuv422": RawLayout(2, 1, YUV, cv2.COLOR_YUV2RGB_UYVY, "uyvy"),
    "yuv422_yuy2": RawLayout(2, 1, YUV, cv2.COLOR_YUV2RGB_YUY2, "yuyv"),
}
ACCEPTED_ENCODINGS = tuple(sorted(RAW_LAYOUTS)) + tuple(name.upper() for name in
                                                        ENCODING_ALIASES)


def layout_of(encoding: str) -> RawLayout | None:
    name = encoding.lower()
    return RAW_LAYOUTS.get(ENCODING_ALIASES.get(name, name))


def alias_note(encoding: str) -> str:
    """The diagnostics note for an encoding read as another one ("" for the others)."""
    target = ENCODING_ALIASES.get(encoding.lower())
    if target is None:
        return ""
    return (f"{encoding} names no colour order (what cv_bridge writes when none is set): "
            f"read as {target}")


def _halves(reducer: ImageReducer | None, height: int, width: int) -> bool:
    """Whether the reducer would halve an image of this size."""
    if reducer is None:
        return False
    model_height, model_width = reducer.size
    return height // 2 >= MIN_FACTOR * model_height and width // 2 >= MIN_FACTOR * model_width


def _to_8bit(pixels: np.ndarray) -> np.ndarray:
    """uint16 [H, W, C] -> uint8 [H, W, C], 65535 -> 255, rounded."""
    scaled = cv2.convertScaleAbs(pixels, alpha=SCALE_16_TO_8)
    return scaled.reshape(pixels.shape)


def bayer_half(mosaic: np.ndarray, pattern: str) -> np.ndarray:
    """uint8 [H, W] mosaic -> RGB uint8 [H/2, W/2, 3], one pixel per 2x2 cell (the two
    greens averaged, rounded)."""
    cells = [mosaic[0::2, 0::2], mosaic[0::2, 1::2], mosaic[1::2, 0::2], mosaic[1::2, 1::2]]
    red, blue = cells[pattern.index("r")], cells[pattern.index("b")]
    first = pattern.index("g")
    greens = (cells[first].astype(np.uint16) + cells[pattern.index("g", first + 1)] + 1) >> 1
    return cv2.merge([red, greens.astype(np.uint8), blue])


def pixels_to_rgb(layout: RawLayout, pixels: np.ndarray,
                  reducer: ImageReducer | None = None) -> np.ndarray:
    """pixels: [H, W, channels] in the layout (uint16 in native byte order for 16-bit,
    uint8 otherwise) -> RGB uint8 [H, W, 3], or with a reducer at the model size."""
    height, width = pixels.shape[:2]
    if layout.kind == BAYER:
        mosaic = np.ascontiguousarray(pixels[:, :, 0])  # [H, W]
        rgb = (bayer_half(mosaic, layout.pattern) if _halves(reducer, height, width)
               else cv2.cvtColor(mosaic, layout.to_rgb))
    elif layout.kind == YUV:
        rgb = cv2.cvtColor(np.ascontiguousarray(pixels), layout.to_rgb)
    else:
        if reducer is not None:
            pixels = reducer.stage(pixels)
        if layout.sample_bytes == 2:
            pixels = _to_8bit(np.ascontiguousarray(pixels))
        if layout.to_rgb is None:
            rgb = np.ascontiguousarray(pixels)
            if not rgb.flags.writeable:
                rgb = rgb.copy()
        else:
            rgb = cv2.cvtColor(np.ascontiguousarray(pixels), layout.to_rgb)
        return rgb if reducer is None else reducer.finish(rgb)
    return rgb if reducer is None else reducer.finish(reducer.stage(rgb))
