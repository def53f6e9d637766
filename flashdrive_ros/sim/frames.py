"""Rendering the frames of a drive (its 10 Hz scenes or any snapshots), in order, optionally
on several worker processes."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterator

import cv2
import numpy as np

from flashdrive_ros.sim.drive import DriveLog, SceneSnapshot
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.world import World

JPEG_QUALITY = 90
Encoder = Callable[[list[np.ndarray]], list]
_renderer: Renderer | None = None
_encode: Encoder | None = None
_init_error: Exception | None = None


def encode_jpeg(rgb: np.ndarray, quality: int = JPEG_QUALITY) -> bytes:
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return buf.tobytes()


def encode_jpegs(images: list[np.ndarray]) -> list[bytes]:
    return [encode_jpeg(img) for img in images]


def _init(world: World, width: int, height: int, encode: Encoder | None) -> None:
    global _renderer, _encode, _init_error
    try:
        _renderer, _encode, _init_error = Renderer(world, width, height), encode, None
    except Exception as exc:  # a failing pool initializer would be respawned forever
        _renderer, _init_error = None, exc


def _render(scene: SceneSnapshot) -> list:
    if _init_error is not None:
        raise _init_error
    images = _renderer.render(scene)
    return images if _encode is None else _encode(images)


def render_scenes(world: World, scenes: list[SceneSnapshot], width: int, height: int,
                  encode: Encoder | None = None, workers: int = 1) -> Iterator[list]:
    """Per scene, in order: the camera images (RGB uint8, rig order), passed through
    `encode` (a picklable callable on the list of images) when given."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    Renderer.check_size(width, height)
    if workers == 1:
        _init(world, width, height, encode)
        yield from map(_render, scenes)
        return
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    with ctx.Pool(workers, initializer=_init, initargs=(world, width, height, encode)) as pool:
        yield from pool.imap(_render, scenes, chunksize=8)


def render_frames(log: DriveLog, width: int, height: int, count: int | None = None,
                  jpeg: bool = False, workers: int = 1) -> Iterator[list]:
    """Per 10 Hz frame k < count: the camera images (RGB uint8 or JPEG bytes), rig order."""
    count = log.frame_count if count is None else count
    if not 0 < count <= len(log.scenes):
        raise ValueError(f"frame count {count} outside 1..{len(log.scenes)}")
    yield from render_scenes(log.world, log.scenes[:count], width, height,
                             encode_jpegs if jpeg else None, workers)
