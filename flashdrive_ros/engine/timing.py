"""Per-stage latency: wall clock on the CPU, CUDA events on a CUDA device."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from flashdrive_ros.engine.types import STAGES


class StageTimer:
    """Times named stages of one engine step; `total` spans the first start to the last end.

    On CUDA each stage is bracketed by events on the current stream and read after one
    synchronize in `result()`, so timing adds no synchronization inside the step.
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self.device = torch.device(device)
        self.use_cuda = self.device.type == "cuda"
        self._cpu_ms: dict[str, float] = {}
        self._events: dict[str, tuple] = {}
        self._order: list[str] = []
        self._cpu_span: list[float] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if name not in STAGES or name == "total":
            raise ValueError(f"unknown stage {name!r}; stages: {STAGES[:-1]}")
        if name in self._order:
            raise ValueError(f"stage {name!r} timed twice in one step")
        self._order.append(name)
        with torch.profiler.record_function(f"stage:{name}"):
            yield from self._timed(name)

    def _timed(self, name: str) -> Iterator[None]:
        if self.use_cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            try:
                yield
            finally:
                end.record()
                self._events[name] = (start, end)
        else:
            start_s = time.perf_counter()
            try:
                yield
            finally:
                end_s = time.perf_counter()
                self._cpu_ms[name] = (end_s - start_s) * 1e3
                self._cpu_span = [self._cpu_span[0] if self._cpu_span else start_s, end_s]

    def result(self) -> dict[str, float]:
        """Milliseconds per stage (every stage of STAGES; untimed ones are 0) and total."""
        out = {name: 0.0 for name in STAGES}
        if not self._order:
            return out
        if self.use_cuda:
            torch.cuda.synchronize(self.device)
            for name, (start, end) in self._events.items():
                out[name] = float(start.elapsed_time(end))
            first = self._events[self._order[0]][0]
            last = self._events[self._order[-1]][1]
            out["total"] = float(first.elapsed_time(last))
        else:
            for name in self._order:
                out[name] = self._cpu_ms[name]
            out["total"] = (self._cpu_span[1] - self._cpu_span[0]) * 1e3
        return out
