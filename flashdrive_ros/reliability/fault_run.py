"""What one faulted stream did to the planner, offline (the node's input handling and
PlannerLoop on this thread, no DDS) or through ROS (the node process, over DDS)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from flashdrive_ros.reliability.faults import FaultedStream
from flashdrive_ros.ros.harness.stream import NS_PER_S
from flashdrive_ros.ros.input_handler import InputHandler
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import PlannerLoop

DRAIN_QUIET_S = 3.0
DRAIN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class PlanMade:
    """time_base: how many time-base restarts came before the plan's window."""

    t0: float
    full_prefill: bool
    prefill_reason: str
    time_base: int


@dataclass
class FaultRun:
    """plans: each plan made, in order (through ROS: each plan the diagnostics reported;
    `plans_made` counts them all); published_t0: t0 of each valid plan published, in order;
    rejections: rejected windows by code; named: every fault or rejection name the
    diagnostics carried."""

    plans: list[PlanMade] = field(default_factory=list)
    plans_made: int = 0
    published_t0: list[float] = field(default_factory=list)
    rejections: dict[str, int] = field(default_factory=dict)
    full_prefills: dict[str, int] = field(default_factory=dict)
    plans_rejected: int = 0
    input_faults: dict[str, int] = field(default_factory=dict)
    named: set[str] = field(default_factory=set)
    stayed_up: bool = True
    error: str = ""


def run_offline(stream: FaultedStream, engine, builder, params: DriveParams,
                control_rate_hz: float = 10.0) -> FaultRun:
    """Feed the stream into an InputHandler and PlannerLoop (the node's code) and plan the
    newest window every control period of stream clock."""
    engine.reset()
    loop = PlannerLoop(engine, builder, params.camera_names, limits=params.plan_limits)
    handler = InputHandler(params, loop)
    cameras = {topic: i for i, topic in enumerate(params.camera_topics)}
    period_ns = round(NS_PER_S / control_rate_hz)
    run = FaultRun()
    next_tick = None
    serial = 0
    for message in stream.messages:
        if message.topic in cameras:
            handler.on_image(cameras[message.topic], message.message())
        elif message.topic == params.odom_topic:
            handler.on_odometry(message.message())
        else:
            continue
        if next_tick is None or message.clock_ns < next_tick - period_ns:
            next_tick = message.clock_ns + period_ns
        if message.clock_ns < next_tick:
            continue
        next_tick += period_ns
        loop.run_once()
        record = loop.latest()
        if record is not None and record.serial != serial:
            serial = record.serial
            plan = record.plan
            run.plans.append(PlanMade(plan.t0, plan.full_prefill, plan.prefill_reason,
                                      record.time_base))
            run.published_t0.append(plan.t0)
    planner, inputs = loop.health()
    run.plans_made = planner.windows_planned
    run.rejections = dict(planner.rejections_by_code)
    run.full_prefills = dict(planner.full_prefills_by_reason)
    run.plans_rejected = planner.plans_rejected
    run.input_faults = {h.name: h.faults_total for h in inputs if h.faults_total}
    run.named = set(run.rejections) | {h.last_fault.split(":", 1)[0] for h in inputs
                                       if h.last_fault}
    run.error = planner.engine_error
    return run


def run_through_ros(stream: FaultedStream, name: str, parameters: dict, topics: dict[str, str],
                    out_dir, rate: float = 1.0) -> FaultRun:
    """Play the stream into a fresh drive node process and read its diagnostics and
    trajectories."""
    from flashdrive_ros.ros.harness.node_session import node_session

    with node_session(name, parameters, topics, out_dir, rate) as session:
        session.player.play(stream.messages)
        last_clock = session.player.last_clock_ns or 0
        start = time.monotonic()
        quiet_since = start
        planned = -1
        while time.monotonic() - quiet_since < DRAIN_QUIET_S and \
                time.monotonic() - start < DRAIN_TIMEOUT_S:
            now = int(session.observer.snapshot().planner.get("windows_planned", 0))
            if now != planned:
                planned, quiet_since = now, time.monotonic()
            session.player.publish_clock(last_clock + round(
                (time.monotonic() - start) * rate * NS_PER_S))
            time.sleep(0.05)
        observation = session.observer.snapshot()
        stayed_up = session.node.alive()
    values = observation.planner
    run = FaultRun(stayed_up=stayed_up)
    run.plans = [PlanMade(p.plan_t0, p.full_prefill, p.prefill_reason, p.time_base)
                 for p in observation.plans]
    run.plans_made = int(values.get("windows_planned", 0))
    valid = [t.stamp for t in observation.trajectories if t.poses and not t.stop]
    run.published_t0 = [t0 for i, t0 in enumerate(valid) if i == 0 or t0 != valid[i - 1]]
    run.rejections = {k.split(".", 1)[1]: int(v) for k, v in values.items()
                      if k.startswith("rejected.")}
    run.full_prefills = {k.split(".", 1)[1].replace("_", " "): int(v)
                         for k, v in values.items() if k.startswith("full_prefill.")}
    run.plans_rejected = int(values.get("plans_rejected", 0))
    run.input_faults = {name: int(v.get("faults_total", 0))
                        for name, v in observation.inputs.items()
                        if int(v.get("faults_total", 0))}
    run.named = set(observation.named_faults)
    message = values.get("message", "")
    run.error = message if message.startswith("engine error") else ""
    return run
