"""A bounded queue worked off by a thread of its own: the node's camera decoding and its
ahead-of-time frame encoding both hand work to one."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Generic, Literal, TypeVar

Item = TypeVar("Item")
Take = Literal["oldest", "newest"]


class QueueThread(Generic[Item]):
    """`put(item)` queues; the thread runs `work(item)`, taking the oldest queued item
    (arrival order) or the newest (`take`). With `depth` items waiting, a put drops the
    oldest (counted in `dropped`, then `on_drop(item, dropped)` outside the queue's lock).
    `setup` runs on the thread before its first item; an exception of `work` goes to
    `on_error(item, exc)` and the thread goes on. `stop` clears the queue and joins the
    thread; `start` may run again after it."""

    def __init__(self, name: str, work: Callable[[Item], None], depth: int,
                 take: Take = "oldest", on_drop: Callable[[Item, int], None] | None = None,
                 on_error: Callable[[Item, Exception], None] | None = None,
                 setup: Callable[[], object] | None = None) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.name = name
        self.work = work
        self.take = take
        self.on_drop = on_drop
        self.on_error = on_error
        self.setup = setup
        self.dropped = 0
        self.thread: threading.Thread | None = None
        self._queue: deque[Item] = deque()
        self._depth = depth
        self._ready = threading.Condition()
        self._stopped = False
        self._busy = False

    @property
    def busy(self) -> bool:
        """An item is being worked on."""
        return self._busy

    def start(self) -> None:
        if self.thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._stopped = False
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()

    def put(self, item: Item) -> None:
        with self._ready:
            overflow = len(self._queue) >= self._depth
            if overflow:
                oldest = self._queue.popleft()
                self.dropped += 1
                dropped = self.dropped
            self._queue.append(item)
            self._ready.notify()
        if overflow and self.on_drop is not None:
            self.on_drop(oldest, dropped)

    def drain(self, timeout_s: float) -> bool:
        """Wait until every queued item is worked off; False on timeout."""
        with self._ready:
            return self._ready.wait_for(lambda: not self._queue and not self._busy, timeout_s)

    def stop(self, timeout_s: float) -> bool:
        """True when the thread has ended (or never ran)."""
        with self._ready:
            self._stopped = True
            self._queue.clear()
            self._ready.notify_all()
        thread, self.thread = self.thread, None
        if thread is None:
            return True
        thread.join(timeout_s)
        return not thread.is_alive()

    def _run(self) -> None:
        if self.setup is not None:
            self.setup()
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._queue or self._stopped)
                if self._stopped:
                    return
                item = self._queue.popleft() if self.take == "oldest" else self._queue.pop()
                self._busy = True
            try:
                self.work(item)
            except Exception as exc:
                if self.on_error is not None:
                    self.on_error(item, exc)
            finally:
                with self._ready:
                    self._busy = False
                    self._ready.notify_all()
