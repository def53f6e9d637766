"""Approximate-time synchronizer with the semantics of message_filters' Python
ApproximateTimeSynchronizer (allow_headerless=False), without rclpy.

Each input keeps a queue {stamp_ns: message} of at most `queue_size` entries (the oldest
stamp is evicted first; a repeated stamp replaces the earlier message). When a message
arrives on input i, every other input contributes the stamps within `slop` of the new stamp,
sorted by distance to it; the candidate sets are walked in itertools.product order together
with the new stamp, and the first set whose spread (max - min) is strictly below `slop` and
whose messages are all still queued is emitted and removed from the queues.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any

Callback = Callable[..., None]


def stamp_ns_of(msg: Any) -> int | None:
    """msg.header.stamp in integer nanoseconds, or None when the message has no header stamp."""
    header = getattr(msg, "header", None)
    stamp = getattr(header, "stamp", None)
    if stamp is None:
        return None
    nanoseconds = getattr(stamp, "nanoseconds", None)
    if nanoseconds is not None:
        return int(nanoseconds)
    sec = getattr(stamp, "sec", None)
    nanosec = getattr(stamp, "nanosec", None)
    if sec is None or nanosec is None:
        return None
    return int(sec) * 1_000_000_000 + int(nanosec)


class ApproximateTimeSynchronizer:
    """Groups one message per input whose header stamps lie within `slop_s` of each other."""

    def __init__(self, num_inputs: int, queue_size: int, slop_s: float) -> None:
        if num_inputs < 1:
            raise ValueError(f"num_inputs must be >= 1, got {num_inputs}")
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        if not 0.0 < slop_s < float("inf"):
            raise ValueError(f"slop_s must be finite and > 0 (a set needs spread < slop), "
                             f"got {slop_s}")
        self.queue_size = int(queue_size)
        self.slop_ns = int(round(slop_s * 1e9))
        self.queues: list[dict[int, Any]] = [{} for _ in range(num_inputs)]
        self.headerless_dropped = 0
        self._callbacks: list[Callback] = []
        self._lock = threading.Lock()

    @property
    def num_inputs(self) -> int:
        return len(self.queues)

    def register_callback(self, callback: Callback) -> None:
        """callback(*messages) is called with one message per input, in input order."""
        self._callbacks.append(callback)

    def clear(self) -> None:
        with self._lock:
            for queue in self.queues:
                queue.clear()

    def add(self, index: int, msg: Any, stamp_ns: int | None = None) -> tuple | None:
        """Queue `msg` on input `index`; return (and signal) the emitted set, if any.

        stamp_ns defaults to msg.header.stamp; a message without one is dropped and counted
        in `headerless_dropped`.
        """
        if not 0 <= index < len(self.queues):
            raise IndexError(f"input index {index} outside [0, {len(self.queues)})")
        if stamp_ns is None:
            stamp_ns = stamp_ns_of(msg)
            if stamp_ns is None:
                self.headerless_dropped += 1
                return None
        with self._lock:
            matched = self._add_locked(index, msg, int(stamp_ns))
        if matched is not None:
            for callback in self._callbacks:
                callback(*matched)
        return matched

    def _add_locked(self, index: int, msg: Any, stamp: int) -> tuple | None:
        own = self.queues[index]
        own[stamp] = msg
        while len(own) > self.queue_size:
            del own[min(own)]
        candidates: list[Sequence[int]] = []
        for other_index, queue in enumerate(self.queues):
            if other_index == index:
                continue
            near = [(abs(s - stamp), s) for s in queue if abs(s - stamp) <= self.slop_ns]
            if not near:
                return None
            candidates.append([s for _, s in sorted(near, key=lambda pair: pair[0])])
        for combo in itertools.product(*candidates):
            stamps = list(combo)
            stamps.insert(index, stamp)
            if max(stamps) - min(stamps) >= self.slop_ns:
                continue
            if any(s not in queue for queue, s in zip(self.queues, stamps)):
                continue
            matched = tuple(queue.pop(s) for queue, s in zip(self.queues, stamps))
            return matched
        return None
