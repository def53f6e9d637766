"""Percentile summaries of per-window timings."""

from __future__ import annotations

import numpy as np

from flashdrive_ros.engine.types import STAGES


def percentiles(values: list[float]) -> dict[str, float]:
    """p50 / p90 (linear interpolation), mean, min, max of `values` in ms."""
    if not values:
        raise ValueError("no samples")
    arr = np.asarray(values, dtype=np.float64)
    return {"p50": float(np.percentile(arr, 50)), "p90": float(np.percentile(arr, 90)),
            "mean": float(arr.mean()), "min": float(arr.min()), "max": float(arr.max())}


def stage_summary(timings: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """timings: one {stage: ms} per window -> {stage: percentiles} for every stage."""
    return {stage: percentiles([t[stage] for t in timings]) for stage in STAGES}
