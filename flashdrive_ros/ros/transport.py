"""What transport does to input stamps: the latency of each input (receipt time - header
stamp) and stamps on another clock than the node's."""

from __future__ import annotations

from collections import deque

import numpy as np

DEFAULT_LATE_TOLERANCE_S = 0.15
CLOCK_MISMATCH_S = 10.0
LATENCY_KEEP = 300


class LatencyStats:
    """Latencies (seconds) of an input's most recent LATENCY_KEEP messages."""

    def __init__(self) -> None:
        self.recent: deque[float] = deque(maxlen=LATENCY_KEEP)
        self.count = 0

    def add(self, latency_s: float) -> None:
        if np.isfinite(latency_s):
            self.recent.append(float(latency_s))
            self.count += 1

    def percentile(self, q: float) -> float | None:
        return float(np.percentile(self.recent, q)) if self.recent else None

    def summary(self) -> dict[str, float | int | None]:
        """{"p50_ms", "p90_ms", "max_ms", "messages"} of the recent messages."""
        if not self.recent:
            return {"p50_ms": None, "p90_ms": None, "max_ms": None, "messages": self.count}
        values = np.asarray(self.recent) * 1000.0
        return {"p50_ms": round(float(np.percentile(values, 50)), 2),
                "p90_ms": round(float(np.percentile(values, 90)), 2),
                "max_ms": round(float(values.max()), 2), "messages": self.count}


def clock_problem(latency_s: float) -> str:
    """Why an input stamped `latency_s` before the node clock cannot be planned on, when the
    stamp is on another clock (more than CLOCK_MISMATCH_S apart); "" otherwise."""
    if abs(latency_s) <= CLOCK_MISMATCH_S:
        return ""
    side = "older" if latency_s > 0 else "newer"
    return (f"clock: input stamps are {abs(latency_s):.1f} s {side} than the node clock, so "
            f"every plan is too old to publish; a recorded bag must be played with "
            f"`ros2 bag play --clock` to a node started with use_sim_time:=true")
