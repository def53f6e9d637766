"""What the drive node does with each input message, without rclpy: camera frames off the
model's frame grid dropped on their stamp alone (a serialized message is read only as far as
its header), decoding (reduced to the model size) with named faults, stamp checks (a
message up to max_reorder behind its stream's newest is dropped as out of order; further
back restarts the time base), the latency of each input and stamps on another clock, the
odometry frame, camera slot sanity, approximate-time camera sync and hand-over to the
PlannerLoop. H.264 / H.265 packets (CompressedImage with a video format) are decoded every one,
per camera stream (ros/video_decode.py), and the frame gate then picks among their frames.
Messages are read duck-typed (rclpy messages and rosbags-deserialized ones alike)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from flashdrive_ros.ros.camera_slots import slot_mismatch
from flashdrive_ros.ros.cdr_image import (
    UnsupportedEncapsulation,
    image_header,
    read_compressed,
    read_image,
)
from flashdrive_ros.ros.convert import (
    ConversionError,
    InvalidOrientation,
    NonFiniteValue,
    image_msg_to_rgb,
    odometry_arrays,
    odometry_to_sample,
    stamped_seconds,
)
from flashdrive_ros.ros.frame_gate import FrameGate
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import ODOMETRY_INPUT, PlannerLoop
from flashdrive_ros.ros.raw_encodings import alias_note
from flashdrive_ros.ros.sync import ApproximateTimeSynchronizer
from flashdrive_ros.ros.transport import LatencyStats, clock_problem
from flashdrive_ros.ros.video_decode import VideoStream, frame_rgb, video_codec

OUT_OF_ORDER = "out_of_order"
TIME_BACKWARDS = "time_backwards"
LATENCY_REPORT_EVERY = 10
OFF_GRID_EXTRA = "camera_frames_off_grid"
GATE_EXTRA = "frame_gate"
GATE_OPENINGS_EXTRA = "frame_gate_openings"
ENCODING_EXTRA = "encoding."


class InputHandler:
    """image_size (height, width): images are reduced to it on arrival (None: kept as
    decoded). now: the node clock in seconds (None: no latency measurement). warn: the node
    log's warning (each distinct warning once). frame_gate: drop camera frames off the
    model's frame grid before decoding them (FrameGate). deserialize(buffer): the message
    of a serialized image that is not plain CDR (None: such a message is a fault)."""

    def __init__(self, params: DriveParams, loop: PlannerLoop,
                 image_size: tuple[int, int] | None = None,
                 now: Callable[[], float] | None = None,
                 warn: Callable[[str], None] | None = None,
                 frame_gate: bool = False,
                 deserialize: Callable[[bytes], object] | None = None) -> None:
        self.params = params
        self.loop = loop
        self.reducer = ImageReducer(image_size) if image_size is not None else None
        builder = loop.builder
        self.gate = (FrameGate(len(params.camera_names), builder.frame_dt,
                               builder.limits.frame_tolerance, builder.limits.max_time_jump)
                     if frame_gate else None)
        self.deserialize = deserialize
        self._gate_state = ""
        self._gate_openings = 0
        self.now = now
        self.warn = warn
        self._warned: set[str] = set()
        self._noted: set[str] = set()
        self.latency = {name: LatencyStats() for name in [*params.camera_names,
                                                           ODOMETRY_INPUT]}
        self._clock_problem = ""
        self._clock_warned = False
        self.odom_frame = params.odom_frame
        self._slot_frames: list[str | None] = [None] * len(params.camera_names)
        self.videos: dict[int, VideoStream] = {}
        self.sync = ApproximateTimeSynchronizer(len(params.camera_names),
                                                params.sync_queue_size, params.sync_slop_s)
        self.sync.register_callback(self._on_camera_set)
        self._sync_lock = threading.Lock()
        self._last_received = [-math.inf] * len(params.camera_names)
        self._last_handed = [-math.inf] * len(params.camera_names)
        self._last_odometry_stamp = -math.inf
        self.late_sets_dropped = 0
        self.max_reorder = loop.builder.limits.max_reorder
        if self.odom_frame:
            loop.set_extra("odom_frame", f"{self.odom_frame} (odom_frame parameter)")
        for index, topic in enumerate(params.camera_topics):
            if not params.expected_frame_id(index):
                self._check_slot(index, topic)

    def clear(self) -> None:
        self.sync.clear()
        self.videos.clear()
        if self.gate is not None:
            self.gate.reset()

    def _warn_once(self, message: str) -> None:
        if self.warn is not None and message not in self._warned:
            self._warned.add(message)
            self.warn(message)

    def _check_slot(self, index: int, name: str) -> None:
        problem = slot_mismatch(self.params.camera_names, index, name,
                                self.params.expected_frame_id(index))
        if problem:
            self.loop.set_extra(f"camera_slot.{self.params.camera_names[index]}", problem)
            self._warn_once(f"camera slot: {problem}")

    def _note_latency(self, name: str, stamp: float) -> None:
        if self.now is None:
            return
        latency = self.now() - stamp
        stats = self.latency[name]
        stats.add(latency)
        if stats.count % LATENCY_REPORT_EVERY == 1:
            summary = stats.summary()
            self.loop.set_extra(f"input_latency_ms.{name}",
                                f"p50 {summary['p50_ms']}, p90 {summary['p90_ms']}, "
                                f"max {summary['max_ms']}")
        problem = clock_problem(latency)
        if problem != self._clock_problem:
            self._clock_problem = problem
            self.loop.set_extra("clock", problem or "ok")
            if problem and self.warn is not None and not self._clock_warned:
                self._clock_warned = True
                self.warn(problem)

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
        """A deserialized Image or CompressedImage of camera slot `index`."""
        self.loop.note_received(self.params.camera_names[index])
        self._route(index, msg)

    def _route(self, index: int, msg) -> None:
        """A CompressedImage holding a video packet (format h264 / h265) into its camera's
        stream; any other image through the frame gate to its decode."""
        fmt = getattr(msg, "format", None)
        if fmt is not None:
            try:
                codec = video_codec(str(fmt))
            except ConversionError as exc:
                self.loop.note_fault(self.params.camera_names[index], f"{exc.reason}: {exc}")
                return
            if codec is not None:
                self._take_video(index, msg.header, codec, msg.data)
                return
        self._take_image(index, getattr(msg, "header", None), lambda: self._decode(index, msg))

    def on_serialized_image(self, index: int, buffer) -> None:
        """The CDR bytes of an Image (CompressedImage with compressed transport) of camera
        slot `index`: only the header is read before the frame gate."""
        name = self.params.camera_names[index]
        self.loop.note_received(name)
        try:
            header, reader = image_header(buffer)
        except UnsupportedEncapsulation as exc:
            if self.deserialize is None:
                self.loop.note_fault(name, f"{exc.reason}: {exc}")
                return
            try:
                msg = self.deserialize(buffer)
            except Exception as error:
                self.loop.note_fault(name, f"{exc.reason}: {exc}; rclpy could not deserialize "
                                           f"it either: {type(error).__name__}: {error}")
                return
            self._route(index, msg)
            return
        except ConversionError as exc:
            self.loop.note_fault(name, f"{exc.reason}: {exc}")
            return
        if self.params.image_transport != "compressed":
            self._take_image(index, header,
                             lambda: self._decode(index, read_image(header, reader)))
            return
        try:
            compressed = read_compressed(header, reader)
        except ConversionError as exc:
            self.loop.note_fault(name, f"{exc.reason}: {exc}")
            return
        self._route(index, compressed)

    def note_dropped(self, index: int, msg) -> None:
        """A camera message of slot `index` that the node's own queue dropped (a serialized
        one read only as far as its stamp): the frame gate counts it as arrived, not as lost
        in transport."""
        try:
            header = msg.header if hasattr(msg, "header") else image_header(msg)[0]
            stamp = stamped_seconds(header.stamp)
        except ConversionError:
            return
        self._note_seen(index, stamp)

    def _note_seen(self, index: int, stamp: float) -> None:
        if self.gate is not None:
            with self._sync_lock:
                self.gate.note_seen(index, stamp)

    def _decode(self, index: int, msg) -> object:
        """The RGB image of `msg` at the model size; an encoding read as another one is
        noted once per camera on /diagnostics (encoding.<camera>) and in the log."""
        note = alias_note(str(getattr(msg, "encoding", "")))
        key = ENCODING_EXTRA + self.params.camera_names[index]
        if note and key not in self._noted:
            self._noted.add(key)
            self.loop.set_extra(key, note)
            self._warn_once(f"camera {self.params.camera_names[index]}: {note}")
        return image_msg_to_rgb(msg, self.reducer)

    def _stamp_checked(self, index: int, header) -> tuple[float, str] | None:
        """(stamp, order) of a camera message whose stamp is usable, after the slot and
        latency checks; None when it is dropped."""
        name = self.params.camera_names[index]
        frame_id = str(getattr(header, "frame_id", ""))
        if frame_id != self._slot_frames[index]:
            self._slot_frames[index] = frame_id
            self._check_slot(index, frame_id)
        try:
            stamp = stamped_seconds(header.stamp)
        except ConversionError as exc:
            self.loop.note_fault(name, f"{exc.reason}: {exc}")
            return None
        self._note_latency(name, stamp)
        order = self._stamp_order(name, stamp, self._last_received[index])
        return None if order == OUT_OF_ORDER else (stamp, order)

    def _take_video(self, index: int, header, codec: str, data) -> None:
        """Every packet of a video camera is decoded, in arrival order (a packet left out
        would corrupt the frames after it); the frames it completes go through the frame
        gate, converted to RGB at the model size only when taken. A packet dropped on its
        stamp leaves its stream waiting for the next keyframe; the gate counts a packet that
        brings no frame (withheld, or still in the decoder) as arrived."""
        checked = self._stamp_checked(index, header)
        if checked is None:
            return
        stamp, order = checked
        stream = self.videos.get(index)
        if stream is None or stream.codec != codec:
            stream = self.videos[index] = VideoStream(codec)
        elif order == TIME_BACKWARDS:
            stream.restart()
        output = stream.push(stamp, data)
        if output.problem:
            self.loop.note_fault(self.params.camera_names[index], f"video: {output.problem}")
        if not output.frames:
            self._note_seen(index, stamp)
        for k, (frame_stamp, frame) in enumerate(output.frames):
            self._hand_over(index, frame_stamp,
                            lambda frame=frame: frame_rgb(frame, self.reducer),
                            order if k == 0 else "")

    def _take_image(self, index: int, header, decode: Callable[[], object]) -> None:
        """Stamp checks and the frame gate on `header`, then `decode()` (the RGB image at
        the model size) into the camera sync."""
        checked = self._stamp_checked(index, header)
        if checked is not None:
            stamp, order = checked
            self._hand_over(index, stamp, decode, order)

    def _hand_over(self, index: int, stamp: float, decode: Callable[[], object],
                   order: str) -> None:
        """The frame gate on `stamp`, then `decode()` into the camera sync."""
        name = self.params.camera_names[index]
        for frame_stamp, frame_decode in self._admitted(index, stamp, decode, order):
            try:
                rgb = frame_decode()
            except ConversionError as exc:
                self.loop.note_fault(name, f"{exc.reason}: {exc}")
                continue
            with self._sync_lock:
                if order == TIME_BACKWARDS:
                    self.sync.clear()
                    self._last_handed = [-math.inf] * len(self._last_handed)
                    self._last_received[index] = frame_stamp
                self._last_received[index] = max(self._last_received[index], frame_stamp)
                self.sync.add(index, (frame_stamp, rgb), stamp_ns=round(frame_stamp * 1e9))

    def _admitted(self, index: int, stamp: float, decode: Callable[[], object], order: str
                  ) -> list[tuple[float, Callable[[], object]]]:
        """The frames of camera `index` to decode now (the frame gate's choice; without a
        gate this one); frames dropped are counted on /diagnostics."""
        if self.gate is None:
            return [(stamp, decode)]
        with self._sync_lock:
            if order == TIME_BACKWARDS:
                self.gate.reset()
            before = sum(self.gate.dropped)
            admitted = self.gate.admit(index, stamp, decode)
            dropped = sum(self.gate.dropped)
            lossy = self.gate.lossy()
        if dropped > before:
            self.loop.set_extra(OFF_GRID_EXTRA, dropped)
        state = "on" if lossy is None else (
            f"off while {self.params.camera_names[lossy[0]]} loses {lossy[1]:.0%} of its "
            f"frames in transport (every frame decoded)")
        if state != self._gate_state:
            if lossy is not None and not self._gate_state.startswith("off"):
                self._gate_openings += 1
                self.loop.set_extra(GATE_OPENINGS_EXTRA, self._gate_openings)
            self._gate_state = state
            self.loop.set_extra(GATE_EXTRA, state)
        return admitted

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
            stamp = stamped_seconds(msg.header.stamp)
        except ConversionError as exc:
            self.loop.note_fault(ODOMETRY_INPUT, f"{exc.reason}: {exc}")
            return
        self._note_latency(ODOMETRY_INPUT, stamp)
        if frame and not self.odom_frame:
            self.odom_frame = frame
            self.loop.set_extra("odom_frame", f"{frame} (first odometry message)")
        if frame and frame != self.odom_frame:
            origin = ("odom_frame parameter" if self.params.odom_frame
                      else "frame of the first odometry message")
            self.loop.note_fault(ODOMETRY_INPUT, f"frame: odometry frame_id {frame!r} is not "
                                                 f"{self.odom_frame!r} ({origin}); dropped")
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
