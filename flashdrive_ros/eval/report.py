"""report.json, report.md and the stdout summary table of a replay."""

from __future__ import annotations

import json
import math
from pathlib import Path

from flashdrive_ros.engine.types import STAGES

TABLE_METRICS = (
    ("minade6_6s", "minADE6 @6.4 s (m)"),
    ("minade1_6s", "minADE1 @6.4 s (m)"),
    ("minade6_3s", "minADE6 @3 s (m)"),
    ("minade1_3s", "minADE1 @3 s (m)"),
    ("fde1_6s", "FDE1 @6.4 s (m)"),
    ("cv_minade_6s", "const. velocity ADE @6.4 s (m)"),
    ("cv_minade_3s", "const. velocity ADE @3 s (m)"),
    ("accepted_length_mean", "accepted length (mean)"),
    ("tokens_per_window", "CoC tokens per window"),
    ("decision_match_rate", "decision match rate"),
    ("side_match_rate", "side match rate (bends, nudges)"),
)


def table_metrics(report: dict) -> tuple[tuple[str, str], ...]:
    """TABLE_METRICS less the best-of-6 rows when fewer than 6 samples were drawn (they
    would repeat the best-of-K rows under a name that promises 6)."""
    if report.get("num_samples", 6) >= 6:
        return TABLE_METRICS
    return tuple((key, label) for key, label in TABLE_METRICS if not key.startswith("minade6"))


def mode_blocks(report: dict) -> dict[str, dict]:
    """{mode: block}: the blocks under `modes`, or the report itself for one mode."""
    if "modes" in report:
        return report["modes"]
    return {report["mode"]: report}


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.{digits}f}"
    return str(value)


def _rows(report: dict) -> tuple[list[str], list[list[str]]]:
    blocks = mode_blocks(report)
    header = ["", *blocks]
    rows = [["windows", *(_fmt(b["windows"]) for b in blocks.values())]]
    rows += [[label, *(_fmt(b.get(key)) for b in blocks.values())]
             for key, label in table_metrics(report)]
    for stage in STAGES:
        for q in ("p50", "p90"):
            rows.append([f"latency {stage} {q} (ms)",
                         *(_fmt(b["latency_ms"][stage][q], 1) for b in blocks.values())])
    rows.append([f"total latency within {1000 / report['control_rate_hz']:.0f} ms",
                 *(_fmt(b.get("within_control_period")) for b in blocks.values())])
    rows.append(["deadline misses", *(_fmt(b.get("deadline_misses")) for b in blocks.values())])
    held = ("control rate held (ticks with a new plan)" if report.get("through_ros")
            else "control rate held (windows within the period)")
    rows.append([held, *(_fmt(b.get("control_rate_held")) for b in blocks.values())])
    if any("valid_trajectory_rate" in b for b in blocks.values()):
        rows.append(["ticks publishing a valid trajectory",
                     *(_fmt(b.get("valid_trajectory_rate")) for b in blocks.values())])
    if any("finished_plans" in b for b in blocks.values()):
        rows.append(["plans published as valid / finished",
                     *(f"{b['plans_published_valid']} / {b['finished_plans']}"
                       for b in blocks.values())])
        rows.append(["node ticks without a new plan",
                     *(f"{_fmt(b.get('node_skipped_ticks'), 0)} / "
                       f"{_fmt(b.get('node_ticks'), 0)}" for b in blocks.values())])
    if any("plan_age_s" in b for b in blocks.values()):
        rows.append(["plan age p50 (s)", *(_fmt(b.get("plan_age_s", {}).get("p50"))
                                           for b in blocks.values())])
    rows.append(["skipped windows", *(_fmt(b["skipped_windows"]["total"])
                                      for b in blocks.values())])
    return header, rows


SCENARIO_HEADER = ["windows", "minADE1 (m)", "CV ADE (m)", "minADE1 / CV", "decision match",
                   "side match"]


def scenario_rows(block: dict) -> list[list[str]]:
    """Per scenario tag of the sim labels (a window counts under each of its tags): windows,
    minADE1 and constant-velocity ADE at 6.4 s on the same windows, their ratio, decision
    match, side match."""
    return [[tag, str(g["windows"]), _fmt(g["minade1_6s"]), _fmt(g["cv_minade_6s"]),
             _fmt(g["minade1_cv_ratio"]), _fmt(g["decision_match_rate"]),
             _fmt(g["side_match_rate"])]
            for tag, g in block.get("scenarios", {}).items()]


def _fixed_width(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths))) for r in [header, *rows]]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def summary_table(report: dict) -> str:
    """Fixed-width tables: minADE vs constant velocity, latency per stage, accepted length,
    control rate held, the speedup in compare mode; then per scenario tag of each mode."""
    lines = _fixed_width(*_rows(report))
    if "speedup_total_p50" in report:
        lines.append(f"speedup total p50 (baseline / flashdrive): "
                     f"{_fmt(report['speedup_total_p50'], 2)}x")
    for mode, block in mode_blocks(report).items():
        rows = scenario_rows(block)
        if rows:
            lines += ["", *_fixed_width([f"scenario tag ({mode})", *SCENARIO_HEADER], rows)]
    return "\n".join(lines)


def print_summary(report: dict) -> None:
    source = "through ROS" if report.get("through_ros") else "offline"
    print(f"flashdrive-replay {source}: {report['bag']}")
    print(summary_table(report))


def _markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def markdown(report: dict, plots: list[str]) -> str:
    header, rows = _rows(report)
    source = "through ROS" if report.get("through_ros") else "offline"
    parts = [f"# Replay report: {report['bag']}", "",
             f"- model: `{report['model_dir']}`",
             f"- mode: {report['mode']}, {source}",
             f"- control rate: {report['control_rate_hz']} Hz, ticks: {report['ticks']}", "",
             "## Summary", "", _markdown_table(header, rows), ""]
    if "speedup_total_p50" in report:
        parts += [f"Speedup of the total latency at p50 (baseline / flashdrive): "
                  f"**{_fmt(report['speedup_total_p50'], 2)}x**", ""]
    for mode, block in mode_blocks(report).items():
        if rows := scenario_rows(block):
            parts += [f"## Per scenario tag ({mode})", "",
                      _markdown_table(["scenario tag", *SCENARIO_HEADER], rows), ""]
    for mode, block in mode_blocks(report).items():
        reasons = block["skipped_windows"]["reasons"]
        examples = block["skipped_windows"]["examples"]
        if reasons:
            parts += [f"## Skipped windows ({mode})", "", _markdown_table(
                ["reason", "count", "first message"],
                [[k, str(v), examples.get(k, "")] for k, v in reasons.items()]), ""]
        windows = block.get("per_window", [])
        if windows:
            step = max(len(windows) // 8, 1)
            parts += [f"## Chain of causation, one window in {step} ({mode})", "",
                      _markdown_table(["t0 (s)",
                                       f"minADE{min(6, report.get('num_samples', 6))} (m)",
                                       "total (ms)", "CoC",
                                       "label"],
                                      [[_fmt(w["t0"], 2), _fmt(w["minade6_6s"]),
                                        _fmt(w["total_ms"], 1),
                                        w["coc"].replace("|", "/").replace("\n", " "),
                                        _fmt(w["decision"])] for w in windows[::step]]), ""]
    if plots:
        parts += ["## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in plots]
    return "\n".join(parts) + "\n"


def write_report(out_dir: Path, report: dict, plots: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2, allow_nan=False) + "\n")
    (out_dir / "report.md").write_text(markdown(report, plots))
