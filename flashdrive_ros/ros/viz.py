"""Trajectory overlay: project planned samples into a camera image and write the CoC text
(numpy + OpenCV only)."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import cv2
import numpy as np

NEAR_M = 0.5
SAMPLE0_RGB = (40, 230, 60)
OTHER_RGB = (60, 150, 255)
TEXT_RGB = (255, 255, 255)

OPTICAL_FROM_BODY = np.array([[0.0, -1.0, 0.0],
                              [0.0, 0.0, -1.0],
                              [1.0, 0.0, 0.0]])


def rotation_from_rpy(roll: float, pitch: float, yaw: float) -> np.ndarray:
    """R = Rz(yaw) @ Ry(pitch) @ Rx(roll) (fixed-axis x-y-z, as in ROS/URDF)."""
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


@dataclass(frozen=True)
class PinholeCamera:
    """Undistorted pinhole camera. The extrinsic is the camera body frame (x forward, y left,
    z up) in the base frame: translation [3] and rotation [3, 3]."""

    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int
    translation: np.ndarray
    rotation: np.ndarray

    def __post_init__(self) -> None:
        values = [self.fx, self.fy, self.cx, self.cy]
        if not all(math.isfinite(v) for v in values) or self.fx <= 0 or self.fy <= 0:
            raise ValueError(f"intrinsics fx, fy, cx, cy = {values} invalid")
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"image size {self.width}x{self.height} invalid")
        if np.shape(self.translation) != (3,) or np.shape(self.rotation) != (3, 3):
            raise ValueError("translation must be [3] and rotation [3, 3]")

    @classmethod
    def from_parameters(cls, intrinsics, extrinsic, width: int, height: int
                        ) -> PinholeCamera:
        """intrinsics: fx, fy, cx, cy; extrinsic: x, y, z, roll, pitch, yaw."""
        fx, fy, cx, cy = (float(v) for v in intrinsics)
        x, y, z, roll, pitch, yaw = (float(v) for v in extrinsic)
        return cls(fx, fy, cx, cy, int(width), int(height), np.array([x, y, z]),
                   rotation_from_rpy(roll, pitch, yaw))

    def scaled_to(self, width: int, height: int) -> PinholeCamera:
        """The same camera for an image resized to width x height."""
        sx, sy = width / self.width, height / self.height
        return PinholeCamera(self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy, width,
                             height, self.translation, self.rotation)

    def to_optical(self, points: np.ndarray) -> np.ndarray:
        """points: [N, 3] in the base frame -> [N, 3] in the optical frame (z = depth)."""
        body = (points - self.translation) @ self.rotation
        return body @ OPTICAL_FROM_BODY.T

    def project_optical(self, optical: np.ndarray) -> np.ndarray:
        """optical: [N, 3] with z > 0 -> pixel coordinates [N, 2]."""
        z = optical[:, 2]
        return np.stack([self.fx * optical[:, 0] / z + self.cx,
                         self.fy * optical[:, 1] / z + self.cy], axis=1)


def clip_segment_near(a: np.ndarray, b: np.ndarray, near: float
                      ) -> tuple[np.ndarray, np.ndarray] | None:
    """Clip a 3D optical-frame segment to z >= near; None when it lies wholly behind."""
    if a[2] < near and b[2] < near:
        return None
    if a[2] >= near and b[2] >= near:
        return a, b
    u = (near - a[2]) / (b[2] - a[2])
    cut = a + u * (b - a)
    return (cut, b) if a[2] < near else (a, cut)


def visible_segments(camera: PinholeCamera, trajectory: np.ndarray
                     ) -> list[tuple[float, tuple[int, int], tuple[int, int]]]:
    """trajectory: [N, 3] (x, y, yaw) on the ground of the base frame, starting at the ego
    origin. Returns (depth, p0, p1) pixel segments clipped to the near plane and the image."""
    ground = np.zeros((trajectory.shape[0] + 1, 3))
    ground[1:, :2] = trajectory[:, :2]
    optical = camera.to_optical(ground)
    segments = []
    for a, b in zip(optical[:-1], optical[1:]):
        clipped = clip_segment_near(a, b, NEAR_M)
        if clipped is None:
            continue
        pixels = camera.project_optical(np.stack(clipped))
        if not np.isfinite(pixels).all() or np.abs(pixels).max() > 1e6:
            continue
        inside, p0, p1 = cv2.clipLine((0, 0, camera.width, camera.height),
                                      tuple(int(round(v)) for v in pixels[0]),
                                      tuple(int(round(v)) for v in pixels[1]))
        if inside:
            depth = 0.5 * float(clipped[0][2] + clipped[1][2])
            segments.append((depth, p0, p1))
    return segments


def draw_trajectories(rgb: np.ndarray, camera: PinholeCamera, trajectories: np.ndarray
                      ) -> np.ndarray:
    """rgb: uint8 [H, W, 3]; trajectories: [K, N, 3]. Far segments are drawn first so that
    near ones cover them; sample 0 is drawn in green, the others in blue."""
    out = np.ascontiguousarray(rgb).copy()
    if (out.shape[1], out.shape[0]) != (camera.width, camera.height):
        camera = camera.scaled_to(out.shape[1], out.shape[0])
    strokes = []
    for k, trajectory in enumerate(trajectories):
        color = SAMPLE0_RGB if k == 0 else OTHER_RGB
        for depth, p0, p1 in visible_segments(camera, np.asarray(trajectory, np.float64)):
            strokes.append((depth, k == 0, p0, p1, color))
    strokes.sort(key=lambda s: (-s[0], s[1]))
    scale = out.shape[1] / 640.0
    for depth, first, p0, p1, color in strokes:
        width = (8.0 if first else 4.0) * scale * min(1.0, 10.0 / max(depth, 1e-3))
        cv2.line(out, p0, p1, color, max(1, int(round(width))), cv2.LINE_AA)
    return out


def draw_text(rgb: np.ndarray, text: str, max_lines: int = 4) -> np.ndarray:
    """Write `text` wrapped onto a dark band at the bottom of the image."""
    out = np.ascontiguousarray(rgb).copy()
    if not text:
        return out
    height, width = out.shape[:2]
    scale = max(0.35, width / 1600.0)
    char_w = cv2.getTextSize("M", cv2.FONT_HERSHEY_SIMPLEX, scale, 1)[0][0]
    lines = textwrap.wrap(" ".join(text.split()), max(8, int(width * 0.95 / char_w)))
    if len(lines) > max_lines:
        lines = lines[: max_lines - 1] + [lines[max_lines - 1][:-3] + "..."]
    line_h = int(cv2.getTextSize("Mg", cv2.FONT_HERSHEY_SIMPLEX, scale, 1)[0][1] * 1.8)
    top = max(0, height - line_h * len(lines) - 6)
    out[top:] = (out[top:].astype(np.float32) * 0.35).astype(np.uint8)
    for i, line in enumerate(lines):
        baseline = top + line_h * (i + 1) - line_h // 4
        cv2.putText(out, line, (int(width * 0.02), baseline), cv2.FONT_HERSHEY_SIMPLEX,
                    scale, TEXT_RGB, 1, cv2.LINE_AA)
    return out


def render_overlay(rgb: np.ndarray, camera: PinholeCamera, trajectories: np.ndarray,
                   coc_text: str) -> np.ndarray:
    """The overlay image published on ~/overlay: RGB uint8 [H, W, 3]."""
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"overlay needs an RGB uint8 [H, W, 3] image, got {rgb.dtype} "
                         f"{rgb.shape}")
    trajectories = np.asarray(trajectories, np.float64)
    if trajectories.ndim != 3 or trajectories.shape[2] != 3:
        raise ValueError(f"trajectories must be [K, N, 3], got {trajectories.shape}")
    return draw_text(draw_trajectories(rgb, camera, trajectories), coc_text)
