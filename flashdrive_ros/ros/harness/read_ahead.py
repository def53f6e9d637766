"""Reads an iterator on a thread of its own, a bounded number of bytes ahead of its consumer,
so that a bag player's disk reads overlap its publishing instead of stalling it."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

Item = TypeVar("Item")


class ReadAhead(Generic[Item]):
    """Iterating yields the items of `source` in order. The reader thread stays at most
    `max_bytes` (items measured by `size`) ahead, and always at least one item. An exception
    of `source` is raised to the consumer after the items read before it. `close` stops the
    reader (it finishes the item it is reading) and waits for it; use as a context manager."""

    def __init__(self, source: Iterator[Item], size: Callable[[Item], int],
                 max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.max_bytes = max_bytes
        self.peak_bytes = 0
        self._source = source
        self._size = size
        self._buffer: deque[tuple[Item, int]] = deque()
        self._bytes = 0
        self._done = False
        self._closed = False
        self._error: BaseException | None = None
        self._ready = threading.Condition()
        self._thread = threading.Thread(target=self._read, name="read_ahead", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for item in self._source:
                nbytes = self._size(item)
                with self._ready:
                    while (self._buffer and self._bytes + nbytes > self.max_bytes
                           and not self._closed):
                        self._ready.wait()
                    if self._closed:
                        return
                    self._buffer.append((item, nbytes))
                    self._bytes += nbytes
                    self.peak_bytes = max(self.peak_bytes, self._bytes)
                    self._ready.notify_all()
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            with self._ready:
                self._error = exc
        finally:
            with self._ready:
                self._done = True
                self._ready.notify_all()

    def __iter__(self) -> Iterator[Item]:
        while True:
            with self._ready:
                while not self._buffer and not self._done:
                    self._ready.wait()
                if not self._buffer:
                    if self._error is not None:
                        raise self._error
                    return
                item, nbytes = self._buffer.popleft()
                self._bytes -= nbytes
                self._ready.notify_all()
            yield item

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._buffer.clear()
            self._bytes = 0
            self._ready.notify_all()
        self._thread.join()

    def __enter__(self) -> ReadAhead[Item]:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
