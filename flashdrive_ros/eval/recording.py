"""The drive node's recorded outputs (an mcap written by PlanRecorder) -> per-window results.

Plans come from ~/finished_plans, where the node publishes every plan it finished, fresh or
late, once: its stamp is the input t0, its LINE_STRIP markers the samples (x, y) and its
TEXT_VIEW_FACING marker the CoC; the receipt time on the sim clock - t0 is the plan age.
Latencies, accepted length and tokens come from the planner diagnostics whose plan_t0 matches.
~/trajectory (the control output, one Path per control tick) gives the control ticks and
which plans were published as valid: a Path stamped with a finished plan's t0. Any other Path
(empty while the plan is stale, or a fallback) brings no valid plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rosbags.highlevel import AnyReader, AnyReaderError
from rosbags.typesys import Stores, get_typestore

from flashdrive_ros.engine.types import STAGES
from flashdrive_ros.eval.errors import CorruptBag, ImageDecodeError
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.images import decode_raw
from flashdrive_ros.eval.metrics import window_metrics
from flashdrive_ros.eval.offline import LabelIndex
from flashdrive_ros.eval.summary import SkipCounter, WindowResult
from flashdrive_ros.ros.camera_worker import BEHIND_EXTRA
from flashdrive_ros.ros.input_handler import GATE_EXTRA, GATE_OPENINGS_EXTRA, OFF_GRID_EXTRA

PLANNER_STATUS_SUFFIX = ": planner"
INPUT_STATUS_INFIX = ": input "
NODE_NOTES = ("odom_frame", "clock", "frame_stand_ins", OFF_GRID_EXTRA, GATE_EXTRA,
              GATE_OPENINGS_EXTRA, BEHIND_EXTRA)
NODE_NOTE_PREFIXES = ("camera_slot.", "input_latency_ms.", "encoding.")
STAMP_DECIMALS = 3
OVERLAY_FRAMES = 3
TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
MARKER = TYPESTORE.types["visualization_msgs/msg/Marker"]


def _stamp(msg) -> float:
    return int(msg.header.stamp.sec) + int(msg.header.stamp.nanosec) * 1e-9


def _key(t: float) -> float:
    return round(t, STAMP_DECIMALS)


def _number(values: dict[str, str], key: str) -> float | None:
    try:
        value = float(values[key])
    except (KeyError, ValueError):
        return None
    return value if math.isfinite(value) else None


@dataclass
class RecordedPlan:
    t0: float
    received_s: float
    samples: np.ndarray  # [K, N, 2] (x, y)
    coc_text: str = ""
    published_valid: bool = False
    diagnostics: dict[str, str] = field(default_factory=dict)


@dataclass
class Recording:
    plans: list[RecordedPlan]
    node_stats: dict
    overlays: list[tuple[float, np.ndarray]]
    counts: dict[str, int]


def finished_plan(msg, received: float) -> RecordedPlan | None:
    """A ~/finished_plans MarkerArray -> its plan, None when it holds no trajectory."""
    lines = sorted((m for m in msg.markers if m.type == MARKER.LINE_STRIP and len(m.points) > 1),
                   key=lambda m: m.id)
    if not lines:
        return None
    samples = np.stack([np.array([[p.x, p.y] for p in m.points[1:]]) for m in lines])
    text = [m.text for m in msg.markers if m.type == MARKER.TEXT_VIEW_FACING]
    return RecordedPlan(_stamp(lines[0]), received, samples, text[0] if text else "")


def control_ticks(path_ticks: list[tuple[float, float | None]], end_s: float,
                  start_s: float | None = None) -> dict:
    """path_ticks: (receipt time, plan t0 or None for an empty Path), one per control tick.
    From `start_s` (default: the first valid plan) to `end_s` (the bag's end), a tick that
    does not bring a new valid plan is a deadline miss; `valid_trajectory_rate` is the share
    of ticks that published a valid (non-empty) Path, new or not."""
    ticks = misses = valid = 0
    previous = None
    for received, t0 in path_ticks:
        if (start_s is None and previous is None and t0 is None) or \
                (start_s is not None and received < start_s):
            continue
        if received > end_s:
            break
        ticks += 1
        valid += t0 is not None
        if t0 is None or t0 == previous:
            misses += 1
        previous = t0 if t0 is not None else previous
    return {"control_ticks": ticks, "deadline_misses": misses,
            "control_rate_held": (ticks - misses) / ticks if ticks else None,
            "valid_trajectory_rate": valid / ticks if ticks else None}


def read_recording(path: str | Path, topics: dict[str, str], end_s: float,
                   node_name: str) -> Recording:
    """topics: role (trajectory, trajectory_samples, reasoning, finished_plans, overlay,
    diagnostics) -> resolved topic name; end_s: the played bag's end time; node_name: whose
    planner status to read from /diagnostics."""
    role_of = {topic: role for role, topic in topics.items()}
    plans: dict[float, RecordedPlan] = {}
    diagnostics: dict[float, dict[str, str]] = {}
    overlays: list[tuple[float, np.ndarray]] = []
    last_planner: dict[str, str] = {}
    last_planner_message = ""
    inputs_received: dict[str, int] = {}
    input_faults: dict[str, str] = {}
    path_ticks: list[tuple[float, float | None]] = []
    counts = dict.fromkeys(topics, 0)
    try:
        with AnyReader([Path(path)], default_typestore=TYPESTORE) as reader:
            wanted = [c for c in reader.connections if c.topic in role_of]
            for conn, log_ns, raw in reader.messages(connections=wanted):
                role = role_of[conn.topic]
                counts[role] += 1
                msg = reader.deserialize(raw, conn.msgtype)
                received = log_ns * 1e-9
                if role == "trajectory":
                    path_ticks.append((received, _key(_stamp(msg)) if msg.poses else None))
                elif role == "finished_plans":
                    plan = finished_plan(msg, received)
                    if plan is not None:
                        plans.setdefault(_key(plan.t0), plan)
                elif role == "diagnostics":
                    for status in msg.status:
                        if status.name.startswith(f"{node_name}{INPUT_STATUS_INFIX}"):
                            name = status.name[len(node_name) + len(INPUT_STATUS_INFIX):]
                            values = {kv.key: kv.value for kv in status.values}
                            received = _number(values, "received")
                            if received is not None:
                                inputs_received[name] = int(received)
                            if values.get("last_fault", "none") != "none":
                                input_faults[name] = (f"{values['last_fault']} "
                                                      f"({values.get('faults_total')} faults)")
                        if status.name == f"{node_name}{PLANNER_STATUS_SUFFIX}":
                            values = {kv.key: kv.value for kv in status.values}
                            last_planner, last_planner_message = values, status.message
                            plan_t0 = _number(values, "plan_t0")
                            if plan_t0 is not None:
                                diagnostics.setdefault(_key(plan_t0), values)
                elif role == "overlay":
                    try:
                        overlays.append((received, decode_raw(msg.encoding, msg.height,
                                                              msg.width, msg.step, msg.data)))
                    except ImageDecodeError:
                        pass
    except AnyReaderError as exc:
        raise CorruptBag(f"recorded bag {path} is unreadable: {exc}") from None
    path_ticks = [(received, t0 if t0 in plans else None) for received, t0 in path_ticks]
    valid_t0s = {t0 for _, t0 in path_ticks}
    ordered = sorted(plans.values(), key=lambda p: p.t0)
    for plan in ordered:
        plan.published_valid = _key(plan.t0) in valid_t0s
        plan.diagnostics = diagnostics.get(_key(plan.t0), {})
    first_receipt = min((p.received_s for p in ordered), default=None)
    stats = {
        **control_ticks(path_ticks, end_s, first_receipt),
        "deadline_misses_source": "control ticks (Path messages) from the first finished plan "
                                  "to the bag's end that brought no new valid plan",
        "finished_plans": len(ordered),
        "plans_published_valid": sum(p.published_valid for p in ordered),
        "node_ticks": _number(last_planner, "ticks"),
        "node_skipped_ticks": _number(last_planner, "skipped_ticks"),
        "node_windows_planned": _number(last_planner, "windows_planned"),
        "node_windows_rejected": _number(last_planner, "windows_rejected"),
        "node_last_rejection": last_planner.get("last_rejection"),
        "node_rejections": {key[len("rejected."):]: int(value)
                            for key, value in last_planner.items()
                            if key.startswith("rejected.")},
        "node_inputs_received": inputs_received,
        "node_input_faults": input_faults,
        "node_input_notes": {key: value for key, value in last_planner.items()
                             if key in NODE_NOTES or key.startswith(NODE_NOTE_PREFIXES)},
        "node_planner_message": last_planner_message,
    }
    spread = np.unique(np.linspace(0, len(overlays) - 1, OVERLAY_FRAMES).astype(int)) \
        if overlays else []
    return Recording(ordered, stats, [overlays[i] for i in spread], counts)


def plan_results(recording: Recording, track: OdometryTrack, labels: LabelIndex,
                 steps: int, dt: float) -> tuple[list[WindowResult], SkipCounter]:
    """WindowResults of the recorded plans that have a full ground-truth future."""
    results, skipped = [], SkipCounter()
    for plan in recording.plans:
        if plan.samples.shape[1] != steps:
            skipped.add("bad_plan", f"plan at {plan.t0:.3f} has {plan.samples.shape[1]} "
                        f"waypoints, expected {steps}")
            continue
        truth = track.future(plan.t0, steps, dt)
        if truth is None:
            skipped.add("no_future", f"odometry does not cover {plan.t0:.2f} s + "
                        f"{steps * dt:.1f} s")
            continue
        baseline = track.constant_velocity(plan.t0, steps, dt)
        timings = {s: v for s in STAGES
                   if (v := _number(plan.diagnostics, f"latency_ms.{s}")) is not None}
        accepted = _number(plan.diagnostics, "accepted_length_mean")
        tokens = _number(plan.diagnostics, "tokens_generated")
        results.append(WindowResult(
            t0=plan.t0, samples=plan.samples, truth=truth, constant_velocity=baseline,
            metrics=window_metrics(plan.samples, truth, baseline, dt), timings_ms=timings,
            accepted_lengths=[accepted] if accepted else [],
            tokens_generated=int(tokens or 0), coc_text=plan.coc_text,
            decision=labels.decision_at(plan.t0),
            predicted_decision=labels.predicted_decision(plan.coc_text),
            plan_age_s=plan.received_s - plan.t0, tags=labels.tags_at(plan.t0),
            label_sides=labels.sides_at(plan.t0)))
    return results, skipped
