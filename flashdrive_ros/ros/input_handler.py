"""What the drive node does with each input message, without rclpy: decoding with named
faults, stamp checks (a message up to max_reorder behind its stream's newest is dropped as
out of order; further back restarts the time base), approximate-time camera sync and
hand-over to the PlannerLoop.
Messages are read duck-typed (rclpy messages and rosbags-deserialized ones alike)."""

from __future__ import annotations

import math
import threading

from flashdrive_ros.ros.convert import (ConversionError, InvalidOrientation, NonFiniteValue,
                                        image_msg_to_rgb, odometry_arrays, odometry_to_sample,
                                        stamp_to_seconds)
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import ODOMETRY_INPUT, PlannerLoop
from flashdrive_ros.ros.sync import ApproximateTimeSynchronizer

OUT_OF_ORDER = "out_of_order"
TIME_BACKWARDS = "time_backwards"


class InputHandler:
    def __init__(self, params: DriveParams, loop: PlannerLoop) -> None:
        self.params = params
        self.loop = loop
        self.sync = ApproximateTimeSynchronizer(len(params.camera_names),
                                                params.sync_queue_size, params.sync_slop_s)
        self.sync.register_callback(self._on_camera_set)
        self._sync_lock = threading.Lock()
        self._last_received = [-math.inf] * len(params.camera_names)
        self._last_handed = [-math.inf] * len(params.camera_names)
        self._last_odometry_stamp = -math.inf
        self.late_sets_dropped = 0
        self.max_reorder = loop.builder.limits.max_reorder

    def clear(self) -> None:
        self.sync.clear()

    def _stamp_order(self, name: str, stamp: float, newest: float) -> str:
        """"" for a stamp at or after its stream's newest; OUT_OF_ORDER (drop it) up to
        max_reorder behind it, TIME_BACKWARDS further back; faults are noted on `name`."""
        if newest - self.max_reorder <= stamp < newest:
            self.loop.note_fault(name, f"{OUT_OF_ORDER}: stamp {stamp:.3f} arrived after "
                                       f"{newest:.3f}; dropped")
            return OUT_OF_ORDER
        if stamp < newest:
            self.loop.note_fault(name, f"{TIME_BACKWARDS}: stamp went back from "
                                       f"{newest:.3f} to {stamp:.3f}")
            return TIME_BACKWARDS
        return ""

    def on_image(self, index: int, msg) -> None:
        name = self.params.camera_names[index]
        self.loop.note_received(name)
        try:
            stamp = stamp_to_seconds(msg.header.stamp)
            rgb = image_msg_to_rgb(msg)
        except ConversionError as exc:
            self.loop.note_fault(name, f"{exc.reason}: {exc}")
            return
        with self._sync_lock:
            order = self._stamp_order(name, stamp, self._last_received[index])
            if order == OUT_OF_ORDER:
                return
            if order == TIME_BACKWARDS:
                self.sync.clear()
                self._last_handed = [-math.inf] * len(self._last_handed)
            self._last_received[index] = stamp
            self.sync.add(index, (stamp, rgb), stamp_ns=round(stamp * 1e9))

    def _on_camera_set(self, *items) -> None:
        stamps = [stamp for stamp, _ in items]
        if any(s < last for s, last in zip(stamps, self._last_handed)):
            self.late_sets_dropped += 1
            self.loop.set_extra("late_camera_sets_dropped", self.late_sets_dropped)
            return
        self._last_handed = stamps
        self.loop.add_camera_set(stamps, [rgb for _, rgb in items])

    def on_odometry(self, msg) -> None:
        self.loop.note_received(ODOMETRY_INPUT)
        frame = msg.header.frame_id
        try:
            stamp = stamp_to_seconds(msg.header.stamp)
        except ConversionError as exc:
            self.loop.note_fault(ODOMETRY_INPUT, f"{exc.reason}: {exc}")
            return
        if frame and frame != self.params.odom_frame:
            self.loop.note_fault(ODOMETRY_INPUT, f"frame: odometry frame_id {frame!r} is not "
                                                 f"odom_frame {self.params.odom_frame!r}")
            return
        if self._stamp_order(ODOMETRY_INPUT, stamp, self._last_odometry_stamp) == OUT_OF_ORDER:
            return
        self._last_odometry_stamp = stamp
        try:
            sample = odometry_to_sample(msg)
        except (NonFiniteValue, InvalidOrientation) as exc:
            arrays = odometry_arrays(msg)
            self.loop.add_odometry(stamp, arrays["position"], arrays["orientation"],
                                   arrays["linear velocity"], fault=f"{exc.reason}: {exc}")
            return
        self.loop.add_odometry(sample.stamp, sample.position, sample.quaternion, sample.linear)
