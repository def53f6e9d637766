"""The drive node's outputs: on every control tick, publish the newest plan while it is
fresh, count ticks without a new plan, and report health on /diagnostics. Every finished
plan, fresh or late, also goes out once on ~/finished_plans (for recording and evaluation;
~/trajectory is the control output)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import cv2
import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Path
from sensor_msgs.msg import Image
from std_msgs.msg import Header, String
from visualization_msgs.msg import Marker, MarkerArray

from flashdrive_ros.ros import names
from flashdrive_ros.ros.convert import seconds_to_stamp
from flashdrive_ros.ros.diagnostics import build_diagnostics
from flashdrive_ros.ros.events import no_publisher_events
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.plan_msgs import (
    plan_to_finished_plan,
    plan_to_markers,
    plan_to_path,
    plan_to_reasoning,
)
from flashdrive_ros.ros.plan_sanity import stop_plan
from flashdrive_ros.ros.planner_loop import PlannerLoop, PlanRecord
from flashdrive_ros.ros.viz import PinholeCamera, render_overlay

DIAGNOSTICS_PERIOD_S = 0.5
INPUT_SILENT_S = 1.0
OVERLAY_MAX_WIDTH = 960


def plan_is_fresh(plan_t0: float, now_s: float, max_age_s: float) -> bool:
    """A plan may be published as valid while its input time is within max_age_s of now."""
    return math.isfinite(plan_t0) and abs(now_s - plan_t0) <= max_age_s


def fallback_state(rejected: tuple[float, str] | None, fresh_plan: bool, mode: str) -> str:
    """Which fallback is active after the newest plan failed the checks ('' when none):
    'hold: ...' while the last valid plan is fresh and mode is 'hold', else 'stop: ...'."""
    if rejected is None:
        return ""
    t0, reason = rejected
    if mode == "hold" and fresh_plan:
        return f"hold: last valid plan held; plan at t0 {t0:.3f} rejected: {reason}"
    return f"stop: plan at t0 {t0:.3f} rejected: {reason}"


class OutputPublishers:
    """Lifecycle publishers of the node's outputs and the per-tick publishing logic."""

    def __init__(self, node, params: DriveParams, num_waypoints: int, dt: float) -> None:
        """num_waypoints, dt: the shape of the model's trajectories (for the stop fallback)."""
        self.node = node
        self.params = params
        self.num_waypoints = num_waypoints
        self.dt = dt
        def publisher(msg_type, topic: str, depth: int):
            return node.create_lifecycle_publisher(msg_type, topic, depth,
                                                   event_callbacks=no_publisher_events())

        self.trajectory = publisher(Path, names.TRAJECTORY_TOPIC, 10)
        self.samples = publisher(MarkerArray, names.SAMPLES_TOPIC, 10)
        self.reasoning = publisher(String, names.REASONING_TOPIC, 10)
        self.finished_plans = publisher(MarkerArray, names.FINISHED_PLANS_TOPIC, 10)
        self.overlay = publisher(Image, names.OVERLAY_TOPIC, 2)
        self.diagnostics = publisher(DiagnosticArray, names.DIAGNOSTICS_TOPIC, 10)
        self._lock = threading.Lock()
        self._overlay_info: tuple[float, float, float, float, int, int] | None = None
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.ticks = 0
            self.skipped_ticks = 0
            self.consecutive_skipped = 0
            self.published_serial = 0
            self.was_valid = False
            self.fallback = ""
            self.last_diagnostics_s: float | None = None

    def set_camera_info(self, intrinsics: tuple[float, float, float, float, int, int]) -> None:
        with self._lock:
            self._overlay_info = intrinsics

    def destroy(self) -> None:
        for publisher in (self.trajectory, self.samples, self.reasoning, self.finished_plans,
                          self.overlay, self.diagnostics):
            self.node.destroy_lifecycle_publisher(publisher)

    def tick(self, loop: PlannerLoop, now_s: float, monotonic_s: float,
             silence_hint: Callable[[str], str] | None = None) -> None:
        """One control tick at node time now_s."""
        params = self.params
        record = loop.latest()
        with self._lock:
            self.ticks += 1
            new = record is not None and record.serial != self.published_serial
            if new:
                self.consecutive_skipped = 0
                self.published_serial = record.serial
            else:
                self.skipped_ticks += 1
                self.consecutive_skipped += 1
            valid = record is not None and plan_is_fresh(record.plan.t0, now_s,
                                                         params.max_plan_age_s)
            fallback = fallback_state(loop.rejected_plan(), valid, params.invalid_plan_fallback)
            valid = valid and not fallback.startswith("stop")
            became_invalid = self.was_valid and not valid
            self.was_valid = valid
            fallback_began = fallback != self.fallback
            self.fallback = fallback
        if new:
            self.finished_plans.publish(plan_to_finished_plan(record.plan, params.base_frame))
        if valid:
            self.trajectory.publish(plan_to_path(record.plan, params.base_frame))
            self.samples.publish(plan_to_markers(record.plan, params.base_frame))
            if new:
                self.reasoning.publish(plan_to_reasoning(record.plan))
                self._publish_overlay(record)
        elif fallback.startswith("stop"):
            stop = stop_plan(now_s, self.num_waypoints, self.dt, fallback)
            self.trajectory.publish(plan_to_path(stop, params.base_frame))
            self.samples.publish(plan_to_markers(stop, params.base_frame))
            if fallback_began:
                self.reasoning.publish(plan_to_reasoning(stop))
        else:
            self.trajectory.publish(Path(header=Header(stamp=seconds_to_stamp(now_s),
                                                       frame_id=params.base_frame)))
            if became_invalid:
                self.samples.publish(_delete_all(params.base_frame, now_s))
        if new or self.last_diagnostics_s is None or \
                monotonic_s - self.last_diagnostics_s >= DIAGNOSTICS_PERIOD_S:
            self.last_diagnostics_s = monotonic_s
            self.publish_diagnostics(loop, record, now_s, valid, silence_hint)

    def publish_diagnostics(self, loop: PlannerLoop, record: PlanRecord | None, now_s: float,
                            valid: bool, silence_hint: Callable[[str], str] | None = None
                            ) -> None:
        loop.note_silent(INPUT_SILENT_S, silence_hint)
        planner, inputs = loop.health()
        planner.plan = record.plan if record else None
        planner.plan_time_base = record.time_base if record else 0
        planner.plan_age_s = (now_s - record.plan.t0) if record else None
        planner.plan_valid = valid
        planner.fallback = self.fallback
        planner.ticks = self.ticks
        planner.skipped_ticks = self.skipped_ticks
        planner.consecutive_skipped_ticks = self.consecutive_skipped
        if self.params.overlay_camera and not self._has_overlay_intrinsics():
            planner.extra["overlay"] = "no intrinsics (no CameraInfo, overlay_intrinsics zero)"
        self.diagnostics.publish(build_diagnostics(self.node.get_name(), now_s, planner,
                                                   inputs, loop.clock()))

    def _has_overlay_intrinsics(self) -> bool:
        with self._lock:
            return any(self.params.overlay_intrinsics) or self._overlay_info is not None

    def _overlay_camera(self, width: int, height: int) -> PinholeCamera | None:
        params = self.params
        if any(params.overlay_intrinsics):
            return PinholeCamera.from_parameters(params.overlay_intrinsics,
                                                 params.overlay_extrinsic, width, height)
        with self._lock:
            info = self._overlay_info
        if info is None:
            return None
        return PinholeCamera.from_parameters(info[:4], params.overlay_extrinsic, info[4], info[5])

    def _publish_overlay(self, record: PlanRecord) -> None:
        image = record.overlay_image
        if image is None or self.overlay.get_subscription_count() == 0:
            return
        camera = self._overlay_camera(image.shape[1], image.shape[0])
        if camera is None:
            return
        if camera.width != image.shape[1] or camera.height != image.shape[0]:
            camera = camera.scaled_to(image.shape[1], image.shape[0])
        if image.shape[1] > OVERLAY_MAX_WIDTH:
            height = int(round(image.shape[0] * OVERLAY_MAX_WIDTH / image.shape[1]))
            image = cv2.resize(image, (OVERLAY_MAX_WIDTH, height), interpolation=cv2.INTER_AREA)
        rgb = render_overlay(image, camera, record.plan.trajectories, record.plan.coc_text)
        self.overlay.publish(rgb_to_image_msg(rgb, record.plan.t0, self.params.overlay_camera))


def rgb_to_image_msg(rgb: np.ndarray, stamp_s: float, frame_id: str) -> Image:
    """RGB uint8 [H, W, 3] -> sensor_msgs/Image (rgb8)."""
    height, width = rgb.shape[:2]
    return Image(header=Header(stamp=seconds_to_stamp(stamp_s), frame_id=frame_id),
                 height=height, width=width, encoding="rgb8", is_bigendian=0, step=width * 3,
                 data=np.ascontiguousarray(rgb).tobytes())


def _delete_all(frame_id: str, now_s: float) -> MarkerArray:
    return MarkerArray(markers=[Marker(header=Header(stamp=seconds_to_stamp(now_s),
                                                     frame_id=frame_id),
                                       action=Marker.DELETEALL)])
