"""The drive node's parameters: one validated dataclass is the single source of truth for
names, types, defaults, descriptions and ranges; `declare_parameters` puts them on a node."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashdrive_ros import default_names as topics
from flashdrive_ros.engine.config import EngineConfig, device_problem
from flashdrive_ros.engine.dtype_choice import DTYPE_CHOICES
from flashdrive_ros.engine.window import WindowLimits
from flashdrive_ros.model.drafter_name import drafter_name_problem
from flashdrive_ros.ros.transport import DEFAULT_LATE_TOLERANCE_S
from flashdrive_ros.settings import derived, setting

CHOICES_TRANSPORT = ("compressed", "raw")
CHOICES_RELIABILITY = ("best_effort", "reliable")
CHOICES_FALLBACK = ("hold", "stop")
OVERLAY_CAMERA = "camera_front_wide_120fov"
OVERLAY_EXTRINSIC = (1.9, 0.0, 1.6, 0.0, math.radians(4.0), 0.0)  # the sim rig front-wide mount


class ParameterError(ValueError):
    """A parameter value is out of range or inconsistent with the others."""


@dataclass
class DriveParams:
    model_dir: str = setting(
        "", "Model directory (config.json, safetensors, tokenizer.json); empty = the "
        "embedded default model.", read_only=True)
    camera_names: list[str] = setting(
        list(topics.CAMERA_NAMES), "Camera names; their order is the model's camera slot "
        "order.", read_only=True)
    camera_topics: list[str] = setting(
        [topics.camera_image_topic(n) for n in topics.CAMERA_NAMES],
        "Image topic per camera, same order as camera_names.", read_only=True)
    camera_info_topics: list[str] = setting(
        [topics.camera_info_topic(n) for n in topics.CAMERA_NAMES],
        "CameraInfo topic per camera, same order as camera_names.", read_only=True)
    camera_frame_ids: list[str] = setting(
        ["" for _ in topics.CAMERA_NAMES], "Expected image header frame_id per camera, same "
        "order as camera_names (all empty: none expected); an empty entry: the frame_id and "
        "topic must not name another slot's camera. A mismatch is warned about in the log "
        "and on /diagnostics.",
        read_only=True)
    image_transport: str = setting(
        "compressed", "compressed: sensor_msgs/CompressedImage (JPEG/PNG); raw: "
        "sensor_msgs/Image.", read_only=True, choices=CHOICES_TRANSPORT)
    serialized_images: bool = setting(
        True, "Camera messages are taken serialized and read from their CDR bytes: the "
        "header first, the pixels as a view of the buffer, so a frame dropped on its stamp "
        "costs no deserialization; false: rclpy deserializes every message. Applied at the "
        "next activate.")
    frame_gate: bool = setting(
        True, "Camera frames off the model's frame grid (cameras faster than its frame "
        "rate) are dropped on their stamp before they are decoded (counted on /diagnostics "
        "as camera_frames_off_grid); every frame is decoded while a camera loses more than "
        "a fifth of its frames in transport (frame_gate on /diagnostics). Applied at the "
        "next activate.")
    camera_thread: bool = setting(
        True, "Camera messages are decoded on a thread of their own, so odometry and timers "
        "do not wait behind image decoding on the executor thread (camera messages beyond a "
        "queue of eight per camera are dropped oldest first, counted on /diagnostics as "
        "camera_messages_behind); false: on the executor thread. Applied at the next "
        "activate.")
    image_reliability: str = setting(
        "best_effort", "QoS reliability of the camera subscriptions (SensorDataQoS depth "
        "otherwise); applied at the next activate.", choices=CHOICES_RELIABILITY)
    odom_topic: str = setting(topics.ODOMETRY_TOPIC, "nav_msgs/Odometry topic of the ego "
                            "vehicle.", read_only=True)
    control_rate_hz: float = setting(10.0, "Rate at which the newest plan is published; "
                                   "applied at the next activate.", minimum=0.5,
                                   maximum=100.0)
    sync_slop_s: float = setting(0.05, "Approximate-time sync: the largest stamp spread of one "
                               "camera set (exclusive); applied at the next activate.",
                               minimum=0.001, maximum=1.0)
    sync_queue_size: int = setting(10, "Approximate-time sync: messages kept per camera; "
                                 "applied at the next activate.", minimum=1, maximum=100)
    late_tolerance_s: float = setting(
        DEFAULT_LATE_TOLERANCE_S, "How long a window waits, after its camera set arrived, "
        "for odometry sent late by its transport to reach the window's time (the measured "
        "latency per input is on /diagnostics); applied at the next activate.",
        minimum=0.0, maximum=1.0)
    frame_stand_in_s: float = setting(
        WindowLimits.frame_stand_in, "A window's frame may be missing (dropped in "
        "transport): the camera's nearest frame within this many seconds of the wanted time "
        "stands in (counted on /diagnostics); a camera silent longer skips the window. "
        "Applied at the next activate.", minimum=0.0, maximum=1.0)
    num_samples: int = derived(EngineConfig, "num_samples", maximum=64,
                               also="Applied at the next configure.")
    streaming: bool = setting(True, "Streaming KV cache (flashdrive mode only); applied at the "
                            "next configure.")
    speculative: bool = setting(True, "Speculative CoC decoding with the drafter (flashdrive "
                              "mode only); applied at the next configure.")
    cached_velocity: bool = setting(True, "Cached-velocity flow matching (flashdrive mode "
                                  "only); applied at the next configure.")
    cuda_graphs: bool = setting(True, "CUDA graphs for fixed-shape steps, used when the "
                              "device is CUDA, the backend torch and the mode flashdrive; "
                              "applied at the next configure.")
    rotated_keys: bool = setting(True, "The KV cache also keeps keys after RoPE, rotated once "
                               "per write instead of at every attention call; used when the "
                               "backend is torch and the mode flashdrive; applied at the next "
                               "configure.")
    padded_logits: bool = setting(True, "lm_head of the verify and draft rows with the rows "
                                "padded to a multiple of 8; used when the device is CUDA and "
                                "the mode flashdrive; applied at the next configure.")
    coc_reuse: bool = setting(True, "Speculative decoding drafts from the previous window's "
                            "CoC where the tokens committed so far match it (lossless); used "
                            "when speculative is on (else turned off with a warning in the "
                            "log); applied at the next configure.")
    staged_prefix: bool = setting(True, "Flow matching copies the backbone prefix's keys and "
                                "values once per plan into the action expert's buffers "
                                "instead of concatenating them at every layer of every "
                                "velocity call (the same plans); used in flashdrive mode; "
                                "applied at the next configure.")
    compiled_expert: bool = derived(EngineConfig, "compiled_expert",
                                    also="Used when cuda_graphs is used; applied at the next "
                                    "configure.")
    compiled_backbone: bool = derived(EngineConfig, "compiled_backbone",
                                      also="Used when cuda_graphs is used; applied at the next "
                                      "configure.")
    forward_only: bool = derived(EngineConfig, "forward_only",
                                 also="Applied at the next configure.")
    drafter_file: str = derived(EngineConfig, "drafter_file", read_only=True)
    mode: str = derived(EngineConfig, "mode", help="flashdrive: the shortcuts above; baseline: "
                        "every shortcut off.", also="Applied at the next configure.")
    device: str = setting("auto", "Torch device: auto (cuda when available, else cpu), cpu, "
                        "cuda or cuda:N.", read_only=True)
    backend: str = derived(EngineConfig, "backend", read_only=True)
    encode_ahead: bool = setting(True, "Encode each camera set on a thread of its own as it "
                               "arrives, so the planner worker finds its window's frames "
                               "encoded; applied at the next activate.")
    act_apart: bool = setting(True, "Run each plan's flow matching on a thread of its own on "
                            "copies of the cache while the worker reasons the next window "
                            "(used without CUDA graphs); applied at the next activate.")
    dtype: str = derived(EngineConfig, "dtype", default="auto", choices=DTYPE_CHOICES,
                         read_only=True, also="auto = bfloat16 on a CPU with native bf16 "
                         "arithmetic (AVX512-BF16 or AMX), float32 elsewhere.")
    cpu_threads: int = setting(0, "Torch intra-op threads of the planner worker on the CPU; "
                             "0 = every core this process may run on but one (at least 1), "
                             "leaving a core to the node's callbacks.",
                             read_only=True, minimum=0, maximum=256)
    base_frame: str = setting(topics.BASE_FRAME, "Frame of the published trajectory (ego "
                            "frame at the input time).")
    odom_frame: str = setting("", "Fixed odometry frame (frame_id of the odometry pose): "
                            "odometry in another frame is rejected with the reason on "
                            "/diagnostics; empty = the frame of the first odometry message "
                            "(reported on /diagnostics as odom_frame). Applied at the next "
                            "activate.")
    max_plan_age_s: float = setting(0.5, "A plan whose input is older than this (node clock) "
                                  "is not published as valid.", minimum=0.05, maximum=10.0)
    max_plan_accel_mps2: float = setting(12.0, "A plan whose |longitudinal acceleration| "
                                       "exceeds this is not published as valid.",
                                       minimum=0.5, maximum=100.0)
    max_plan_jerk_mps3: float = setting(60.0, "A plan whose |jerk| exceeds this is not "
                                      "published as valid.", minimum=0.5, maximum=1000.0)
    max_plan_curvature_1pm: float = setting(1.0, "A plan whose |curvature| (over steps of at "
                                          "least 5 cm) exceeds this is not published as "
                                          "valid.", minimum=0.01, maximum=10.0)
    invalid_plan_fallback: str = setting(
        "hold", "After a plan fails the checks (NaN/inf or beyond the limits): hold = keep "
        "publishing the last valid plan while it is younger than max_plan_age_s, then a stop "
        "trajectory; stop = publish the stop trajectory at once. Named on /diagnostics.",
        choices=CHOICES_FALLBACK)
    overlay_camera: str = setting(OVERLAY_CAMERA, "Camera whose image carries the "
                                "trajectory overlay on ~/overlay; empty = no overlay.")
    overlay_intrinsics: list[float] = setting(
        [0.0, 0.0, 0.0, 0.0], "Overlay intrinsics fx, fy, cx, cy in pixels; all zero = from "
        "the camera's CameraInfo K.")
    overlay_extrinsic: list[float] = setting(
        list(OVERLAY_EXTRINSIC), "Overlay camera pose in base_frame: x, y, z (m), "
        "roll, pitch, yaw (rad) of the camera body frame (x forward, y left, z up); default: the "
        "simulator's front-wide mount.")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            self._check_field(f, getattr(self, f.name))
        n = len(self.camera_names)
        if n == 0:
            raise ParameterError("camera_names must name at least one camera")
        if len(set(self.camera_names)) != n:
            raise ParameterError(f"camera_names has duplicates: {self.camera_names}")
        if any(self.camera_frame_ids) and len(self.camera_frame_ids) != n:
            raise ParameterError(f"camera_frame_ids has {len(self.camera_frame_ids)} "
                                 f"entries, camera_names has {n} (all empty: none expected)")
        for name in ("camera_topics", "camera_info_topics"):
            if len(getattr(self, name)) != n:
                raise ParameterError(f"{name} has {len(getattr(self, name))} entries, "
                                     f"camera_names has {n}")
        for name in ("camera_names", "camera_topics", "camera_info_topics"):
            if any(not s for s in getattr(self, name)):
                raise ParameterError(f"{name} holds an empty string")
        if self.image_transport == "raw" and any(
                t.rstrip("/").endswith("/compressed") for t in self.camera_topics):
            raise ParameterError("image_transport 'raw' subscribes sensor_msgs/Image, but "
                                 "camera_topics name '.../compressed' topics")
        if problem := drafter_name_problem(self.drafter_file):
            raise ParameterError(f"drafter_file {problem}")
        if not self.odom_topic or not self.base_frame:
            raise ParameterError("odom_topic and base_frame must not be empty")
        if self.overlay_camera and self.overlay_camera not in self.camera_names:
            raise ParameterError(f"overlay_camera {self.overlay_camera!r} is not in "
                                 f"camera_names {self.camera_names}")
        if len(self.overlay_intrinsics) != 4:
            raise ParameterError("overlay_intrinsics needs 4 values fx, fy, cx, cy")
        if any(self.overlay_intrinsics) and min(self.overlay_intrinsics[:2]) <= 0:
            raise ParameterError("overlay_intrinsics fx and fy must be > 0 (or all zero)")
        if len(self.overlay_extrinsic) != 6:
            raise ParameterError("overlay_extrinsic needs 6 values x, y, z, roll, pitch, yaw")
        if problem := device_problem(self.device, auto=True):
            raise ParameterError(problem)
        if self.model_dir and not Path(self.model_dir).expanduser().is_dir():
            raise ParameterError(f"model_dir {self.model_dir!r} is not a directory")

    @staticmethod
    def _check_field(f: dataclasses.Field, value: Any) -> None:
        kind = _base_type(f)
        if kind is list:
            item = float if "float" in str(f.type) else str
            if not isinstance(value, (list, tuple)) or not all(
                    isinstance(v, item) or (item is float and isinstance(v, int)
                                            and not isinstance(v, bool)) for v in value):
                raise ParameterError(f"{f.name} must be a list of {item.__name__}, got "
                                     f"{value!r}")
            if item is float and not all(math.isfinite(v) for v in value):
                raise ParameterError(f"{f.name} holds NaN or inf")
            return
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise ParameterError(f"{f.name} must be {kind.__name__}, got {value!r}")
        meta = f.metadata
        if meta["choices"] is not None and value not in meta["choices"]:
            raise ParameterError(f"{f.name} must be one of {meta['choices']}, got {value!r}")
        if kind in (int, float):
            if not math.isfinite(value):
                raise ParameterError(f"{f.name} must be finite, got {value}")
            if meta["minimum"] is not None and value < meta["minimum"]:
                raise ParameterError(f"{f.name} = {value} is below {meta['minimum']}")
            if meta["maximum"] is not None and value > meta["maximum"]:
                raise ParameterError(f"{f.name} = {value} is above {meta['maximum']}")

    def expected_frame_id(self, index: int) -> str:
        """The configured frame_id of camera slot `index`; "" when none is."""
        ids = self.camera_frame_ids
        return ids[index] if len(ids) == len(self.camera_names) else ""

    @property
    def plan_limits(self):
        from flashdrive_ros.ros.plan_sanity import PlanLimits

        return PlanLimits(self.max_plan_accel_mps2, self.max_plan_jerk_mps3,
                          self.max_plan_curvature_1pm)

    @property
    def resolved_model_dir(self) -> Path:
        from flashdrive_ros.paths import default_model_dir

        return Path(self.model_dir).expanduser() if self.model_dir else default_model_dir()

    def replace(self, **changes: Any) -> DriveParams:
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))


def _base_type(f: dataclasses.Field) -> type:
    name = str(f.type)
    if name.startswith("list"):
        return list
    return {"str": str, "int": int, "float": float, "bool": bool}[name]


def descriptor_for(f: dataclasses.Field):
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

    meta = f.metadata
    descriptor = ParameterDescriptor(name=f.name, type=_parameter_type(f),
                                     description=meta["description"],
                                     read_only=meta["read_only"])
    if meta["choices"] is not None:
        descriptor.additional_constraints = "one of: " + ", ".join(meta["choices"])
    kind = _base_type(f)
    if kind is float and meta["minimum"] is not None:
        descriptor.floating_point_range = [FloatingPointRange(
            from_value=float(meta["minimum"]), to_value=float(meta["maximum"]), step=0.0)]
    if kind is int and meta["minimum"] is not None:
        descriptor.integer_range = [IntegerRange(
            from_value=int(meta["minimum"]), to_value=int(meta["maximum"]), step=1)]
    return descriptor


def _parameter_type(f: dataclasses.Field) -> int:
    from rcl_interfaces.msg import ParameterType

    kind = _base_type(f)
    if kind is list:
        return (ParameterType.PARAMETER_DOUBLE_ARRAY if "float" in str(f.type)
                else ParameterType.PARAMETER_STRING_ARRAY)
    return {str: ParameterType.PARAMETER_STRING, int: ParameterType.PARAMETER_INTEGER,
            float: ParameterType.PARAMETER_DOUBLE, bool: ParameterType.PARAMETER_BOOL}[kind]


def _default_value(f: dataclasses.Field):
    default = f.default_factory() if f.default is dataclasses.MISSING else f.default
    if _base_type(f) is float:
        return float(default)
    if _base_type(f) is list:
        return [float(v) for v in default] if "float" in str(f.type) else list(default)
    return default


def declare_parameters(node) -> None:
    """Declare every DriveParams field on `node` (skipping those already declared) with its
    descriptor; values come from overrides (--params-file, -p) or the defaults. rclpy raises
    on a value of the wrong type or outside the declared range."""
    for f in dataclasses.fields(DriveParams):
        if not node.has_parameter(f.name):
            node.declare_parameter(f.name, _default_value(f), descriptor_for(f))


def read_parameters(node) -> DriveParams:
    """The node's current values as a validated DriveParams (raises ParameterError)."""
    values = {name: node.get_parameter(name).value for name in DriveParams.field_names()}
    return DriveParams(**_plain(values))


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, (list, tuple)) or hasattr(v, "tolist") else v
            for k, v in values.items()}


def add_validation_callback(node, on_accepted=None):
    """Reject a parameter change that would make DriveParams invalid, with the reason;
    `on_accepted(params)` receives the DriveParams of an accepted change. Returns the
    callback handle."""
    from rcl_interfaces.msg import SetParametersResult

    def validate(changes) -> SetParametersResult:
        values = {name: node.get_parameter(name).value for name in DriveParams.field_names()}
        for parameter in changes:
            if parameter.name in values:
                values[parameter.name] = parameter.value
        try:
            params = DriveParams(**_plain(values))
        except (ParameterError, TypeError) as exc:
            return SetParametersResult(successful=False, reason=str(exc))
        if on_accepted is not None:
            on_accepted(params)
        return SetParametersResult(successful=True)

    return node.add_on_set_parameters_callback(validate)
