"""One replay run: options -> engines or the node -> per-mode results -> report and plots."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from flashdrive_ros.engine.dtype_choice import DTYPE_CHOICES, resolve_dtype
from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.offline import (OfflineReplay, ReplayResults, ReplaySettings,
                                         check_camera_count)
from flashdrive_ros.eval.plots import write_plots
from flashdrive_ros.eval.report import write_report
from flashdrive_ros.eval.summary import compare_blocks, summarize
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


def check_backend(options: ReplayOptions) -> None:
    """The tensorrt backend needs a CUDA device and the TensorRT Python bindings."""
    if options.backend != "tensorrt":
        return
    from flashdrive_ros.backends.tensorrt_import import TensorRTUnavailable, require_tensorrt

    if not options.resolved_device().startswith("cuda"):
        raise ReplayError(f"--backend tensorrt needs a CUDA device, got "
                          f"{options.resolved_device()!r}")
    try:
        require_tensorrt()
    except TensorRTUnavailable as exc:
        raise ReplayError(str(exc)) from None


def load_model_config(model_dir: Path) -> ModelConfig:
    if not model_dir.is_dir():
        raise ReplayError(f"model directory not found: {model_dir}")
    try:
        return ModelConfig.load(model_dir / "config.json")
    except ConfigError as exc:
        raise ReplayError(str(exc)) from None


def load_engines(options: ReplayOptions) -> dict:
    from flashdrive_ros.engine.config import EngineConfig
    from flashdrive_ros.engine.engine import Engine

    device = options.resolved_device()
    dtype = resolve_dtype(options.dtype, device)
    engines = {}
    for mode in options.modes:
        config = EngineConfig(mode=mode, num_samples=options.num_samples, device=device,
                              dtype=dtype, backend=options.backend, **options.drafter_choice())
        try:
            engine = Engine.load(options.model_dir, config)
        except (ValueError, OSError) as exc:
            raise ReplayError(f"cannot load the {mode} engine from {options.model_dir}: "
                              f"{exc}") from None
        engine.warmup()
        engines[mode] = engine
    return engines


def run_offline(options: ReplayOptions) -> ReplayResults:
    with BagReader(options.bag, options.topics) as bag:
        model = load_model_config(options.model_dir)
        check_camera_count(model, options.topics)
        bag.reduce_images_to((model.prompt.image_height, model.prompt.image_width))
        engines = load_engines(options)
        settings = ReplaySettings(control_rate_hz=options.control_rate_hz,
                                  late_tolerance_s=options.late_tolerance_s,
                                  max_windows=options.max_windows, progress=options.progress)
        replay = OfflineReplay(bag, engines, model, settings).run()
        replay.input_latency_ms = {topic: stats.summary()
                                   for topic, stats in sorted(bag.latency.items())}
        replay.input_notes = camera_slot_notes(list(model.prompt.camera_names),
                                               options.topics.cameras, bag.frame_ids)
        return replay


def camera_slot_notes(slots: list[str], topics: tuple[str, ...] | list[str],
                      frame_ids: dict[int, str]) -> list[str]:
    """Camera slot warnings: a slot whose topic or first frame_id names another slot's
    camera."""
    from flashdrive_ros.ros.camera_slots import slot_mismatch

    notes = []
    for index, topic in enumerate(topics):
        for name in (topic, frame_ids.get(index, "")):
            if problem := slot_mismatch(slots, index, name):
                notes.append(f"camera slot: {problem}")
                break
    return notes


def build_report(options: ReplayOptions, replay: ReplayResults,
                 node_stats: dict[str, dict] | None = None) -> dict:
    """report.json content. Offline, deadline misses are the windows whose total latency
    exceeds the control period; through ROS, node_stats (from the node's diagnostics) holds
    them with the node's tick counters."""
    period_ms = 1000.0 / options.control_rate_hz
    blocks = {}
    for mode in options.modes:
        block = summarize(replay.results[mode], replay.skipped[mode], options.control_rate_hz)
        if node_stats is None:
            block["deadline_misses"] = sum(r.timings_ms.get("total", 0.0) > period_ms
                                           for r in replay.results[mode])
            block["deadline_misses_source"] = "windows with total latency over the period"
            block["control_rate_held"] = block["within_control_period"]
        else:
            block.update(node_stats[mode])
        blocks[mode] = block
    header = {"bag": str(options.bag), "model_dir": str(options.model_dir),
              "mode": options.mode, "through_ros": options.through_ros,
              "control_rate_hz": options.control_rate_hz, "num_samples": options.num_samples,
              "device": options.resolved_device(),
              "dtype": resolve_dtype(options.dtype, options.resolved_device()),
              "backend": options.backend,
              "ticks": replay.ticks,
              "late_tolerance_s": options.late_tolerance_s,
              "topics": {"cameras": list(options.topics.cameras),
                         "odometry": options.topics.odometry, "labels": options.topics.labels}}
    if node_stats is None:
        header.update(input_latency_ms=replay.input_latency_ms, input_notes=replay.input_notes,
                      frame_stand_ins=replay.frame_stand_ins)
    if len(blocks) == 1:
        return {**header, **blocks[options.mode]}
    comparison = compare_blocks(blocks["baseline"], blocks["flashdrive"])
    top = {k: v for k, v in blocks["flashdrive"].items() if k != "per_window"}
    return {**header, **top, "modes": blocks,
            "speedup_total_p50": comparison["speedup_total_p50"], "comparison": comparison}


def run_replay(options: ReplayOptions) -> dict:
    check_backend(options)
    if options.through_ros:
        from flashdrive_ros.eval.through_ros import run_through_ros

        replay, node_stats, overlays = run_through_ros(options)
    else:
        replay, node_stats, overlays = run_offline(options), None, []
    report = build_report(options, replay, node_stats)
    plots = write_plots(replay.results, options.out_dir, overlays) if options.plots else []
    write_report(options.out_dir, report, plots)
    return report
