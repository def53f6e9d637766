"""Rendering the 10 Hz frames of a drive, in order, optionally on several worker processes."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator

import cv2
import numpy as np

from flashdrive_ros.sim.drive import DriveLog, SceneSnapshot
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.world import World

JPEG_QUALITY = 90
_renderer: Renderer | None = None
_init_error: Exception | None = None


def encode_jpeg(rgb: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return buf.tobytes()


def _init(world: World, width: int, height: int) -> None:
    global _renderer, _init_error
    try:
        _renderer, _init_error = Renderer(world, width, height), None
    except Exception as exc:  # a failing pool initializer would be respawned forever
        _renderer, _init_error = None, exc


def _render(scene: SceneSnapshot) -> list[np.ndarray]:
    if _init_error is not None:
        raise _init_error
    return _renderer.render(scene)


def _render_raw(scene: SceneSnapshot) -> list[np.ndarray]:
    return _render(scene)


def _render_jpeg(scene: SceneSnapshot) -> list[bytes]:
    return [encode_jpeg(img) for img in _render(scene)]


def render_frames(log: DriveLog, width: int, height: int, count: int | None = None,
                  jpeg: bool = False, workers: int = 1) -> Iterator[list]:
    """Per 10 Hz frame k < count: the camera images (RGB uint8 or JPEG bytes), rig order."""
    count = log.frame_count if count is None else count
    if not 0 < count <= len(log.scenes):
        raise ValueError(f"frame count {count} outside 1..{len(log.scenes)}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    Renderer.check_size(width, height)
    fn = _render_jpeg if jpeg else _render_raw
    scenes = log.scenes[:count]
    if workers == 1:
        _init(log.world, width, height)
        yield from map(fn, scenes)
        return
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers, initializer=_init, initargs=(log.world, width, height)) as pool:
        yield from pool.imap(fn, scenes, chunksize=8)
