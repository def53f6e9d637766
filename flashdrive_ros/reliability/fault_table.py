"""Per-fault figures from a FaultRun against the clean run, and the table of them."""

from __future__ import annotations

from dataclasses import dataclass

from flashdrive_ros.reliability.fault_run import FaultRun, PlanMade
from flashdrive_ros.reliability.faults import Fault, FaultedStream

EXPECTED_NAMES = {
    "drop": {"frame_gap", "stale_images"},
    "jitter": set(),
    "reorder": {"time_backwards", "out_of_order"},
    "duplicate": set(),
    "silent_camera": {"frame_gap", "stale_images", "silent"},
    "odom_gap": {"odometry_gap", "stale_odometry"},
    "time_jump": {"time_backwards"},
    "corrupt_jpeg": {"corrupt_payload"},
    "wrong_size": set(),  # reduced to the model size on arrival like every frame
    "nonfinite_odom": {"non_finite", "nonfinite"},
}
IGNORED_PREFILLS = ("first window",)


@dataclass
class WindowSpan:
    """Which stamps a window at t0 draws on: images in [t0 - image_span - tolerance,
    t0 + tolerance], odometry in [t0 - history_span, t0]."""

    image_span: float
    tolerance: float
    history_span: float

    def uses(self, t0: float, stamp: float, odometry: bool) -> bool:
        if odometry:
            return t0 - self.history_span <= stamp <= t0
        return t0 - self.image_span - self.tolerance <= stamp <= t0 + self.tolerance


def after_fault(plans: list[PlanMade], fault: Fault, stream: FaultedStream) -> list[float]:
    """The t0s (in the order made) of plans from windows after the fault: from its end stamp
    on, and after a time jump in a later time base."""
    later_base = fault.name == "time_jump"
    return [p.t0 for p in plans
            if p.t0 >= stream.fault_end_stamp and (p.time_base > 0 or not later_base)]


def fault_row(fault: Fault, path: str, run: FaultRun, clean: FaultRun, stream: FaultedStream,
              span: WindowSpan, odometry_topic: str) -> dict:
    made = [p.t0 for p in run.plans]
    spoiled_plans = sum(any(span.uses(t0, stamp, topic == odometry_topic)
                            for topic, stamp in stream.spoiled) for t0 in made)
    after = after_fault(run.plans, fault, stream)
    prefills = {r: n for r, n in run.full_prefills.items() if r not in IGNORED_PREFILLS}
    expected = EXPECTED_NAMES[fault.name]
    return {
        "fault": fault.name, "value": fault.value, "path": path,
        "plans": run.plans_made, "clean_plans": clean.plans_made,
        "windows_affected": max(clean.plans_made - run.plans_made, 0),
        "rejected": dict(sorted(run.rejections.items())),
        "full_reprefills": dict(sorted(prefills.items())),
        "plans_failing_checks": run.plans_rejected,
        "spoiled_messages": len(stream.spoiled), "removed_messages": stream.removed,
        "plans_from_spoiled_windows": spoiled_plans,
        "recovery_s": round(after[0] - stream.fault_end_stamp, 3) if after else None,
        "named": sorted(run.named),
        "fault_named": (not expected) or bool(expected & run.named),
        "stayed_up": run.stayed_up and not run.error,
        "recovered": bool(after),
    }


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "-"


def markdown_table(rows: list[dict]) -> str:
    header = ("| fault | path | plans (clean) | windows affected (plans lost) "
              "| rejected windows (code n) "
              "| full re-prefills (reason n) | plans failing checks | plans from spoiled "
              "windows | recovery s | named in diagnostics | up |")
    lines = [header, "|" + "---|" * 11]
    for r in rows:
        recovery = "-" if r["recovery_s"] is None else f"{r['recovery_s']:.2f}"
        named = ", ".join(r["named"]) or "-"
        lines.append(
            f"| {r['fault']}={r['value']:g} | {r['path']} | {r['plans']} ({r['clean_plans']}) "
            f"| {r['windows_affected']} | {_counts(r['rejected'])} "
            f"| {_counts(r['full_reprefills'])} | {r['plans_failing_checks']} "
            f"| {r['plans_from_spoiled_windows']} of {r['spoiled_messages']} spoiled "
            f"| {recovery} | {named}{'' if r['fault_named'] else ' (fault not named)'} "
            f"| {'yes' if r['stayed_up'] and r['recovered'] else 'NO'} |")
    return "\n".join(lines) + "\n"
