"""Camera messages handled on a thread of their own: the executor thread only queues them, so
odometry, timers and services do not wait behind image decoding (OpenCV releases the GIL)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable


class CameraWorker:
    """`put(index, msg)` queues a camera message; the worker calls `handle(index, msg)` in
    arrival order. With more than `depth` messages waiting the oldest is dropped (counted in
    `dropped`, reported through `on_drop`); an exception of `handle` goes to `on_error` and
    the worker goes on."""

    def __init__(self, handle: Callable[[int, object], None], depth: int,
                 on_drop: Callable[[int], None], on_error: Callable[[int, Exception], None]
                 ) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.handle = handle
        self.on_drop = on_drop
        self.on_error = on_error
        self.dropped = 0
        self._queue: deque[tuple[int, object]] = deque()
        self._depth = depth
        self._ready = threading.Condition()
        self._stopped = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="camera_worker", daemon=True)
        self._thread.start()

    def put(self, index: int, msg) -> None:
        with self._ready:
            if len(self._queue) >= self._depth:
                self._queue.popleft()
                self.dropped += 1
                self.on_drop(self.dropped)
            self._queue.append((index, msg))
            self._ready.notify()

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued message is handled; False on timeout."""
        with self._ready:
            return self._ready.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def stop(self) -> None:
        with self._ready:
            self._stopped = True
            self._queue.clear()
            self._ready.notify_all()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._queue or self._stopped)
                if self._stopped:
                    return
                index, msg = self._queue.popleft()
                self._busy = True
            try:
                self.handle(index, msg)
            except Exception as exc:
                self.on_error(index, exc)
            finally:
                with self._ready:
                    self._busy = False
                    self._ready.notify_all()
