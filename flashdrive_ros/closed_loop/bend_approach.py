"""How the planner drives up to and through tight bends, from a drive's plan trace: the plans
made at MIN_SPEED_MPS or more with a tight bend ahead of the front bumper (sim/bends.py), by
the distance to where it starts (BANDS; "in the bend" once the front bumper is in it), with
each plan's offset from the lane centre 3 s on towards the bend's inside, beside the ego's own
at t0. The expert keeps within about 0.3 m of the centre there; a plan that turns in early
cuts the bend, and the car with it."""

from __future__ import annotations

import numpy as np

BANDS = ("in the bend", "0-10 m", "10-20 m", "20-30 m", "30-45 m")
EDGES_M = (10.0, 20.0, 30.0)  # m, front bumper to the bend's start: the bands after the first
MIN_SPEED_MPS = 4.0


def band(gap_m: float) -> str:
    """The band of a bend starting gap_m ahead of the front bumper (0: in it)."""
    if gap_m <= 0.0:
        return BANDS[0]
    return BANDS[1 + int(np.searchsorted(EDGES_M, gap_m, side="right"))]


def bend_approach(trace: list[dict]) -> dict[str, list[list[float]]]:
    """trace: plan_trace rows -> per band of BANDS, [plan, ego] offsets towards the inside
    (m) of each plan made there: the plan's 3 s on, the ego's at t0."""
    out: dict[str, list[list[float]]] = {name: [] for name in BANDS}
    for row in trace:
        if row["bend_ahead_m"] == "" or float(row["ego_speed_mps"]) < MIN_SPEED_MPS:
            continue
        side = float(row["bend_side"])
        out[band(float(row["bend_ahead_m"]))].append(
            [round(side * float(row["plan_offset_3s"]), 3),
             round(side * float(row["lane_offset_m"]), 3)])
    return out


def pooled_bend_approach(drives: list[dict]) -> dict[str, dict]:
    """Per band over the drives' `bend_approach`: plans, the median and 90th percentile of
    the plans' offset towards the inside 3 s on and the median of the ego's at t0 (None
    without plans)."""
    out = {}
    for name in BANDS:
        rows = np.array([r for d in drives for r in d["bend_approach"][name]],
                        dtype=float).reshape(-1, 2)  # rows: [N, 2] (plan, ego)
        found = len(rows) > 0
        out[name] = {
            "plans": len(rows),
            "plan_inside_3s_p50": round(float(np.median(rows[:, 0])), 2) if found else None,
            "plan_inside_3s_p90": (round(float(np.percentile(rows[:, 0], 90)), 2)
                                   if found else None),
            "ego_inside_p50": round(float(np.median(rows[:, 1])), 2) if found else None}
    return out
