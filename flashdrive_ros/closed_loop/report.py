"""report.json and report.md of a closed-loop run."""

from __future__ import annotations

import json
from pathlib import Path

TABLE = (("clean_drive_rate", "drives without collision or red-light violation", None),
         ("route_completion", "route completion", 3),
         ("collisions", "collisions per drive", 2),
         ("red_light_violations", "red-light violations per drive", 2),
         ("off_road_s", "off road (s)", 2),
         ("lane_departure_s", "lane departure (s)", 2),
         ("lane_offset_mean_m", "offset from the lane centre, mean (m, left +)", 2),
         ("lane_offset_abs_p95_m", "offset from the lane centre, p95 of its size (m)", 2),
         ("stop_line_overshoot_m", "stop-line overshoot (m)", 2),
         ("mean_speed_mps", "mean speed (m/s)", 2),
         ("jerk_rms", "jerk RMS (m/s^3)", 2),
         ("lateral_accel_max", "max lateral accel. (m/s^2)", 2),
         ("plan_age_p50_s", "plan age at the controller p50 (s)", 3),
         ("fallback_s", "braking without a usable plan (s)", 2),
         ("latency_p50_ms", "plan latency p50 (ms)", 1))


def _cell(value, digits: int | None) -> str:
    if isinstance(value, dict):
        if value["mean"] is None:
            return "-"
        return f"{value['mean']:.{digits}f} ± {value['std']:.{digits}f}"
    return "-" if value is None else f"{value:.2f}"


def _text(value) -> str:
    return "-" if value is None or value == "" else str(value)


def _world(report: dict) -> str:
    world_s = report.get("world_seconds", report["seconds"])
    if world_s == report["seconds"]:
        return ""
    return f" (the start of each seed's {world_s:g} s drive)"


def markdown(report: dict) -> str:
    variants = report["variants"]
    lines = [f"# Closed-loop drives ({'through ROS' if report['through_ros'] else 'in process'})",
             "",
             f"{len(report['seeds'])} seeds x {report['seconds']:g} s{_world(report)}, latency "
             f"{report['latency']}, model {report['model_dir']}; mean ± std over seeds.", "",
             "| metric | " + " | ".join(variants) + " |",
             "|---" * (len(variants) + 1) + "|"]
    for key, label, digits in TABLE:
        lines.append(f"| {label} | " + " | ".join(_cell(v[key], digits)
                                                  for v in variants.values()) + " |")
    lines += ["", "## Standing at a stop line (plans within 15 m of it, CoC decision)", "",
              "| variant | at red or yellow: plans naming go | at green: plans naming stop | "
              "base_link to the line at red, median of the drives' medians (m) |",
              "|---|---|---|---|"]
    for name, block in variants.items():
        waits = block["light_waits"]
        gap = "-" if waits["red_gap_m"] is None else f"{waits['red_gap_m']:.2f}"
        lines.append(f"| {name} | {waits['red_go']} / {waits['red_plans']} | "
                     f"{waits['green_stay']} / {waits['green_plans']} | {gap} |")
    lines += ["", "## Tight bends (plans at 4 m/s or more by the front bumper's distance to the "
              "bend; offsets from the lane centre towards its inside, m)", "",
              "| variant | band | plans | plan 3 s on, median | plan 3 s on, p90 | ego at t0, "
              "median |", "|---|---|---|---|---|---|"]
    for name, block in variants.items():
        for band, cell in block["bend_approach"].items():
            lines.append(f"| {name} | {band} | {cell['plans']} | "
                         f"{_cell(cell['plan_inside_3s_p50'], 2)} | "
                         f"{_cell(cell['plan_inside_3s_p90'], 2)} | "
                         f"{_cell(cell['ego_inside_p50'], 2)} |")
    lines += ["", "## Per scenario (spans reached / completed / clean, collisions, red-light "
              "violations, off road s)", "",
              "| variant | scenario | reached | completed | clean | collisions | red light | "
              "off road (s) |", "|---|---|---|---|---|---|---|---|"]
    for name, block in variants.items():
        for kind, sc in sorted(block["scenarios"].items()):
            lines.append(f"| {name} | {kind} | {sc['reached']}/{sc['spans']} | "
                         f"{sc['completed']} | {sc['clean']} | {sc['collisions']} | "
                         f"{sc['red_light_violations']} | {sc['off_road_s']:.1f} |")
    lines += ["", "## Collisions (the plan followed 2 s before the contact)", "",
              "The last two columns: the plan in force at the contact, the gap between the "
              "ego's box where it meant the car to be and what the car hit (negative: the "
              "plan runs into it), and the car's distance from that pose.", "",
              "| variant | seed | t (s) | kind | speed (m/s) | other's speed | ego speed 2 s "
              "before | gap to the lead | lead speed | plan speed at 3 s | CoC | plan's "
              "clearance at contact (m) | car off its plan (m) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in report["drives"]:
        for e in d["collision_events"]:
            b = e.get("before") or {}
            c = e.get("at_contact") or {}
            cells = [_text(b.get(key)) for key in ("ego_speed_mps", "lead_gap_m",
                                                   "lead_speed_mps", "plan_speed_3s", "coc")]
            cells += [_text(c.get(key)) for key in ("plan_clearance_m", "tracking_error_m")]
            lines.append(f"| {d['variant']} | {d['seed']} | {e['t']:.2f} | {e['kind']} | "
                         f"{e['speed']:.2f} | {e['other_speed']:.2f} | " + " | ".join(cells)
                         + " |")
    lines += ["", "## Drives", "",
              "| variant | seed | collisions | red light | off road (s) | completion | "
              "plan age p50 (s) | picture |", "|---|---|---|---|---|---|---|---|"]
    for d in report["drives"]:
        age = d["plan_age_s"]["p50"]
        lines.append(f"| {d['variant']} | {d['seed']} | {d['collisions']} | "
                     f"{d['red_light_violations']} | {d['off_road_s']:.1f} | "
                     f"{d['route_completion']:.3f} | "
                     f"{'-' if age is None else f'{age:.3f}'} | {d.get('picture') or '-'} |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path, report: dict) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / "report.md").write_text(markdown(report))
