"""Encodes synchronized camera sets on a thread of their own as they arrive, so that the
planner worker finds the frames of its next window already encoded."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np

CameraSet = tuple[list[float], list[np.ndarray]]


class FrameEncoder:
    """Runs `encode(stamps, images)` on the newest submitted camera set whenever it is idle;
    at most `pending` sets wait (the oldest is dropped). `worker_setup` runs on the thread
    first. A failed encode goes to `on_error(reason)`; the window then encodes its frames
    itself."""

    def __init__(self, encode: Callable[[list[float], list[np.ndarray]], None],
                 pending: int = 4, worker_setup: Callable[[], object] | None = None,
                 on_error: Callable[[str], None] | None = None) -> None:
        if pending < 1:
            raise ValueError(f"pending must be >= 1, got {pending}")
        self.encode = encode
        self.worker_setup = worker_setup
        self.on_error = on_error
        self.encoded = 0
        self._sets: deque[CameraSet] = deque(maxlen=pending)
        self._wake = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def submit(self, stamps: list[float], images: list[np.ndarray]) -> None:
        with self._wake:
            self._sets.append((list(stamps), list(images)))
            self._wake.notify()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("frame encoder already started")
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="frame_encoder", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        with self._wake:
            self._stop = True
            self._sets.clear()
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise RuntimeError(f"frame encoder did not stop within {timeout_s} s")
        self._thread = None

    def _run(self) -> None:
        if self.worker_setup is not None:
            self.worker_setup()
        while True:
            with self._wake:
                while not self._sets and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                stamps, images = self._sets.pop()
            try:
                self.encode(stamps, images)
                self.encoded += 1
            except Exception as exc:
                if self.on_error is not None:
                    self.on_error(f"{type(exc).__name__}: {exc}")
