"""Subscribes to the drive node's trajectory and /diagnostics and keeps what the reliability
tools count: published plans, planner counters, every fault and rejection named."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Path
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from flashdrive_ros.ros import names
from flashdrive_ros.ros.convert import stamp_to_seconds

DEPTH = 100


@dataclass(frozen=True)
class PublishedTrajectory:
    received_at: float
    stamp: float
    poses: int
    stop: bool


@dataclass(frozen=True)
class PlanEvent:
    """A new plan as diagnostics report it (monotonic receipt time)."""

    received_at: float
    plan_t0: float
    latency_ms: float
    full_prefill: bool
    prefill_reason: str
    time_base: int


@dataclass
class Observation:
    trajectories: list[PublishedTrajectory] = field(default_factory=list)
    plans: list[PlanEvent] = field(default_factory=list)
    planner: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, dict[str, str]] = field(default_factory=dict)
    named_faults: set[str] = field(default_factory=set)


def fault_name(text: str) -> str:
    """'corrupt_payload: JPEG ...' -> 'corrupt_payload'."""
    return text.split(":", 1)[0].strip()


class NodeObserver:
    def __init__(self, node: Node, node_name: str) -> None:
        self.node_name = node_name
        self.observation = Observation()
        self._lock = threading.Lock()
        qos = QoSProfile(depth=DEPTH, reliability=ReliabilityPolicy.RELIABLE)
        self.trajectory = node.create_subscription(
            Path, names.resolved(names.TRAJECTORY_TOPIC, node_name=node_name),
            self._on_path, qos)
        self.diagnostics = node.create_subscription(DiagnosticArray, names.DIAGNOSTICS_TOPIC,
                                                    self._on_diagnostics, qos)

    def matched(self) -> bool:
        return (self.trajectory.get_publisher_count() > 0
                and self.diagnostics.get_publisher_count() > 0)

    def snapshot(self) -> Observation:
        with self._lock:
            o = self.observation
            return Observation(list(o.trajectories), list(o.plans), dict(o.planner),
                               {k: dict(v) for k, v in o.inputs.items()}, set(o.named_faults))

    def _on_path(self, msg: Path) -> None:
        stop = bool(msg.poses) and all(
            p.pose.position.x == 0.0 and p.pose.position.y == 0.0 for p in msg.poses)
        with self._lock:
            self.observation.trajectories.append(PublishedTrajectory(
                time.monotonic(), stamp_to_seconds(msg.header.stamp), len(msg.poses), stop))

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        prefix = f"{self.node_name}: "
        with self._lock:
            o = self.observation
            for status in msg.status:
                if not status.name.startswith(prefix):
                    continue
                values = {kv.key: kv.value for kv in status.values}
                part = status.name[len(prefix):]
                if part == "planner":
                    planned = int(values.get("windows_planned", 0))
                    if planned > int(o.planner.get("windows_planned", 0)) and \
                            "plan_t0" in values:
                        o.plans.append(PlanEvent(
                            time.monotonic(), float(values["plan_t0"]),
                            float(values.get("latency_ms.total", "nan")),
                            values.get("full_prefill") == "True",
                            values.get("prefill_reason", ""),
                            int(values.get("plan_time_base", 0))))
                    o.planner = {**values, "message": status.message}
                    o.named_faults.update(k.split(".", 1)[1] for k in values
                                          if k.startswith("rejected."))
                    if values.get("fallback", "none") != "none":
                        o.named_faults.add(f"fallback_{fault_name(values['fallback'])}")
                elif part.startswith("input "):
                    o.inputs[part[len("input "):]] = values
                    if values.get("last_fault", "none") != "none":
                        o.named_faults.add(fault_name(values["last_fault"]))
                    if status.message != "ok":
                        o.named_faults.add(fault_name(status.message))
