"""Closed-loop drives summed per variant (mean and spread over seeds) and per scenario kind."""

from __future__ import annotations

import numpy as np

from flashdrive_ros.closed_loop.bend_approach import pooled_bend_approach
from flashdrive_ros.closed_loop.light_waits import summed_light_waits

SPREAD_KEYS = ("route_completion", "collisions", "red_light_violations", "off_road_s",
               "lane_departure_s", "stop_line_overshoot_m", "mean_speed_mps", "fallback_s")


def _mean_std(values: list[float]) -> dict[str, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "std": None}
    return {"mean": round(float(np.mean(values)), 4), "std": round(float(np.std(values)), 4)}


def clean(drive: dict) -> bool:
    """No collision and no red-light violation."""
    return drive["collisions"] == 0 and drive["red_light_violations"] == 0


def variant_summary(drives: list[dict]) -> dict:
    out = {"drives": len(drives),
           "clean_drive_rate": round(float(np.mean([clean(d) for d in drives])), 4),
           "collision_free_rate": round(float(np.mean([d["collisions"] == 0
                                                       for d in drives])), 4),
           "red_light_free_rate": round(float(np.mean([d["red_light_violations"] == 0
                                                       for d in drives])), 4)}
    for key in SPREAD_KEYS:
        out[key] = _mean_std([d[key] for d in drives])
    out["plan_age_p50_s"] = _mean_std([d["plan_age_s"]["p50"] for d in drives])
    out["latency_p50_ms"] = _mean_std([d["latency_ms"]["p50"] for d in drives])
    for key in ("jerk_rms", "lateral_accel_max", "max_decel"):
        out[key] = _mean_std([d["comfort"][key] for d in drives])
    for key in ("mean", "abs_p95"):
        out[f"lane_offset_{key}_m"] = _mean_std([d["lane_offset_m"][key] for d in drives])
    out["light_waits"] = summed_light_waits(drives)
    out["bend_approach"] = pooled_bend_approach(drives)
    out["scenarios"] = scenario_summary(drives)
    return out


def scenario_summary(drives: list[dict]) -> dict[str, dict]:
    """{scenario kind: spans reached / completed / clean, collisions, red-light violations,
    off-road seconds} over every drive's spans."""
    out: dict[str, dict] = {}
    for drive in drives:
        for span in drive["scenarios"]:
            block = out.setdefault(span["kind"], {
                "spans": 0, "reached": 0, "completed": 0, "clean": 0, "collisions": 0,
                "red_light_violations": 0, "off_road_s": 0.0, "lane_departure_s": 0.0})
            block["spans"] += 1
            block["reached"] += span["reached"]
            block["completed"] += span["completed"]
            block["clean"] += span["reached"] and not (span["collisions"]
                                                        or span["red_light_violations"])
            for key in ("collisions", "red_light_violations"):
                block[key] += span[key]
            for key in ("off_road_s", "lane_departure_s"):
                block[key] = round(block[key] + span[key], 3)
    return out
