"""Camera images reduced to the model's input size as they arrive, so that no full-size frame
is kept: a JPEG is decoded at 1/2, 1/4 or 1/8 scale (DCT scaling), a raw (or PNG) image is
halved by area averaging, as long as each side stays at least MIN_FACTOR times the model's;
the last step is the model's own resize (model/preprocess.py: antialiased bicubic), rounded
to uint8."""

from __future__ import annotations

import cv2
import numpy as np
import torch

from flashdrive_ros.model.preprocess import resize_images

MIN_FACTOR = 3
JPEG_REDUCED_FLAGS = ((8, cv2.IMREAD_REDUCED_COLOR_8), (4, cv2.IMREAD_REDUCED_COLOR_4),
                      (2, cv2.IMREAD_REDUCED_COLOR_2))
JPEG_SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from a JPEG's start-of-frame segment, or None when none is found."""
    i = 2
    end = len(data) - 9
    while i < end:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker in JPEG_SOF_MARKERS:
            return (data[i + 5] << 8) | data[i + 6], (data[i + 7] << 8) | data[i + 8]
        if 0xD0 <= marker <= 0xD9 or marker == 0x01:
            i += 2
            continue
        i += 2 + ((data[i + 2] << 8) | data[i + 3])
    return None


class ImageReducer:
    """size: (height, width) of the model input."""

    def __init__(self, size: tuple[int, int]) -> None:
        height, width = (int(v) for v in size)
        if height <= 0 or width <= 0:
            raise ValueError(f"model image size must be positive, got {height}x{width}")
        self.size = (height, width)

    def jpeg_flag(self, data: bytes) -> int:
        """The cv2.imdecode flag: the smallest DCT-scaled decode whose sides stay at least
        MIN_FACTOR times the model's (full size when the header gives no size)."""
        full = jpeg_size(data)
        if full is not None:
            height, width = self.size
            for factor, flag in JPEG_REDUCED_FLAGS:
                if (full[0] // factor >= MIN_FACTOR * height
                        and full[1] // factor >= MIN_FACTOR * width):
                    return flag
        return cv2.IMREAD_COLOR

    def stage(self, pixels: np.ndarray) -> np.ndarray:
        """uint8 [H, W, C] (any channel order) -> halved by area averaging (an odd last row
        or column dropped) while each side stays at least MIN_FACTOR times the model's."""
        height, width = self.size
        while (pixels.shape[0] // 2 >= MIN_FACTOR * height
               and pixels.shape[1] // 2 >= MIN_FACTOR * width):
            even = pixels[:pixels.shape[0] // 2 * 2, :pixels.shape[1] // 2 * 2]
            pixels = cv2.resize(even, (even.shape[1] // 2, even.shape[0] // 2),
                                interpolation=cv2.INTER_AREA)
            if pixels.ndim == 2:
                pixels = pixels[:, :, None]
        return pixels

    def finish(self, rgb: np.ndarray) -> np.ndarray:
        """RGB uint8 [H, W, 3] -> RGB uint8 [h, w, 3] at the model size, by the model's
        resize, rounded."""
        if rgb.shape[:2] == self.size:
            return np.ascontiguousarray(rgb)
        resized = resize_images(np.ascontiguousarray(rgb)[None], self.size)[0]  # [3, h, w]
        pixels = resized.round_().clamp_(0, 255).to(torch.uint8)  # [3, h, w]
        return pixels.permute(1, 2, 0).contiguous().numpy()
