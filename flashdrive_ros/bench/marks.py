"""Named points in time on the current CUDA stream (CUDA events) or the CPU clock."""

from __future__ import annotations

import time

import torch


class Marks:
    """`mark(name)` records a point without synchronizing; `ms(a, b)` reads the span a -> b
    after one synchronize (CUDA) or from perf_counter (CPU)."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.use_cuda = self.device.type == "cuda"
        self.points: dict[str, object] = {}

    def mark(self, name: str) -> None:
        if self.use_cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.points[name] = event
        else:
            self.points[name] = time.perf_counter()

    def has(self, name: str) -> bool:
        return name in self.points

    def ms(self, start: str, end: str) -> float:
        a, b = self.points[start], self.points[end]
        if self.use_cuda:
            torch.cuda.synchronize(self.device)
            return float(a.elapsed_time(b))
        return (b - a) * 1e3


def synchronize(device: torch.device | str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
