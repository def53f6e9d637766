"""Ratios inside one run: speedups against the reference and the baseline, time over floor."""

from __future__ import annotations

from flashdrive_ros.engine.types import STAGES


def speedups(variants: dict, against: str) -> dict:
    """{variant: {samples: {stage: against p50 / variant p50}}} for variants that ran."""
    if "samples" not in variants.get(against, {}):
        return {}
    base = variants[against]["samples"]
    out: dict = {}
    for name, result in variants.items():
        if "samples" not in result:
            continue
        out[name] = {}
        for count, run in result["samples"].items():
            ref = base[count]["stages"]
            out[name][count] = {stage: ratio(ref[stage]["p50"], run["stages"][stage]["p50"])
                                for stage in STAGES}
    return out


def ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def over_floor(stages: dict, floors: dict) -> dict:
    """{stage: measured p50 / floor_ms} (None where the floor is 0)."""
    return {stage: ratio(stages[stage]["p50"], floors[stage]["floor_ms"]) for stage in STAGES}
