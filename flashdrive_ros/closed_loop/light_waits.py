"""How the planner reads the light while the ego stands at a stop line, from a drive's plan
trace: the plans made standing within WAIT_RANGE_M before a stop line, by the light's state
at t0, and the decision their CoC names (its first word, sim/labels.DECISION_WORDS). Going at
a red or yellow line is reading a green that is not there; staying at a green one is missing
the green. Plans without a CoC (through ROS) are not counted."""

from __future__ import annotations

import numpy as np

from flashdrive_ros.sim.labels import DECISION_WORDS, STANDING_MPS

WAIT_RANGE_M = 15.0
STOP_WORD = DECISION_WORDS["stop"]
COUNTS = ("red_plans", "red_go", "green_plans", "green_stay")


def _standing_at_line(row: dict) -> bool:
    gap = row["stop_line_ahead_m"]
    return (row["coc"] != "" and gap != "" and 0.0 <= float(gap) <= WAIT_RANGE_M
            and float(row["ego_speed_mps"]) < STANDING_MPS)


def light_waits(trace: list[dict]) -> dict:
    """trace: plan_trace rows -> {"red_plans", "red_go", "green_plans", "green_stay": counts;
    "red_gap_m": base_link to the line over the plans standing at red or yellow, median
    (None without one)}."""
    waits = [row for row in trace if _standing_at_line(row)]
    red = [row for row in waits if row["light"] in ("red", "yellow")]
    green = [row for row in waits if row["light"] == "green"]

    def stays(row: dict) -> bool:
        return row["coc"].split(maxsplit=1)[0] == STOP_WORD

    gaps = [float(row["stop_line_ahead_m"]) for row in red]
    return {"red_plans": len(red), "red_go": sum(not stays(row) for row in red),
            "green_plans": len(green), "green_stay": sum(stays(row) for row in green),
            "red_gap_m": round(float(np.median(gaps)), 2) if gaps else None}


def summed_light_waits(drives: list[dict]) -> dict:
    """The counts summed over drives, with the shares red_go / red_plans and
    green_stay / green_plans (None without plans) and red_gap_m, the median of the drives'
    red_gap_m (None without one)."""
    out = {key: sum(d["light_waits"][key] for d in drives) for key in COUNTS}
    gaps = [d["light_waits"]["red_gap_m"] for d in drives
            if d["light_waits"]["red_gap_m"] is not None]
    out["red_gap_m"] = round(float(np.median(gaps)), 2) if gaps else None
    out["red_go_share"] = (round(out["red_go"] / out["red_plans"], 4)
                           if out["red_plans"] else None)
    out["green_stay_share"] = (round(out["green_stay"] / out["green_plans"], 4)
                               if out["green_plans"] else None)
    return out
