"""What the planner saw and planned shortly before each collision of a drive: the plan the
controller followed LOOKBACK_S before the contact (from the drive's plan trace) with the
ego's speed, the gap to the vehicle ahead and its speed, the plan's speed 3 s ahead and its
CoC. A lead collision whose plan named the car but kept its speed reads differently from one
where the lead cut in too close to stop."""

from __future__ import annotations

LOOKBACK_S = 2.0
FIELDS = ("t0", "ego_speed_mps", "lead_gap_m", "lead_speed_mps", "plan_speed_3s", "coc")


def collision_context(events: list[dict], trace: list[dict],
                      lookback_s: float = LOOKBACK_S) -> list[dict]:
    """events: DriveMonitor collision events; trace: plan_trace rows (t0 ascending) -> the
    events, each with "before": FIELDS of the last plan made at or before t - lookback_s
    (None when the drive had no plan by then)."""
    out = []
    for event in events:
        earlier = [row for row in trace if row["t0"] <= event["t"] - lookback_s + 1e-9]
        before = {key: earlier[-1][key] for key in FIELDS} if earlier else None
        out.append({**event, "before": before})
    return out
