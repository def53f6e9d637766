"""What a replay learned about its inputs, for the console: offline, camera slot warnings,
encodings read as another one and frames dropped for a zero header stamp;
through ROS, the drive node's input faults (why it dropped messages: frame, clock, decoding)
and its notes (clock, camera slots, accepted odometry frame), and a bag player that fell
behind the bag's log times, and camera messages lost between the player and the node."""

from __future__ import annotations

from flashdrive_ros.eval.dds_profile import LARGE_IMAGES_PROFILE
from flashdrive_ros.eval.report import mode_blocks
from flashdrive_ros.ros.camera_worker import BEHIND_EXTRA

CONSOLE_NOTES = ("clock", "odom_frame")
CONSOLE_NOTE_PREFIXES = ("camera_slot.", "encoding.")
PLAYER_LATE_S = 0.5
TRANSPORT_LOSS_NOTED = 0.02


def transport_lines(mode: str, block: dict) -> list[str]:
    """One line per camera whose node received fewer than (1 - TRANSPORT_LOSS_NOTED) of the
    messages the player published on its topic."""
    lines = []
    large_images = block.get("dds_profile", "").endswith(LARGE_IMAGES_PROFILE)
    for name, counts in (block.get("camera_transport") or {}).items():
        played, received = counts["played"], counts["received"]
        if played and received < (1 - TRANSPORT_LOSS_NOTED) * played:
            remedy = ("the node took them too slowly (CPU load)" if large_images else
                      f"for large raw images: --dds-profile config/{LARGE_IMAGES_PROFILE}")
            lines.append(f"  drive_node ({mode}) {name}: received {received} of the {played} "
                         f"messages played on {counts['topic']} ({1 - received / played:.0%} "
                         f"lost between the player and the node); {remedy}")
    return lines


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
        behind = int(notes.get(BEHIND_EXTRA, 0))
        if behind:
            lines.append(f"  drive_node ({mode}): {behind} camera messages dropped by its own "
                         f"camera thread's queue, which fell behind (CPU load; {BEHIND_EXTRA})")
        lines += transport_lines(mode, block)
        late = block.get("playback_max_lateness_s") or 0.0
        if late > PLAYER_LATE_S:
            lines.append(f"  player ({mode}): fell up to {late:.1f} s behind the bag's log "
                         f"times (reading the bag or publishing it took longer than the bag "
                         f"lasts on this machine); the node got its inputs late and /clock "
                         f"in bursts, so the ticks and plan ages measure the player as well")
    return ["inputs:", *lines] if lines else []
