"""Corners of an upright box resting at height z0 (vehicles, people, buildings, poles)."""

from __future__ import annotations

import numpy as np


def box_corners(x, y, yaw, length, width, height, z0=0.0) -> np.ndarray:
    """[8, 3] corners: bottom face then top face, counter-clockwise from front-left."""
    c, s = np.cos(yaw), np.sin(yaw)
    lx = np.array([1, 1, -1, -1]) * length / 2
    ly = np.array([1, -1, -1, 1]) * width / 2
    px, py = x + c * lx - s * ly, y + s * lx + c * ly
    bottom = np.stack([px, py, np.full(4, float(z0))], axis=1)
    top = bottom + (0.0, 0.0, height)
    return np.concatenate([bottom, top], axis=0)
