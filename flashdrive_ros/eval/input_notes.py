"""What a replay learned about its inputs, for the console: offline, camera slot warnings,
encodings read as another one and frames dropped for a zero header stamp;
through ROS, the drive node's input faults (why it dropped messages: frame, clock, decoding)
and its notes (clock, camera slots, accepted odometry frame), and a bag player that fell
behind the bag's log times."""

from __future__ import annotations

from flashdrive_ros.eval.report import mode_blocks

CONSOLE_NOTES = ("clock", "odom_frame")
CONSOLE_NOTE_PREFIXES = ("camera_slot.", "encoding.")
PLAYER_LATE_S = 0.5


def input_lines(report: dict) -> list[str]:
    lines = [f"  {note}" for note in report.get("input_notes", [])]
    for mode, block in mode_blocks(report).items():
        faults = block.get("node_input_faults") or {}
        notes = block.get("node_input_notes") or {}
        lines += [f"  drive_node ({mode}) input {name}: {fault}"
                  for name, fault in sorted(faults.items())]
        lines += [f"  drive_node ({mode}) {key}: {value}"
                  for key, value in sorted(notes.items())
                  if (key in CONSOLE_NOTES and value != "ok")
                  or key.startswith(CONSOLE_NOTE_PREFIXES)]
        late = block.get("playback_max_lateness_s") or 0.0
        if late > PLAYER_LATE_S:
            lines.append(f"  player ({mode}): fell up to {late:.1f} s behind the bag's log "
                         f"times (reading the bag or publishing it took longer than the bag "
                         f"lasts on this machine); the node got its inputs late and /clock "
                         f"in bursts, so the ticks and plan ages measure the player as well")
    return ["inputs:", *lines] if lines else []
