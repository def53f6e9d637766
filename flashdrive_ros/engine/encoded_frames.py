"""Encoded camera frames kept by (camera, stamp): frames encoded as they arrive are not
encoded again when a window needs them."""

from __future__ import annotations

import threading

import torch

Encoded = tuple[torch.Tensor, list[torch.Tensor]]  # embeds [T, H], deepstack levels [T, H]


class EncodedFrames:
    """Thread-safe store of the frames of the last `keep_s` seconds (by stamp). A stamp more
    than `keep_s` before the newest one starts a new time base: everything kept is dropped."""

    def __init__(self, keep_s: float = 2.0) -> None:
        if not keep_s > 0:
            raise ValueError(f"keep_s must be > 0, got {keep_s}")
        self.keep_s = keep_s
        self._frames: dict[tuple[int, float], Encoded] = {}
        self._newest = float("-inf")
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._frames)

    def put(self, camera: int, stamp: float, encoded: Encoded) -> None:
        with self._lock:
            if stamp < self._newest - self.keep_s:
                self._frames.clear()
                self._newest = stamp
            self._newest = max(self._newest, stamp)
            self._frames[(camera, stamp)] = encoded
            oldest = self._newest - self.keep_s
            for key in [k for k in self._frames if k[1] < oldest]:
                del self._frames[key]

    def get(self, camera: int, stamp: float) -> Encoded | None:
        with self._lock:
            return self._frames.get((camera, stamp))

    def clear(self) -> None:
        with self._lock:
            self._frames.clear()
            self._newest = float("-inf")
