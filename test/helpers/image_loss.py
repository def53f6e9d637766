"""The loss bound of a bilinear demosaic: per pixel and channel, the largest difference to a
3x3 neighbour (a missing channel is a convex combination of neighbours that carry it)."""

import numpy as np


def neighbour_spread(rgb: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] -> int [H, W, 3]: the largest |difference| to a 3x3 neighbour."""
    source = rgb.astype(int)
    padded = np.pad(source, ((1, 1), (1, 1), (0, 0)), mode="edge")
    height, width = source.shape[:2]
    return np.max([np.abs(padded[1 + dy:1 + dy + height, 1 + dx:1 + dx + width] - source)
                   for dy in (-1, 0, 1) for dx in (-1, 0, 1)], axis=0)
