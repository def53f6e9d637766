"""Camera messages handled on a thread of their own: the executor thread only queues them, so
odometry, timers and services do not wait behind image decoding (OpenCV releases the GIL)."""

from __future__ import annotations

from collections.abc import Callable

from flashdrive_ros.ros.queue_thread import QueueThread

STOP_TIMEOUT_S = 5.0
BEHIND_EXTRA = "camera_messages_behind"  # /diagnostics planner value: messages dropped


class CameraWorker:
    """`put(index, msg)` queues a camera message; the worker calls `handle(index, msg)` in
    arrival order. With more than `depth` messages waiting the oldest is dropped (counted in
    `dropped`, reported through `on_drop(index, msg, dropped)`); an exception of `handle`
    goes to `on_error` and the worker goes on."""

    def __init__(self, handle: Callable[[int, object], None], depth: int,
                 on_drop: Callable[[int, object, int], None],
                 on_error: Callable[[int, Exception], None]) -> None:
        self._queue: QueueThread[tuple[int, object]] = QueueThread(
            "camera_worker", lambda item: handle(*item), depth, take="oldest",
            on_drop=lambda item, dropped: on_drop(*item, dropped),
            on_error=lambda item, exc: on_error(item[0], exc))
        self._queue.start()

    @property
    def dropped(self) -> int:
        return self._queue.dropped

    @property
    def busy(self) -> bool:
        """A message is being handled."""
        return self._queue.busy

    def put(self, index: int, msg) -> None:
        self._queue.put((index, msg))

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued message is handled; False on timeout."""
        return self._queue.drain(timeout_s)

    def stop(self) -> None:
        self._queue.stop(STOP_TIMEOUT_S)
