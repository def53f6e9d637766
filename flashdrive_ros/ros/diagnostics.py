"""Planner and input health -> diagnostic_msgs/DiagnosticArray."""

from __future__ import annotations

from dataclasses import dataclass, field

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from std_msgs.msg import Header

from flashdrive_ros.engine.types import STAGES, Plan
from flashdrive_ros.ros.convert import seconds_to_stamp

HARDWARE_ID = "flashdrive_ros"


@dataclass
class InputHealth:
    """One input stream (a camera or odometry). `fault` is empty while the stream is healthy;
    `last_fault` keeps the most recent fault reason, `fault_at` its time (monotonic s)."""

    name: str
    fault: str = ""
    last_fault: str = ""
    fault_at: float | None = None
    received: int = 0
    faults_total: int = 0
    last_stamp: float | None = None
    last_receipt: float | None = None


@dataclass
class PlannerHealth:
    plan: Plan | None = None
    plan_time_base: int = 0
    plan_age_s: float | None = None
    plan_valid: bool = False
    ticks: int = 0
    skipped_ticks: int = 0
    consecutive_skipped_ticks: int = 0
    windows_planned: int = 0
    windows_rejected: int = 0
    last_rejection: str = ""
    rejections_by_code: dict[str, int] = field(default_factory=dict)
    full_prefills_by_reason: dict[str, int] = field(default_factory=dict)
    plans_rejected: int = 0
    plans_superseded: int = 0
    last_plan_rejection: str = ""
    fallback: str = ""
    engine_error: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, float):
        value = f"{value:.3f}"
    return KeyValue(key=key, value=str(value))


def planner_status(node_name: str, health: PlannerHealth) -> DiagnosticStatus:
    values = [
        _kv("plan_valid", health.plan_valid),
        _kv("plan_age_s", "none" if health.plan_age_s is None else health.plan_age_s),
        _kv("ticks", health.ticks),
        _kv("skipped_ticks", health.skipped_ticks),
        _kv("consecutive_skipped_ticks", health.consecutive_skipped_ticks),
        _kv("windows_planned", health.windows_planned),
        _kv("windows_rejected", health.windows_rejected),
        _kv("last_rejection", health.last_rejection or "none"),
    ]
    values += [_kv(f"rejected.{code}", count)
               for code, count in sorted(health.rejections_by_code.items())]
    values += [_kv(f"full_prefill.{reason.replace(' ', '_')}", count)
               for reason, count in sorted(health.full_prefills_by_reason.items())]
    values += [_kv("plans_rejected", health.plans_rejected),
               _kv("plans_superseded", health.plans_superseded),
               _kv("last_plan_rejection", health.last_plan_rejection or "none"),
               _kv("fallback", health.fallback or "none")]
    plan = health.plan
    if plan is not None:
        values += [_kv(f"latency_ms.{stage}", float(plan.timings_ms[stage]))
                   for stage in STAGES if stage in plan.timings_ms]
        values += [_kv("accepted_length_mean", plan.accepted_length_mean),
                   _kv("tokens_generated", plan.tokens_generated),
                   _kv("mode", plan.mode),
                   _kv("full_prefill", plan.full_prefill),
                   _kv("prefill_reason", plan.prefill_reason or "streaming"),
                   _kv("plan_t0", float(plan.t0)),
                   _kv("plan_time_base", health.plan_time_base)]
    values += [_kv(k, v) for k, v in sorted(health.extra.items())]
    if health.engine_error:
        level, message = DiagnosticStatus.ERROR, f"engine error: {health.engine_error}"
    elif health.fallback:
        level, message = DiagnosticStatus.WARN, f"fallback: {health.fallback}"
    elif health.plan_valid:
        level, message = DiagnosticStatus.OK, "planning"
    elif plan is None:
        level, message = DiagnosticStatus.WARN, "no plan yet"
    else:
        level, message = DiagnosticStatus.WARN, "plan is stale"
    return DiagnosticStatus(level=level, name=f"{node_name}: planner", message=message,
                            hardware_id=HARDWARE_ID, values=values)


def input_status(node_name: str, health: InputHealth, now_s: float) -> DiagnosticStatus:
    age = None if health.last_receipt is None else now_s - health.last_receipt
    values = [
        _kv("received", health.received),
        _kv("faults_total", health.faults_total),
        _kv("last_fault", health.last_fault or "none"),
        _kv("last_stamp", "none" if health.last_stamp is None else health.last_stamp),
        _kv("since_last_receipt_s", "none" if age is None else age),
    ]
    level = DiagnosticStatus.ERROR if health.fault else DiagnosticStatus.OK
    return DiagnosticStatus(level=level, name=f"{node_name}: input {health.name}",
                            message=health.fault or "ok", hardware_id=HARDWARE_ID,
                            values=values)


def build_diagnostics(node_name: str, stamp_s: float, planner: PlannerHealth,
                      inputs: list[InputHealth], now_s: float) -> DiagnosticArray:
    statuses = [planner_status(node_name, planner)]
    statuses += [input_status(node_name, health, now_s) for health in inputs]
    return DiagnosticArray(header=Header(stamp=seconds_to_stamp(stamp_s)), status=statuses)
