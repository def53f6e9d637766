"""Planar polylines parameterised by arc length: poses, curvature, projection of points."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right

import numpy as np


def interp_scalar(x: float, xs: list[float], fs: list[float]) -> float:
    """np.interp of one x over breakpoints xs (ascending) and values fs, in plain floats with
    np.interp's arithmetic (the same bits, without its per-call overhead); NaN for NaN."""
    if x != x:
        return x
    j = bisect_right(xs, x) - 1
    if j < 0:
        return fs[0]
    if j >= len(xs) - 1:
        return fs[-1]
    x0 = xs[j]
    if x0 == x:
        return fs[j]
    return (fs[j + 1] - fs[j]) / (xs[j + 1] - x0) * (x - x0) + fs[j]


class Path:
    """A polyline in the world plane with cumulative arc length.

    points: [N, 2] (x, y); yaw: [N] unwrapped heading of each point.
    """

    def __init__(self, points: np.ndarray, yaw: np.ndarray | None = None) -> None:
        points = np.asarray(points, dtype=np.float64)
        if points.ndim != 2 or points.shape[1] != 2 or len(points) < 2:
            raise ValueError(f"path points must be [N>=2, 2], got {points.shape}")
        seg = np.linalg.norm(np.diff(points, axis=0), axis=1)
        if np.any(seg <= 1e-9):
            raise ValueError("path has repeated points")
        self.points = points
        self.s = np.concatenate([[0.0], np.cumsum(seg)])
        if yaw is None:
            d = np.diff(points, axis=0)
            yaw = np.arctan2(d[:, 1], d[:, 0])
            yaw = np.concatenate([yaw, yaw[-1:]])
        self.yaw = np.unwrap(np.asarray(yaw, dtype=np.float64))
        self.kappa = np.gradient(self.yaw, self.s)
        self._s = self.s.tolist()
        self._columns = (points[:, 0].tolist(), points[:, 1].tolist(), self.yaw.tolist())
        self._px, self._py = np.ascontiguousarray(points.T)

    @property
    def length(self) -> float:
        return float(self.s[-1])

    def pose_at(self, s):
        """(x, y, yaw) at arc length s (scalar or array), clamped to the ends."""
        if isinstance(s, (float, int)):
            return self._pose_at_scalar(float(s))
        x = np.interp(s, self.s, self.points[:, 0])
        y = np.interp(s, self.s, self.points[:, 1])
        yaw = np.interp(s, self.s, self.yaw)
        return x, y, yaw

    def _pose_at_scalar(self, s: float) -> tuple[float, float, float]:
        """`pose_at` of one arc length in plain floats, with np.interp's arithmetic."""
        return tuple(interp_scalar(s, self._s, column) for column in self._columns)

    def offset_point(self, s, d):
        """World (x, y) of the point at arc length s, lateral offset d (left positive)."""
        x, y, yaw = self.pose_at(s)
        return x - np.sin(yaw) * d, y + np.cos(yaw) * d

    def curvature_at(self, s):
        return np.interp(s, self.s, self.kappa)

    def project(self, xy, hint: float | None = None, window: float = 40.0):
        """(s, d) of point xy: nearest arc length and signed lateral offset (left positive).

        With a hint only the stretch [hint - window, hint + window] is searched.
        """
        px, py = float(xy[0]), float(xy[1])
        if hint is None:
            lo, hi = 0, len(self.points)
        else:
            lo = max(bisect_left(self._s, hint - window) - 1, 0)
            hi = min(bisect_left(self._s, hint + window) + 1, len(self.points))
        dx, dy = self._px[lo:hi] - px, self._py[lo:hi] - py
        i = lo + int(np.argmin(dx * dx + dy * dy))
        xs, ys, _ = self._columns
        best_s, best_d, best_dist = 0.0, 0.0, math.inf
        for j in (i - 1, i):
            if j < 0 or j + 1 >= len(self.points):
                continue
            ax, ay, bx, by = xs[j], ys[j], xs[j + 1], ys[j + 1]
            abx, aby = bx - ax, by - ay
            seg_len = self._s[j + 1] - self._s[j]
            u = ((px - ax) * abx + (py - ay) * aby) / (seg_len * seg_len)
            u = min(max(u, 0.0), 1.0)
            qx, qy = ax + u * abx, ay + u * aby
            dist = math.hypot(px - qx, py - qy)
            if dist < best_dist:
                cross = abx * (py - ay) - aby * (px - ax)
                best_s = self._s[j] + u * seg_len
                best_d = math.copysign(dist, cross)
                best_dist = dist
        return best_s, best_d

    def offset_path(self, d: float, s_from: float = 0.0, s_to: float | None = None,
                    reverse: bool = False) -> Path:
        """The parallel path at lateral offset d over [s_from, s_to], optionally reversed."""
        s_to = self.length if s_to is None else s_to
        keep = (self.s >= s_from) & (self.s <= s_to)
        s = self.s[keep]
        x, y = self.offset_point(s, d)
        pts = np.stack([x, y], axis=1)
        yaw = self.yaw[keep]
        if reverse:
            pts, yaw = pts[::-1], yaw[::-1] + np.pi
        return Path(pts, yaw)


def integrate_segments(x0: float, y0: float, yaw0: float,
                       segments: list[tuple[float, float]], ds: float = 0.5) -> Path:
    """A path from a start pose through (length, curvature) segments, sampled every ds."""
    xs, ys, yaws = [x0], [y0], [yaw0]
    x, y, yaw = x0, y0, yaw0
    for length, kappa in segments:
        if length <= 0:
            raise ValueError(f"segment length must be > 0, got {length}")
        n = max(int(round(length / ds)), 1)
        step = length / n
        for _ in range(n):
            if abs(kappa) < 1e-9:
                x += step * np.cos(yaw)
                y += step * np.sin(yaw)
            else:
                new_yaw = yaw + kappa * step
                x += (np.sin(new_yaw) - np.sin(yaw)) / kappa
                y -= (np.cos(new_yaw) - np.cos(yaw)) / kappa
                yaw = new_yaw
            xs.append(x)
            ys.append(y)
            yaws.append(yaw)
    return Path(np.stack([xs, ys], axis=1), np.asarray(yaws))


def join_paths(parts: list[np.ndarray]) -> Path:
    """One path through point arrays laid end to end (duplicate joints dropped)."""
    pts = [parts[0]]
    for p in parts[1:]:
        if np.hypot(*(p[0] - pts[-1][-1])) < 1e-6:
            p = p[1:]
        pts.append(p)
    return Path(np.concatenate(pts, axis=0))
