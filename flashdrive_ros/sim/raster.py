"""Drawing 3D polygons into one camera image: frustum clipping (near plane and a guard band),
projection and OpenCV filling with sub-pixel precision."""

from __future__ import annotations

import cv2
import numpy as np

NEAR = 0.05
SHIFT = 3
_SCALE = float(1 << SHIFT)


class CameraRaster:
    """Clips and fills polygons given in the camera's optical frame.

    planes: [5, 3] normals n with inside = n . p >= offset (near plane first).
    """

    def __init__(self, k: np.ndarray, width: int, height: int, guard: float = 1.0) -> None:
        self.fx, self.fy = float(k[0, 0]), float(k[1, 1])
        self.cx, self.cy = float(k[0, 2]), float(k[1, 2])
        gu, gv = guard * width, guard * height
        u0, u1, v0, v1 = -gu, width + gu, -gv, height + gv
        self.normals = np.array([
            [0.0, 0.0, 1.0],
            [self.fx, 0.0, self.cx - u0],
            [-self.fx, 0.0, u1 - self.cx],
            [0.0, self.fy, self.cy - v0],
            [0.0, -self.fy, v1 - self.cy],
        ])
        self.offsets = np.array([NEAR, 0.0, 0.0, 0.0, 0.0])

    def distances(self, pts: np.ndarray) -> np.ndarray:
        """[N, 5] signed distances of points [N, 3] to the five planes (inside >= 0)."""
        return pts @ self.normals.T - self.offsets

    def clip(self, poly: np.ndarray, dist: np.ndarray | None = None) -> np.ndarray | None:
        """The part of polygon [N, 3] inside the frustum, or None when nothing is left."""
        if dist is None:
            dist = self.distances(poly)
        inside = dist >= 0
        if inside.all():
            return poly
        if (~inside).all(axis=0).any():
            return None
        for j in np.flatnonzero(~inside.all(axis=0)):
            d = poly @ self.normals[j] - self.offsets[j]
            keep = d >= 0
            if keep.all():
                continue
            if not keep.any() or len(poly) < 3:
                return None
            n = len(poly)
            nxt = np.arange(1, n + 1) % n
            dn = d[nxt]
            cross = keep != (dn >= 0)
            t = d / np.where(cross, d - dn, 1.0)
            out = np.empty((n, 2, 3))
            out[:, 0] = poly
            out[:, 1] = poly + t[:, None] * (poly[nxt] - poly)
            mask = np.empty((n, 2), dtype=bool)
            mask[:, 0], mask[:, 1] = keep, cross
            poly = out.reshape(-1, 3)[mask.reshape(-1)]
        return poly if len(poly) >= 3 else None

    def project(self, pts: np.ndarray) -> np.ndarray:
        """Pixel coordinates [N, 2] of points in front of the camera."""
        return np.stack([self.fx * pts[:, 0] / pts[:, 2] + self.cx,
                         self.fy * pts[:, 1] / pts[:, 2] + self.cy], axis=1)

    def project_fixed(self, pts: np.ndarray) -> np.ndarray:
        """Fixed-point (SHIFT bits) pixel coordinates [N, 2] int32; rows behind the near plane
        are meaningless and must not be drawn."""
        z = np.maximum(pts[:, 2], NEAR)
        u = (self.fx * pts[:, 0] / z + self.cx) * _SCALE
        v = (self.fy * pts[:, 1] / z + self.cy) * _SCALE
        return np.stack([np.clip(u, -1e7, 1e7), np.clip(v, -1e7, 1e7)], axis=1).round() \
            .astype(np.int32)

    def fill_fixed(self, img: np.ndarray, uv, color) -> None:
        """Fill polygon(s) already inside the frustum, given in fixed-point pixels."""
        cv2.fillPoly(img, uv if isinstance(uv, list) else [uv], color, lineType=cv2.LINE_AA,
                     shift=SHIFT)

    def fill(self, img: np.ndarray, poly: np.ndarray, color, dist=None) -> None:
        clipped = self.clip(poly, dist)
        if clipped is None:
            return
        uv = np.round(self.project(clipped) * _SCALE).astype(np.int32)
        cv2.fillPoly(img, [uv], color, lineType=cv2.LINE_AA, shift=SHIFT)

    def dot(self, img: np.ndarray, center: np.ndarray, radius_m: float, color) -> None:
        """A filled disc for a small light source, at least one pixel wide."""
        if center[2] < NEAR or (self.distances(center[None])[0] < 0).any():
            return
        u, v = self.project(center[None])[0]
        r = max(self.fx * radius_m / center[2], 0.8)
        cv2.circle(img, (int(round(u * _SCALE)), int(round(v * _SCALE))),
                   int(round(r * _SCALE)), color, -1, lineType=cv2.LINE_AA, shift=SHIFT)
