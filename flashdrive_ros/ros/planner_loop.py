"""Inputs -> WindowBuilder -> engine on a worker thread, newest complete window first
(no rclpy: the node feeds it from its callbacks and reads the newest plan on its timer)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from flashdrive_ros.engine.types import Plan, Window
from flashdrive_ros.engine.window import WindowBuilder, WindowRejection
from flashdrive_ros.ros.diagnostics import InputHealth, PlannerHealth
from flashdrive_ros.ros.frame_grid import FrameGrid
from flashdrive_ros.ros.input_health import InputHealthBook
from flashdrive_ros.ros.plan_actor import PlanActor
from flashdrive_ros.ros.plan_sanity import PlanLimits, check_plan
from flashdrive_ros.ros.transport import DEFAULT_LATE_TOLERANCE_S

if TYPE_CHECKING:
    from flashdrive_ros.engine.engine import Reasoning

ODOMETRY_INPUT = "odometry"
IDLE_WAIT_S = 0.1


class PlanningEngine(Protocol):
    """What the node needs of flashdrive_ros.engine.engine.Engine."""

    def step(self, window: Window) -> Plan: ...

    def reason(self, window: Window, detach: bool = False) -> Reasoning: ...

    def act(self, reasoning: Reasoning) -> Plan: ...

    def reset(self) -> None: ...

    def warmup(self) -> None: ...


@dataclass(frozen=True)
class PlanRecord:
    """A finished plan, the image of the overlay camera at its t0 (or None), when it was
    finished (monotonic seconds) and its time base (how many time-base restarts came before
    its window)."""

    plan: Plan
    overlay_image: np.ndarray | None
    finished_at: float
    serial: int
    time_base: int = 0


class PlannerLoop:
    """Thread-safe input side (camera sets, odometry, faults) and a worker thread that runs
    `engine.step` on the newest window it can build whenever it is idle. A fault stays
    reported for at least FAULT_HOLD_S (input_health.py) so that periodic diagnostics see it.
    A plan that fails `check_plan` (NaN/inf, or beyond `limits`) never becomes the latest
    plan; it is counted, and `rejected_plan()` names it until the next usable plan.

    A window waits up to `late_tolerance_s` after its camera set arrived for the odometry to
    reach its t0 (published at the same time, it may come after the images, late by its
    transport), so that its ego history is interpolated rather than extrapolated, as the
    offline replay builds it.

    stay_streaming: plan windows on the frame grid of the last planned window (its t0 plus
    whole frame periods), so that each shares frames with it and streams instead of a full
    prefill: with cameras faster than the model's frame rate the newest set between two grid
    times waits for the next one; when the newest window shares no frame with the last
    planned window but the window one frame older does, plan that one, whose plan comes out
    sooner although its input is a frame older.

    act_apart: the worker reasons a window (encode, prefill, decode) and hands its action to
    an actor thread, then goes on to the next window while the actor runs the flow matching
    on copies of the cache (Engine.reason(detach=True)); the worker waits only while the actor
    is still busy with the window before. Plans are the same as with `engine.step`.

    worker_setup runs on the worker thread (and the actor thread) before its first window
    (per-thread settings such as the torch thread count); the values it returns are reported
    as planner extras.
    on_camera_set(stamps, images) gets each camera set a window may take, once it is in the
    window buffer: with streaming, those on the frame grid of the last planned window (before
    the first plan, sets at least a frame period apart); otherwise every set. Cameras faster
    than the model's frame rate so bring no encoding ahead that no window uses."""

    def __init__(self, engine: PlanningEngine, builder: WindowBuilder,
                 camera_names: list[str], overlay_index: int | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 limits: PlanLimits | None = None,
                 stay_streaming: bool = False,
                 act_apart: bool = False,
                 worker_setup: Callable[[], dict[str, object]] | None = None,
                 on_camera_set: Callable[[list[float], list[np.ndarray]], None] | None = None,
                 late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S) -> None:
        if len(camera_names) != builder.camera_count:
            raise ValueError(f"{len(camera_names)} camera names for a builder of "
                             f"{builder.camera_count} cameras")
        self.engine = engine
        self.builder = builder
        self.camera_names = list(camera_names)
        self.overlay_index = overlay_index
        self.clock = clock
        self.limits = limits
        self._rejected_plan: tuple[float, str] | None = None
        self.stay_streaming = stay_streaming
        self.act_apart = act_apart
        self.worker_setup = worker_setup
        self.on_camera_set = on_camera_set
        self.late_tolerance_s = late_tolerance_s
        self._inputs = InputHealthBook([*self.camera_names, ODOMETRY_INPUT], clock)
        self._health = PlannerHealth()
        self._latest: PlanRecord | None = None
        self._input_version = 0
        self._attempted: tuple[float, int] | None = None
        self._last_rejected: tuple[float, str] | None = None
        self._planned_t0 = -np.inf
        self._time_base = 0
        self._camera_set_at = -np.inf
        self._grid = FrameGrid(builder)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._actor: PlanActor | None = None

    def add_camera_set(self, stamps: list[float], images: list[np.ndarray]) -> None:
        """One synchronized image per camera (camera slot order)."""
        with self._wake:
            for camera, (stamp, rgb) in enumerate(zip(stamps, images)):
                self.builder.add_image(camera, stamp, rgb)
                self._inputs.ok(self.camera_names[camera], stamp)
            self._camera_set_at = self.clock()
            self._input_version += 1
            self._wake.notify()
        if self.on_camera_set is not None and self._hand_on(stamps[0]):
            self.on_camera_set(stamps, images)

    def _hand_on(self, stamp: float) -> bool:
        """Whether a camera set goes to on_camera_set (see the class docstring)."""
        if not self.stay_streaming:
            return True
        with self._lock:
            return self._grid.hands_on(stamp, self._planned_t0)

    def add_odometry(self, stamp: float, position, quaternion, linear_velocity,
                     fault: str = "") -> None:
        """A non-empty `fault` records the sample as bad; it is still handed to the builder,
        which refuses windows whose ego history spans it."""
        with self._wake:
            self.builder.add_odometry(stamp, position, quaternion, linear_velocity)
            if fault:
                self._inputs.fault(ODOMETRY_INPUT, fault)
            else:
                self._inputs.ok(ODOMETRY_INPUT, stamp)
            self._input_version += 1
            self._wake.notify()

    def note_fault(self, input_name: str, reason: str) -> None:
        with self._lock:
            self._inputs.fault(input_name, reason)

    def note_received(self, input_name: str) -> None:
        with self._lock:
            self._inputs.received(input_name)

    def set_extra(self, key: str, value: object) -> None:
        """An extra planner value reported on /diagnostics."""
        with self._lock:
            self._health.extra[key] = str(value)

    def note_silent(self, timeout_s: float,
                    hint: Callable[[str], str] | None = None) -> None:
        """Mark inputs that received nothing for `timeout_s` as silent; `hint(name)` may add
        why (e.g. whether the topic has publishers)."""
        with self._lock:
            silent = self._inputs.silent(timeout_s)
        for health, fault in silent:
            extra = hint(health.name) if hint is not None else ""
            with self._lock:
                health.fault = f"{fault}; {extra}" if extra else fault

    @property
    def time_base(self) -> int:
        """The time base windows are built on now (one more after every stamp jump)."""
        with self._lock:
            return self._time_base

    def latest(self) -> PlanRecord | None:
        with self._lock:
            return self._latest

    def rejected_plan(self) -> tuple[float, str] | None:
        """(t0, reason) of the newest plan that failed the checks, while no usable plan has
        followed it."""
        with self._lock:
            return self._rejected_plan

    def health(self) -> tuple[PlannerHealth, list[InputHealth]]:
        """Copies of the planner and input health."""
        with self._lock:
            planner = PlannerHealth(**vars(self._health))
            planner.rejections_by_code = dict(self._health.rejections_by_code)
            planner.full_prefills_by_reason = dict(self._health.full_prefills_by_reason)
            planner.extra = dict(self._health.extra)
            inputs = self._inputs.copies()
        return planner, inputs

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("planner loop already started")
        self._stop.clear()
        self.set_extra("act_apart", self.act_apart)
        if self.act_apart:
            self._actor = PlanActor(self.engine.act, self._act_done, self.worker_setup)
            self._actor.start()
        self._thread = threading.Thread(target=self._run, name="planner", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the worker after its current step (waits up to `timeout_s`)."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._actor is not None:
            self._actor.stop(timeout_s)
            self._actor = None
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise RuntimeError(f"planner worker did not stop within {timeout_s} s")
        self._thread = None

    def run_once(self) -> bool:
        """Build the newest window and plan it on the calling thread; False if there was
        nothing new to plan."""
        window = self._next_window()
        if window is None:
            return False
        self._plan(window)
        return True

    def _run(self) -> None:
        if self.worker_setup is not None:
            for key, value in self.worker_setup().items():
                self.set_extra(key, value)
        while not self._stop.is_set():
            with self._wake:
                wait_s = self._idle_wait()
                if wait_s > 0:
                    self._wake.wait(wait_s)
            if self._stop.is_set():
                break
            try:
                self.run_once()
            except Exception as exc:
                with self._lock:
                    self._health.engine_error = f"planner worker: {type(exc).__name__}: {exc}"

    def _newest_attempt_key(self) -> tuple[float, int] | None:
        t0 = self.builder.latest_t0()
        if t0 is None:
            return None
        if self.stay_streaming and np.isfinite(self._planned_t0) and \
                not self.builder.time_base_reset_pending:
            t0 = self._grid.window_t0(t0, self._planned_t0)
        return t0, self._input_version

    def _idle_wait(self) -> float:
        """Seconds the worker waits for new input before it tries again; 0: try now. Called
        with the lock held."""
        key = self._newest_attempt_key()
        if key is None or key == self._attempted:
            return IDLE_WAIT_S
        return self._settle_left(key[0])

    def _settle_left(self, t0: float) -> float:
        """How much longer a window at t0 waits for the odometry to reach t0."""
        if self.builder.odometry_reaches(t0):
            return 0.0
        return max(0.0, self._camera_set_at + self.late_tolerance_s - self.clock())

    def _next_window(self) -> Window | None:
        with self._lock:
            key = self._newest_attempt_key()
            if key is None or key == self._attempted or self._settle_left(key[0]) > 0:
                return None
            self._attempted = key
            if key[0] <= self._planned_t0 and not self.builder.time_base_reset_pending:
                return None
            result = self.builder.build(key[0])
            while isinstance(result, WindowRejection):
                self._note_rejection(key[0], result)
                if not result.time_base_reset:
                    return None
                self._planned_t0, self._latest = -np.inf, None
                result = self.builder.build(key[0])
            if result.time_base_reset:
                self._time_base += 1
            if self.builder.stand_ins:
                self._health.extra["frame_stand_ins"] = str(self.builder.stand_ins)
            return result

    def _note_rejection(self, t0: float, rejection: WindowRejection) -> None:
        self._health.last_rejection = f"{rejection.code}: {rejection.reason}"
        if rejection.time_base_reset or self._last_rejected != (t0, rejection.code):
            self._health.windows_rejected += 1
            counts = self._health.rejections_by_code
            counts[rejection.code] = counts.get(rejection.code, 0) + 1
            self._last_rejected = (t0, rejection.code)

    def _plan(self, window: Window) -> None:
        if self._actor is not None:
            self._reason_and_hand_off(window, self._actor)
            return
        try:
            plan = self.engine.step(window)
        except Exception as exc:
            self._plan_failed(window, f"{type(exc).__name__}: {exc}", engine_error=True)
            return
        problem = self._finish(window, plan)
        if problem:
            self._plan_failed(window, problem, engine_error=False)

    def _reason_and_hand_off(self, window: Window, actor: PlanActor) -> None:
        try:
            if actor.take_reset_request():
                self.engine.reset()
            reasoning = self.engine.reason(window, detach=True)
        except Exception as exc:
            self._plan_failed(window, f"{type(exc).__name__}: {exc}", engine_error=True)
            return
        with self._lock:
            self._planned_t0 = (window.t0 if window.time_base_reset
                                else max(self._planned_t0, window.t0))
            time_base = self._time_base
        actor.hand_off(window, reasoning, time_base)

    def _act_done(self, window: Window, plan: Plan | None, problem: str, time_base: int
                  ) -> bool:
        """The actor's report of a window reasoned under `time_base`; True: reset the engine
        before the next one. A plan whose time base was superseded meanwhile (stamps jumped)
        is dropped: its input is not on the clock the node now plans on."""
        if plan is not None:
            problem = self._finish(window, plan, advance_planned=False, time_base=time_base)
            if not problem:
                return False
        self._report_failure(window, problem, engine_error=plan is None)
        return True

    def _finish(self, window: Window, plan: Plan, advance_planned: bool = True,
                time_base: int | None = None) -> str:
        """Make a finished plan the latest unless `check_plan` finds a problem, which is
        returned ("" when none); `advance_planned` False where the worker advanced the
        planned t0 when it reasoned the window. A plan of a window reasoned under a
        `time_base` other than the current one is counted as superseded and dropped."""
        problem = check_plan(plan, self.limits)
        if problem:
            return problem
        overlay = None
        if self.overlay_index is not None:
            overlay = window.images[self.overlay_index, -1]
        with self._lock:
            health = self._health
            if time_base is not None and time_base != self._time_base:
                health.plans_superseded += 1
                return ""
            health.engine_error = ""
            health.windows_planned += 1
            if plan.full_prefill and plan.prefill_reason:
                counts = health.full_prefills_by_reason
                counts[plan.prefill_reason] = counts.get(plan.prefill_reason, 0) + 1
            self._rejected_plan = None
            if advance_planned:
                self._planned_t0 = (window.t0 if window.time_base_reset
                                    else max(self._planned_t0, window.t0))
            serial = (self._latest.serial + 1) if self._latest else 1
            self._latest = PlanRecord(plan, overlay, self.clock(), serial, self._time_base)
        return ""

    def _plan_failed(self, window: Window, problem: str, engine_error: bool) -> None:
        """Drop the streaming state (the next window is prefilled in full) and report."""
        try:
            self.engine.reset()
        except Exception as exc:
            problem += f"; reset failed: {type(exc).__name__}: {exc}"
            engine_error = True
        self._report_failure(window, problem, engine_error)

    def _report_failure(self, window: Window, problem: str, engine_error: bool) -> None:
        with self._lock:
            if engine_error:
                self._health.engine_error = problem
            else:
                self._health.plans_rejected += 1
                self._health.last_plan_rejection = problem
                self._rejected_plan = (window.t0, problem)
