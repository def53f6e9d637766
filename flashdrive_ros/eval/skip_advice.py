"""Why windows were skipped, and what addresses each reason: one line per main reason, for the
replay's console (offline: replay flags; through ROS: drive_node parameters)."""

from __future__ import annotations

from dataclasses import dataclass

from flashdrive_ros.eval.report import mode_blocks
from flashdrive_ros.eval.topics import PROPOSAL_COMMAND


@dataclass(frozen=True)
class Advice:
    """meaning: what the reason code says; flag / param: the replay flag and the drive_node
    parameter that address it (None: nothing to set; `fix` says what to do)."""

    meaning: str
    flag: str | None = None
    param: str | None = None
    fix: str = ""


TOPICS_FIX = f"check the topic mapping (--topics-yaml; `{PROPOSAL_COMMAND}` proposes one)"
CLOCK_FIX = "play the bag with /clock and run the node with use_sim_time"
ADVICE = {
    "stale_images": Advice("a camera's newest frame is older than the window's time "
                           "(transport latency)", "--late-tolerance", "late_tolerance_s"),
    "stale_odometry": Advice("the newest odometry is older than the window's time",
                             "--late-tolerance", "late_tolerance_s"),
    "frame_gap": Advice("no camera frame near a wanted frame time (dropped frames)",
                        None, "frame_stand_in_s",
                        "a wider stand-in reach for dropped frames"),
    "missing_camera": Advice("a camera slot brought no frames", fix=TOPICS_FIX),
    "too_few_frames": Advice("not yet enough frames for a window (start of the bag)"),
    "odometry_short": Advice("fewer than 2 odometry samples in the history span (expected "
                             "for the windows of a bag or stream's first history span, 1.5 s "
                             "for the embedded model; beyond that the odometry is missing)", None,
                             "odom_frame", f"check the odometry topic and frame; {TOPICS_FIX}"),
    "odometry_gap": Advice("a gap in the odometry within the history span"),
    "image_size": Advice("camera images of different sizes in one window"),
    "corrupt_image": Advice("an image did not decode"),
    "nonfinite": Advice("a stamp, pose or velocity is NaN or infinite"),
    "time_backwards": Advice("the input clock went backwards", fix=CLOCK_FIX),
    "time_jump": Advice("the input clock jumped", fix=CLOCK_FIX),
    "no_future": Advice("the odometry does not cover the 6.4 s after the window (end of the "
                        "bag)"),
    "bad_plan": Advice("a recorded plan has the wrong number of waypoints"),
}
MAIN_REASONS = 5


def remedy(code: str, through_ros: bool) -> str:
    advice = ADVICE.get(code)
    if advice is None:
        return "no advice for this code"
    if through_ros and advice.param:
        setting = f"--node-param {advice.param}=..."
    elif not through_ros and advice.flag:
        setting = advice.flag
    elif not through_ros and advice.param:
        setting = f"through ROS: --node-param {advice.param}=..."
    else:
        setting = ""
    parts = [advice.meaning] + [p for p in (setting, advice.fix) if p]
    return "; ".join(parts) if setting or advice.fix else f"{advice.meaning} (expected)"


def skip_counts(block: dict) -> dict[str, int]:
    """Skipped windows of one mode's report block by reason: the replay's own and, through
    ROS, the drive node's window rejections."""
    counts = dict(block.get("skipped_windows", {}).get("reasons", {}))
    for code, count in (block.get("node_rejections") or {}).items():
        counts[code] = counts.get(code, 0) + int(count)
    return counts


def skip_lines(block: dict, through_ros: bool) -> list[str]:
    """One line per main skip reason, most frequent first: count, code, meaning, remedy."""
    counts = sorted(skip_counts(block).items(), key=lambda kv: (-kv[1], kv[0]))
    lines = [f"  {count:5d} {code}: {remedy(code, through_ros)}"
             for code, count in counts[:MAIN_REASONS] if count]
    rest = sum(count for _, count in counts[MAIN_REASONS:])
    if rest:
        lines.append(f"  {rest:5d} other ({', '.join(c for c, _ in counts[MAIN_REASONS:])})")
    return lines


def skip_report(report: dict) -> list[str]:
    """The console lines on skipped windows for every mode of a replay report."""
    through_ros = bool(report.get("through_ros"))
    out = []
    for mode, block in mode_blocks(report).items():
        lines = skip_lines(block, through_ros)
        if lines:
            out.append(f"skipped windows ({mode}): {block['windows']} planned of "
                       f"{report.get('ticks', '?')} ticks; main reasons:")
            out += lines
    return out


def planned_nothing(report: dict) -> list[str]:
    """The modes of a replay report that planned no window."""
    return [mode for mode, block in mode_blocks(report).items() if not block["windows"]]
