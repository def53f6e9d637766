"""Oriented rectangles on the ground plane: corners and overlap (separating axis test)."""

from __future__ import annotations

import numpy as np


def rectangle(x: float, y: float, yaw: float, length: float, width: float) -> np.ndarray:
    """[4, 2] corners of a rectangle centred at (x, y), heading yaw, counter-clockwise."""
    c, s = np.cos(yaw), np.sin(yaw)
    lx = np.array([1.0, -1.0, -1.0, 1.0]) * length / 2
    ly = np.array([1.0, 1.0, -1.0, -1.0]) * width / 2
    return np.stack([x + c * lx - s * ly, y + s * lx + c * ly], axis=1)


def _axes(corners: np.ndarray) -> np.ndarray:
    edges = np.diff(corners[:3], axis=0)  # [2, 2]: two perpendicular edges
    return np.stack([-edges[:, 1], edges[:, 0]], axis=1)


def overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """True when the convex quadrilaterals a, b ([4, 2] corners) intersect."""
    for axis in np.concatenate([_axes(a), _axes(b)]):
        pa, pb = a @ axis, b @ axis
        if pa.max() < pb.min() or pb.max() < pa.min():
            return False
    return True


def _segment_distance(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Distance of point p from the segment a-b."""
    ab = b - a
    k = float(np.clip(np.dot(p - a, ab) / max(float(np.dot(ab, ab)), 1e-12), 0.0, 1.0))
    return float(np.hypot(*(p - a - k * ab)))


def gap(a: np.ndarray, b: np.ndarray) -> float:
    """Signed distance (m) between the convex quadrilaterals a, b ([4, 2] corners): their
    distance apart, or minus the depth of their overlap."""
    if overlap(a, b):
        depth = np.inf
        for axis in np.concatenate([_axes(a), _axes(b)]):
            axis = axis / np.hypot(*axis)
            pa, pb = a @ axis, b @ axis
            depth = min(depth, pa.max() - pb.min(), pb.max() - pa.min())
        return -float(depth)
    return min(_segment_distance(p, q[i], q[(i + 1) % 4])
               for corners, q in ((a, b), (b, a)) for p in corners for i in range(4))
