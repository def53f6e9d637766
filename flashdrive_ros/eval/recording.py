"""The drive node's recorded outputs (an mcap written by PlanRecorder) -> per-window results.

A plan is identified by its Path stamp (= the input t0); the first receipt of a stamp gives
the plan age (receipt time on the sim clock - t0). Samples come from the MarkerArray with the
same stamp, the CoC from the String received nearest in time, latencies, accepted length and
tokens from the planner diagnostics whose plan_t0 matches.
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

PLANNER_STATUS_SUFFIX = ": planner"
STAMP_DECIMALS = 3
OVERLAY_FRAMES = 3


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
    trajectory: np.ndarray  # [N, 3] (x, y, yaw)
    samples: np.ndarray | None = None  # [K, N, 3]
    coc_text: str = ""
    diagnostics: dict[str, str] = field(default_factory=dict)


@dataclass
class Recording:
    plans: list[RecordedPlan]
    node_stats: dict
    overlays: list[tuple[float, np.ndarray]]
    counts: dict[str, int]


def _yaw(q) -> float:
    return math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))


def control_ticks(path_ticks: list[tuple[float, float | None]], end_s: float) -> dict:
    """path_ticks: (receipt time, plan t0 or None for an empty Path), one per control tick.
    From the first plan to `end_s` (the bag's end), a tick that does not bring a new plan is
    a deadline miss."""
    ticks = misses = 0
    previous = None
    for received, t0 in path_ticks:
        if previous is None and t0 is None:
            continue
        if received > end_s:
            break
        ticks += 1
        if t0 is None or t0 == previous:
            misses += 1
        previous = t0 if t0 is not None else previous
    return {"control_ticks": ticks, "deadline_misses": misses,
            "control_rate_held": (ticks - misses) / ticks if ticks else None}


def read_recording(path: str | Path, topics: dict[str, str], end_s: float,
                   node_name: str) -> Recording:
    """topics: role (trajectory, trajectory_samples, reasoning, overlay, diagnostics) ->
    resolved topic name; end_s: the played bag's end time; node_name: whose planner status
    to read from /diagnostics."""
    role_of = {topic: role for role, topic in topics.items()}
    plans: dict[float, RecordedPlan] = {}
    markers: dict[float, np.ndarray] = {}
    reasoning: list[tuple[float, str]] = []
    diagnostics: dict[float, dict[str, str]] = {}
    overlays: list[tuple[float, np.ndarray]] = []
    last_planner: dict[str, str] = {}
    path_ticks: list[tuple[float, float | None]] = []
    counts = dict.fromkeys(topics, 0)
    typestore = get_typestore(Stores.ROS2_JAZZY)
    try:
        with AnyReader([Path(path)], default_typestore=typestore) as reader:
            wanted = [c for c in reader.connections if c.topic in role_of]
            for conn, log_ns, raw in reader.messages(connections=wanted):
                role = role_of[conn.topic]
                counts[role] += 1
                msg = reader.deserialize(raw, conn.msgtype)
                received = log_ns * 1e-9
                if role == "trajectory":
                    t0 = _stamp(msg)
                    path_ticks.append((received, _key(t0) if msg.poses else None))
                    if _key(t0) not in plans and msg.poses:
                        trajectory = np.array([[p.pose.position.x, p.pose.position.y,
                                                _yaw(p.pose.orientation)] for p in msg.poses])
                        plans[_key(t0)] = RecordedPlan(t0, received, trajectory)
                elif role == "trajectory_samples":
                    lines = [m for m in msg.markers if len(m.points) > 1]
                    if lines:
                        lines.sort(key=lambda m: m.id)
                        markers.setdefault(_key(_stamp(lines[0])), np.stack([
                            np.array([[p.x, p.y, 0.0] for p in m.points[1:]]) for m in lines]))
                elif role == "reasoning":
                    reasoning.append((received, msg.data))
                elif role == "diagnostics":
                    for status in msg.status:
                        if status.name == f"{node_name}{PLANNER_STATUS_SUFFIX}":
                            values = {kv.key: kv.value for kv in status.values}
                            last_planner = values
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
    ordered = sorted(plans.values(), key=lambda p: p.t0)
    receipt_times = np.array([r[0] for r in reasoning])
    for plan in ordered:
        plan.samples = markers.get(_key(plan.t0))
        plan.diagnostics = diagnostics.get(_key(plan.t0), {})
        if reasoning:
            plan.coc_text = reasoning[int(np.argmin(np.abs(receipt_times - plan.received_s)))][1]
    stats = {
        **control_ticks(path_ticks, end_s),
        "deadline_misses_source": "control ticks (Path messages) from the first plan to the "
                                  "bag's end that brought no new plan",
        "node_ticks": _number(last_planner, "ticks"),
        "node_skipped_ticks": _number(last_planner, "skipped_ticks"),
        "node_windows_rejected": _number(last_planner, "windows_rejected"),
    }
    spread = np.unique(np.linspace(0, len(overlays) - 1, OVERLAY_FRAMES).astype(int)) \
        if overlays else []
    return Recording(ordered, stats, [overlays[i] for i in spread], counts)


def plan_results(recording: Recording, track: OdometryTrack, labels: LabelIndex,
                 steps: int, dt: float) -> tuple[list[WindowResult], SkipCounter]:
    """WindowResults of the recorded plans that have a full ground-truth future."""
    results, skipped = [], SkipCounter()
    for plan in recording.plans:
        if plan.trajectory.shape[0] != steps:
            skipped.add("bad_plan", f"plan at {plan.t0:.3f} has {plan.trajectory.shape[0]} "
                        f"waypoints, expected {steps}")
            continue
        truth = track.future(plan.t0, steps, dt)
        if truth is None:
            skipped.add("no_future", f"odometry does not cover {plan.t0:.2f} s + "
                        f"{steps * dt:.1f} s")
            continue
        samples = plan.trajectory[None]
        if plan.samples is not None and plan.samples.shape[1:] == (steps, 3):
            samples = plan.samples.copy()
            samples[0] = plan.trajectory
        baseline = track.constant_velocity(plan.t0, steps, dt)
        timings = {s: v for s in STAGES
                   if (v := _number(plan.diagnostics, f"latency_ms.{s}")) is not None}
        accepted = _number(plan.diagnostics, "accepted_length_mean")
        tokens = _number(plan.diagnostics, "tokens_generated")
        results.append(WindowResult(
            t0=plan.t0, samples=samples, truth=truth, constant_velocity=baseline,
            metrics=window_metrics(samples, truth, baseline, dt), timings_ms=timings,
            accepted_lengths=[accepted] if accepted else [],
            tokens_generated=int(tokens or 0), coc_text=plan.coc_text,
            decision=labels.decision_at(plan.t0),
            predicted_decision=labels.predicted_decision(plan.coc_text),
            plan_age_s=plan.received_s - plan.t0))
    return results, skipped
