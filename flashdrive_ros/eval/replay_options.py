"""The options of one replay run and their checks."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from flashdrive_ros.engine.config import MODES, EngineConfig, device_problem
from flashdrive_ros.engine.dtype_choice import DTYPE_CHOICES, resolve_device
from flashdrive_ros.eval.dds_profile import AUTO, ENVIRONMENT
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.model.config import ConfigError, ModelConfig
from flashdrive_ros.model.drafter_name import drafter_name_problem
from flashdrive_ros.ros.params import DriveParams, ParameterError
from flashdrive_ros.ros.transport import DEFAULT_LATE_TOLERANCE_S
from flashdrive_ros.settings import derived, setting, value_problem

MODE_RUNS = {**{mode: (mode,) for mode in MODES}, "compare": ("baseline", "flashdrive")}
FLAGS = {"control_rate_hz": "--control-rate", "late_tolerance_s": "--late-tolerance"}


@dataclass
class ReplayOptions:
    bag: Path
    model_dir: Path
    out_dir: Path
    mode: str = setting("flashdrive", "engine modes run on the same windows",
                        choices=tuple(MODE_RUNS))
    topics: TopicMapping = field(default_factory=TopicMapping)
    through_ros: bool = False
    rate: float = 1.0  # playback speed through ROS (bag seconds per wall second)
    num_samples: int = derived(EngineConfig, "num_samples", default=6,
                               help="trajectory samples per window (minADE6 uses up to 6)")
    device: str = setting("auto", "auto, cpu or cuda[:N]")
    dtype: str = derived(EngineConfig, "dtype", default="auto", choices=DTYPE_CHOICES,
                         help="compute dtype (auto: bfloat16 on a CPU with native bf16, else "
                         "float32)")
    backend: str = derived(EngineConfig, "backend",
                           help="encoder and backbone steps in torch, or as TensorRT engines "
                           "(CUDA)")
    drafter_file: str | None = derived(EngineConfig, "drafter_file", default=None,
                                       help="drafter weights in the model directory for "
                                       "speculative decoding (default: drafter.safetensors)")
    control_rate_hz: float = derived(DriveParams, "control_rate_hz", minimum=None,
                                     maximum=None, help="windows per bag second")
    late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S
    max_plan_age_s: float | None = None  # drive_node parameter, through ROS only
    max_windows: int | None = None
    progress: bool = True
    plots: bool = True
    node_params: dict = field(default_factory=dict)  # drive_node parameters, through ROS only
    dds_profile: str | Path = AUTO  # through ROS: auto, environment or a Fast DDS XML file

    def __post_init__(self) -> None:
        self.bag, self.model_dir, self.out_dir = (Path(self.bag), Path(self.model_dir),
                                                  Path(self.out_dir))
        for f in dataclasses.fields(self):
            flag = FLAGS.get(f.name, "--" + f.name.replace("_", "-"))
            if problem := value_problem(flag, getattr(self, f.name), f.metadata):
                raise ReplayError(problem)
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ReplayError(f"--rate must be > 0, got {self.rate}")
        if problem := device_problem(self.device, auto=True):
            raise ReplayError(f"--{problem}")
        if self.drafter_file is not None and (
                problem := drafter_name_problem(self.drafter_file)):
            raise ReplayError(f"--drafter-file {problem}")
        if not (math.isfinite(self.control_rate_hz) and self.control_rate_hz > 0):
            raise ReplayError(f"--control-rate must be > 0, got {self.control_rate_hz}")
        if not (math.isfinite(self.late_tolerance_s) and 0 <= self.late_tolerance_s <= 0.5):
            raise ReplayError(f"--late-tolerance must be in [0, 0.5] s, got "
                              f"{self.late_tolerance_s}")
        if self.max_plan_age_s is not None and not self.through_ros:
            raise ReplayError("max_plan_age_s is a drive_node parameter: it applies through "
                              "ROS only")
        if self.max_windows is not None and self.max_windows < 1:
            raise ReplayError(f"--max-windows must be >= 1, got {self.max_windows}")
        if self.max_windows is not None and self.through_ros:
            raise ReplayError("--max-windows applies to the offline replay; through ROS the "
                              "whole bag is played")
        if problem := node_params_problem(self.node_params, self.through_ros):
            raise ReplayError(problem)
        if str(self.dds_profile) not in (AUTO, ENVIRONMENT):
            self.dds_profile = Path(self.dds_profile).resolve()
            if not self.through_ros:
                raise ReplayError("--dds-profile configures DDS: it applies through ROS only")
            if not self.dds_profile.is_file():
                raise ReplayError(f"--dds-profile {self.dds_profile} is not a file")
        else:
            self.dds_profile = str(self.dds_profile)

    def drafter_choice(self) -> dict[str, str]:
        """{"drafter_file": name} when one was chosen; else {} (the engine's default)."""
        return {} if self.drafter_file is None else {"drafter_file": self.drafter_file}

    @property
    def modes(self) -> tuple[str, ...]:
        return MODE_RUNS[self.mode]

    def resolved_device(self) -> str:
        return resolve_device(self.device)


def node_params_problem(node_params: dict, through_ros: bool) -> str | None:
    """Why `node_params` (drive_node parameters given with --node-param) cannot be used, or
    None. The replay sets the model, topics, transport, mode, device and sample count itself."""
    if not node_params:
        return None
    if not through_ros:
        return "--node-param sets drive_node parameters: it applies through ROS only"
    unknown = sorted(set(node_params) - set(DriveParams.field_names()))
    if unknown:
        return f"--node-param: {unknown} are not drive_node parameters"
    owned = sorted(set(node_params) & set(REPLAY_OWNED_PARAMS))
    if owned:
        return (f"--node-param: the replay sets {owned} itself; use "
                f"{', '.join(REPLAY_OWNED_PARAMS[k] for k in owned)}")
    try:
        DriveParams().replace(**node_params)
    except (ParameterError, TypeError) as exc:
        return f"--node-param: {exc}"
    return None


REPLAY_OWNED_PARAMS = {
    "model_dir": "--model-dir", "camera_topics": "--camera-topics or --topics-yaml",
    "odom_topic": "--odom-topic or --topics-yaml", "image_transport": "the bag's image type",
    "image_reliability": "(reliable during replay)", "control_rate_hz": "--control-rate",
    "num_samples": "--num-samples", "mode": "--mode", "device": "--device", "dtype": "--dtype",
    "backend": "--backend", "drafter_file": "--drafter-file",
}


def load_model_config(model_dir: Path) -> ModelConfig:
    if not model_dir.is_dir():
        raise ReplayError(f"model directory not found: {model_dir}")
    try:
        return ModelConfig.load(model_dir / "config.json")
    except ConfigError as exc:
        raise ReplayError(str(exc)) from None


def parse_node_params(items: list[str]) -> dict:
    """NAME=VALUE strings -> {name: YAML-parsed value}."""
    params = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ReplayError(f"--node-param wants NAME=VALUE, got {item!r}")
        try:
            params[name.strip()] = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ReplayError(f"--node-param {name}: {text!r} is not a YAML value ({exc})") \
                from None
    return params
