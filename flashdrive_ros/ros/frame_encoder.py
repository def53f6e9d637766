"""Encodes synchronized camera sets on a thread of their own as they arrive, so that the
planner worker finds the frames of its next window already encoded."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from flashdrive_ros.ros.queue_thread import QueueThread

CameraSet = tuple[list[float], list[np.ndarray]]


class FrameEncoder:
    """Runs `encode(stamps, images)` on the newest submitted camera set whenever it is idle;
    at most `pending` sets wait (the oldest is dropped). `worker_setup` runs on the thread
    first. A failed encode goes to `on_error(reason)`; the window then encodes its frames
    itself."""

    def __init__(self, encode: Callable[[list[float], list[np.ndarray]], None],
                 pending: int = 4, worker_setup: Callable[[], object] | None = None,
                 on_error: Callable[[str], None] | None = None) -> None:
        self.encode = encode
        self.on_error = on_error
        self.encoded = 0
        self._queue: QueueThread[CameraSet] = QueueThread(
            "frame_encoder", self._encode, pending, take="newest",
            on_error=self._failed, setup=worker_setup)

    @property
    def _thread(self) -> threading.Thread | None:
        return self._queue.thread

    def submit(self, stamps: list[float], images: list[np.ndarray]) -> None:
        self._queue.put((list(stamps), list(images)))

    def start(self) -> None:
        self._queue.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        if not self._queue.stop(timeout_s):
            raise RuntimeError(f"frame encoder did not stop within {timeout_s} s")

    def _encode(self, camera_set: CameraSet) -> None:
        self.encode(*camera_set)
        self.encoded += 1

    def _failed(self, camera_set: CameraSet, exc: Exception) -> None:
        if self.on_error is not None:
            self.on_error(f"{type(exc).__name__}: {exc}")
