"""Learning-rate schedule driven by steps or wall time, whichever runs out first."""

from __future__ import annotations

import math
import time


class Progress:
    """progress() in [0, 1] = max(step / steps, elapsed / seconds); done() when it reaches 1."""

    def __init__(self, steps: int, seconds: float | None = None, step: int = 0,
                 elapsed: float = 0.0) -> None:
        """`step` and `elapsed` (seconds) continue a schedule begun in an earlier process."""
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        if seconds is not None and seconds <= 0:
            raise ValueError(f"seconds must be > 0, got {seconds}")
        if step < 0 or elapsed < 0:
            raise ValueError(f"step {step} and elapsed {elapsed} must be >= 0")
        self.steps = steps
        self.seconds = seconds
        self.start = time.monotonic() - elapsed
        self.step = step

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def progress(self) -> float:
        by_steps = self.step / self.steps
        if self.seconds is None:
            return min(by_steps, 1.0)
        return min(max(by_steps, self.elapsed() / self.seconds), 1.0)

    def done(self) -> bool:
        return self.progress() >= 1.0

    def lr_factor(self, warmup: float = 0.05, floor: float = 0.05) -> float:
        """Linear warm-up over the first `warmup` of progress, then cosine down to `floor`."""
        p = self.progress()
        if p < warmup:
            return max(p / warmup, 0.01)
        q = (p - warmup) / max(1.0 - warmup, 1e-9)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * min(q, 1.0)))
