"""What the training windows cover: windows per decision, per scenario tag and per speed
band; a run stops when a decision class has too few windows to be learned."""

from __future__ import annotations

from collections import Counter

import numpy as np

from flashdrive_ros.train.drive import Drive

SPEED_BANDS = ((0.0, 0.5, "standstill"), (0.5, 4.0, "creeping"), (4.0, 8.0, "slow"),
               (8.0, 12.0, "cruise"), (12.0, float("inf"), "fast"))


class CoverageError(ValueError):
    pass


def speed_band(speed: float) -> str:
    for low, high, name in SPEED_BANDS:
        if low <= speed < high:
            return name
    raise ValueError(f"speed {speed} is not finite and >= 0")


def coverage(drives: list[Drive], num_frames: int, num_history: int) -> dict:
    """Window counts and shares of `drives` per decision, scenario tag and speed band."""
    from flashdrive_ros.sim.labels import DECISIONS

    decisions: Counter = Counter()
    tags: Counter = Counter()
    speeds: Counter = Counter()
    total = 0
    for drive in drives:
        for step in drive.window_steps(num_frames, num_history):
            total += 1
            decisions[DECISIONS[int(drive.decision[step])]] += 1
            tags.update(t for t in drive.tags[step].split(",") if t)
            speeds[speed_band(max(float(drive.speed[step]), 0.0))] += 1

    def table(counts: Counter, names) -> dict:
        return {n: {"windows": counts[n], "share": round(counts[n] / max(total, 1), 4)}
                for n in names}

    return {"windows": total,
            "decision": table(decisions, DECISIONS),
            "scenario_tag": table(tags, sorted(tags)),
            "speed_band": table(speeds, [name for _, _, name in SPEED_BANDS]),
            "speed_mps": {"min": float(min((float(np.min(d.speed)) for d in drives),
                                           default=0.0)),
                          "p50": float(np.median(np.concatenate([d.speed for d in drives])))
                          if drives else 0.0}}


def check_coverage(table: dict, min_windows: int) -> None:
    """Raises CoverageError naming every decision class with fewer than `min_windows`."""
    short = {name: row["windows"] for name, row in table["decision"].items()
             if row["windows"] < min_windows}
    if short:
        raise CoverageError(
            f"training windows per decision below {min_windows}: {short} of "
            f"{table['windows']} windows; use more or longer drives (--train-drives, "
            f"--drive-seconds) or lower Recipe.min_decision_windows")


def markdown(table: dict) -> str:
    lines = [f"Training windows: {table['windows']}", "",
             "| group | class | windows | share |", "|---|---|---|---|"]
    for group in ("decision", "scenario_tag", "speed_band"):
        for name, row in table[group].items():
            lines.append(f"| {group} | {name} | {row['windows']} | {row['share']:.3f} |")
    return "\n".join(lines) + "\n"
