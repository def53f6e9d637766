"""The options of one replay run and their checks."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from flashdrive_ros.engine.dtype_choice import DTYPE_CHOICES
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.model.config import ConfigError, ModelConfig
from flashdrive_ros.model.drafter_name import drafter_name_problem
from flashdrive_ros.ros.transport import DEFAULT_LATE_TOLERANCE_S

MODE_RUNS = {"flashdrive": ("flashdrive",), "baseline": ("baseline",),
             "compare": ("baseline", "flashdrive")}
BACKEND_CHOICES = ("torch", "tensorrt")


@dataclass
class ReplayOptions:
    bag: Path
    model_dir: Path
    out_dir: Path
    mode: str = "flashdrive"
    topics: TopicMapping = field(default_factory=TopicMapping)
    through_ros: bool = False
    rate: float = 1.0
    num_samples: int = 6
    device: str = "auto"
    dtype: str = "auto"
    backend: str = "torch"
    drafter_file: str | None = None
    control_rate_hz: float = 10.0
    late_tolerance_s: float = DEFAULT_LATE_TOLERANCE_S
    max_plan_age_s: float | None = None
    max_windows: int | None = None
    progress: bool = True
    plots: bool = True
    node_params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bag, self.model_dir, self.out_dir = (Path(self.bag), Path(self.model_dir),
                                                  Path(self.out_dir))
        if self.mode not in MODE_RUNS:
            raise ReplayError(f"mode must be one of {sorted(MODE_RUNS)}, got {self.mode!r}")
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ReplayError(f"--rate must be > 0, got {self.rate}")
        if self.num_samples < 1:
            raise ReplayError(f"--num-samples must be >= 1, got {self.num_samples}")
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ReplayError(f"--device must be auto, cpu or cuda[:N], got {self.device!r}")
        if self.dtype not in DTYPE_CHOICES:
            raise ReplayError(f"--dtype must be one of {DTYPE_CHOICES}, got {self.dtype!r}")
        if self.backend not in BACKEND_CHOICES:
            raise ReplayError(f"--backend must be one of {BACKEND_CHOICES}, got "
                              f"{self.backend!r}")
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

    def drafter_choice(self) -> dict[str, str]:
        """{"drafter_file": name} when one was chosen; else {} (the engine's default)."""
        return {} if self.drafter_file is None else {"drafter_file": self.drafter_file}

    @property
    def modes(self) -> tuple[str, ...]:
        return MODE_RUNS[self.mode]

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"


def node_params_problem(node_params: dict, through_ros: bool) -> str | None:
    """Why `node_params` (drive_node parameters given with --node-param) cannot be used, or
    None. The replay sets the model, topics, transport, mode, device and sample count itself."""
    from flashdrive_ros.ros.params import DriveParams, ParameterError

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
