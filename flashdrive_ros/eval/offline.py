"""Offline replay: bag -> WindowBuilder at the control rate in bag time -> planners -> results.

Every mode sees the same windows in the same order (one WindowBuilder, one window object per
tick). Records come in log-time order; a tick at t0 is built once a record stamped later than
t0 + `late_tolerance_s` has come, so that messages logged up to that much after their stamp
(transport latency) are in the window.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from tqdm import tqdm

from flashdrive_ros.engine.types import Plan, Window
from flashdrive_ros.engine.window import WindowBuilder, WindowLimits, WindowRejection
from flashdrive_ros.eval.errors import ReplayError, TopicsConfigError
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.metrics import named_sides, nearest_decision, window_metrics, words
from flashdrive_ros.eval.records import ImageRecord, LabelRecord, OdometryRecord, RecordSource
from flashdrive_ros.eval.summary import SkipCounter, WindowResult
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.ros.transport import DEFAULT_LATE_TOLERANCE_S


class Planner(Protocol):
    def step(self, window: Window) -> Plan: ...

    def reset(self) -> None: ...


@dataclass
class ReplaySettings:
    """late_tolerance_s: at most WindowLimits.keep_seconds (the frames a builder keeps
    beyond a window)."""

    control_rate_hz: float = 10.0
    late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S
    max_windows: int | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.control_rate_hz) and self.control_rate_hz > 0):
            raise ValueError(f"control_rate_hz must be > 0, got {self.control_rate_hz}")
        keep = WindowLimits.keep_seconds
        if not (math.isfinite(self.late_tolerance_s) and 0 <= self.late_tolerance_s <= keep):
            raise ValueError(f"late tolerance must be in [0, {keep}] s, got "
                             f"{self.late_tolerance_s}")
        if self.max_windows is not None and self.max_windows < 1:
            raise ValueError(f"max_windows must be >= 1 or None, got {self.max_windows}")

    @property
    def period_s(self) -> float:
        return 1.0 / self.control_rate_hz


@dataclass
class ReplayResults:
    """results per mode; skipped windows per mode (offline, one counter shared by all modes,
    which see the same windows); offline, the inputs' latency (log time - stamp, per topic)
    and notes on them (camera slot warnings)."""

    results: dict[str, list[WindowResult]]
    skipped: dict[str, SkipCounter]
    ticks: int = 0
    input_latency_ms: dict[str, dict] = field(default_factory=dict)
    input_notes: list[str] = field(default_factory=list)
    frame_stand_ins: int = 0


class LabelIndex:
    """Labels of the bag (`/sim/labels`: t, coc, decision): the labelled decision nearest a
    time (within `tolerance` seconds), and the decision a generated CoC expresses (that of the
    labelled CoC sharing most words with it)."""

    def __init__(self, labels: list[LabelRecord], tolerance: float) -> None:
        ordered = sorted((label for label in labels if "decision" in label.values),
                         key=lambda label: label.stamp)
        self.stamps = [label.stamp for label in ordered]
        self.decisions = [str(label.values["decision"]) for label in ordered]
        self.tags = [tuple(map(str, tags)) if isinstance(tags := label.values.get("tags"), list)
                     else () for label in ordered]
        self.sides = [named_sides(str(label.values.get("coc", ""))) for label in ordered]
        self.tolerance = tolerance
        examples = {str(label.values.get("coc", "")): str(label.values["decision"])
                    for label in ordered}
        self.examples = [(words(text), d) for text, d in sorted(examples.items()) if text]

    def predicted_decision(self, coc_text: str) -> str | None:
        return nearest_decision(coc_text, self.examples)

    def _nearest(self, t: float) -> int | None:
        i = bisect_left(self.stamps, t)
        best = min((j for j in (i - 1, i) if 0 <= j < len(self.stamps)),
                   key=lambda j: abs(self.stamps[j] - t), default=None)
        if best is None or abs(self.stamps[best] - t) > self.tolerance:
            return None
        return best

    def decision_at(self, t: float) -> str | None:
        best = self._nearest(t)
        return None if best is None else self.decisions[best]

    def tags_at(self, t: float) -> tuple[str, ...]:
        best = self._nearest(t)
        return () if best is None else self.tags[best]

    def sides_at(self, t: float) -> tuple[str, ...]:
        """The sides the labelled CoC nearest `t` names (named_sides)."""
        best = self._nearest(t)
        return () if best is None else self.sides[best]


def check_camera_count(model: ModelConfig, topics: TopicMapping) -> None:
    cameras = len(model.prompt.camera_names)
    if len(topics.cameras) != cameras:
        raise TopicsConfigError(f"the model takes {cameras} cameras, the topic mapping names "
                                f"{len(topics.cameras)}: {topics.cameras}")


class OfflineReplay:
    def __init__(self, bag: RecordSource, planners: dict[str, Planner], model: ModelConfig,
                 settings: ReplaySettings | None = None) -> None:
        if not planners:
            raise ValueError("need at least one planner")
        check_camera_count(model, bag.topics)
        cameras = len(model.prompt.camera_names)
        self.bag = bag
        self.planners = planners
        self.model = model
        self.settings = settings or ReplaySettings()
        self.builder = WindowBuilder(
            cameras, num_frames=model.prompt.num_frames, frame_dt=model.prompt.frame_dt,
            num_history=model.action.num_history, history_dt=model.action.history_dt)
        self.frame_span = (model.prompt.num_frames - 1) * model.prompt.frame_dt
        self.track = OdometryTrack(bag.odometry())
        self.labels = LabelIndex(bag.labels(), self.settings.period_s / 2)
        self.corrupt: deque[ImageRecord] = deque()
        shared = SkipCounter()
        self.skipped = shared
        self.out = ReplayResults({mode: [] for mode in planners},
                                 dict.fromkeys(planners, shared))

    def run(self) -> ReplayResults:
        period = self.settings.period_s
        start, end = self.bag.start_time, self.bag.end_time
        tick_index = math.ceil(start / period - 1e-9)
        total = max(int(end / period) - tick_index + 1, 0)
        bar = tqdm(total=total, unit="tick", desc="replay",
                   disable=None if self.settings.progress else True)
        try:
            for record in self.bag.records():
                while record.stamp > tick_index * period + self.settings.late_tolerance_s:
                    if self._tick(tick_index * period):
                        return self.out
                    tick_index += 1
                    bar.update()
                self._feed(record)
            while tick_index * period <= end + 1e-9:
                if self._tick(tick_index * period):
                    break
                tick_index += 1
                bar.update()
        finally:
            bar.close()
            self.out.frame_stand_ins = self.builder.stand_ins
        return self.out

    def _feed(self, record) -> None:
        if isinstance(record, ImageRecord):
            if record.rgb is None:
                self.corrupt.append(record)
            else:
                self.builder.add_image(record.camera, record.stamp, record.rgb)
        elif isinstance(record, OdometryRecord):
            self.builder.add_odometry(record.stamp, record.position, record.quaternion,
                                      record.linear_velocity)

    def _corrupt_near(self, t0: float) -> ImageRecord | None:
        tolerance = self.builder.limits.frame_tolerance
        while self.corrupt and self.corrupt[0].stamp < t0 - self.frame_span - 1.0:
            self.corrupt.popleft()
        return next((r for r in self.corrupt
                     if t0 - self.frame_span - tolerance <= r.stamp <= t0 + tolerance), None)

    def _tick(self, t0: float) -> bool:
        """Plan the window at t0 in every mode; True once max_windows is reached."""
        self.out.ticks += 1
        window = self.builder.build(t0)
        if isinstance(window, WindowRejection):
            corrupt = self._corrupt_near(t0)
            if corrupt is not None:
                self.skipped.add("corrupt_image", corrupt.error or "image did not decode")
            else:
                self.skipped.add(window.code, window.reason)
            if window.time_base_reset:
                for planner in self.planners.values():
                    planner.reset()
            return False
        action = self.model.action
        truth = self.track.future(t0, action.num_waypoints, action.dt)
        if truth is None:
            self.skipped.add("no_future", f"odometry does not cover {t0:.2f} s + "
                                 f"{action.num_waypoints * action.dt:.1f} s")
            return False
        baseline = self.track.constant_velocity(t0, action.num_waypoints, action.dt)
        decision = self.labels.decision_at(t0)
        for mode, planner in self.planners.items():
            try:
                plan = planner.step(window)
            except ValueError as exc:
                raise ReplayError(f"the {mode} engine refuses the window at t0 {t0:.3f}: "
                                  f"{exc}") from None
            self.out.results[mode].append(WindowResult(
                t0=t0, samples=plan.trajectories, truth=truth, constant_velocity=baseline,
                metrics=window_metrics(plan.trajectories, truth, baseline, plan.dt),
                timings_ms=dict(plan.timings_ms), accepted_lengths=list(plan.accepted_lengths),
                tokens_generated=plan.tokens_generated, coc_text=plan.coc_text,
                decision=decision, predicted_decision=self.labels.predicted_decision(
                    plan.coc_text) if decision is not None else None,
                tags=self.labels.tags_at(t0), label_sides=self.labels.sides_at(t0)))
        limit = self.settings.max_windows
        return limit is not None and len(next(iter(self.out.results.values()))) >= limit
