"""A closed-loop run: every variant on the same seeds, in process (engine with simulated
latency) or through ROS (the real drive node over DDS), then the report and pictures."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from flashdrive_ros.closed_loop.expert_planner import ExpertPlanner
from flashdrive_ros.closed_loop.collision_context import collision_context
from flashdrive_ros.closed_loop.bend_approach import bend_approach
from flashdrive_ros.closed_loop.light_waits import light_waits
from flashdrive_ros.closed_loop.plan_trace import plan_trace, write_plan_trace
from flashdrive_ros.closed_loop.report import write_report
from flashdrive_ros.closed_loop.runner import ClosedLoopDrive, DriveResult, DriveSettings
from flashdrive_ros.closed_loop.summary import variant_summary
from flashdrive_ros.closed_loop.variants import EXPERT, VARIANT_NAMES, load_engine
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.dtype_choice import DTYPE_CHOICES, resolve_dtype
from flashdrive_ros.eval.process_pool import map_in_processes
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.settings import derived, field_problems


@dataclass
class RunOptions:
    model_dir: Path
    out_dir: Path
    seeds: tuple[int, ...]
    variants: tuple[str, ...]
    drive: DriveSettings
    through_ros: bool = False
    num_samples: int = derived(EngineConfig, "num_samples", help="trajectory samples per "
                               "plan (the controller follows the first)")
    device: str = derived(EngineConfig, "device", help="cpu or cuda[:N]")
    dtype: str = derived(EngineConfig, "dtype", default="auto", choices=DTYPE_CHOICES)
    drafter_file: str | None = derived(EngineConfig, "drafter_file", default=None,
                                       help="drafter weights in the model directory "
                                       "(default: drafter.safetensors)")
    forward_only: bool = derived(EngineConfig, "forward_only")
    node_params: dict = field(default_factory=dict)
    rate: float = 1.0
    pictures: bool = True
    plan_trace: bool = False
    variant_latency_ms: dict[str, float] = field(default_factory=dict)
    workers: int = 1  # in process: drives run in this many processes at once
    threads_per_worker: int = 1  # torch / OpenCV threads of each drive's process (this one too)

    def __post_init__(self) -> None:
        self.model_dir, self.out_dir = Path(self.model_dir), Path(self.out_dir)
        if not self.seeds:
            raise ValueError("need at least one seed")
        unknown = [v for v in self.variants if v not in VARIANT_NAMES]
        if unknown or not self.variants:
            raise ValueError(f"unknown variants {unknown}; known: {VARIANT_NAMES}")
        if problems := field_problems(self):
            raise ValueError("; ".join(problems))
        if not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.through_ros and EXPERT in self.variants:
            raise ValueError("the expert reads the world: it runs in process only")
        if self.through_ros and self.drive.latency_ms is not None:
            raise ValueError("through ROS the latency is the node's own; --latency-ms is for "
                             "the in-process planner")
        if self.through_ros and self.variant_latency_ms:
            raise ValueError("through ROS the latency is the node's own; --latency-ms is for "
                             "the in-process planner")
        for name, value in self.variant_latency_ms.items():
            if name not in self.variants:
                raise ValueError(f"--latency-ms names {name!r}, not a variant of this run")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--latency-ms {name}: must be >= 0, got {value}")
        if self.node_params and not self.through_ros:
            raise ValueError("node parameters apply through ROS only")
        if self.workers < 1 or self.threads_per_worker < 1:
            raise ValueError(f"workers and threads_per_worker must be >= 1, got "
                             f"{self.workers}, {self.threads_per_worker}")
        if self.through_ros and self.workers > 1:
            raise ValueError("through ROS the drives run one at a time (one node, real "
                             "latency); --workers is for the in-process planner")

    @property
    def latency(self) -> str:
        if self.through_ros:
            return "real (drive_node over DDS)"
        fixed = [f"{name} {ms:g} ms" for name, ms in self.variant_latency_ms.items()]
        if self.drive.latency_ms is not None:
            fixed.append(f"{self.drive.latency_ms:g} ms")
        if not fixed:
            return "each plan's measured total"
        return "fixed: " + ", ".join(fixed) + " (others: each plan's measured total)"

    def settings_for(self, variant: str) -> DriveSettings:
        if variant not in self.variant_latency_ms:
            return self.drive
        return replace(self.drive, latency_ms=self.variant_latency_ms[variant])


_ENGINES: dict[tuple, object] = {}


def _engine(options: RunOptions, variant: str):
    """The variant's engine, loaded once per process."""
    key = (str(options.model_dir), variant, options.device, options.dtype,
           options.num_samples, options.drafter_file, options.forward_only)
    if key not in _ENGINES:
        dtype = resolve_dtype(options.dtype, options.device)
        _ENGINES[key] = load_engine(options.model_dir, variant, options.device, dtype,
                                    options.num_samples, options.drafter_file,
                                    options.forward_only)
    return _ENGINES[key]


def _drive_in_process(options: RunOptions, model: ModelConfig, variant: str,
                      seed: int) -> DriveResult:
    if variant == EXPERT:
        return ClosedLoopDrive(seed, ExpertPlanner, model, options.settings_for(variant),
                               variant).run()
    engine = _engine(options, variant)
    return ClosedLoopDrive(seed, lambda sim: engine, model, options.settings_for(variant),
                           variant).run()


def drive_metrics(job: tuple[str, int], options: RunOptions, model: ModelConfig) -> dict:
    """One (variant, seed) drive's metrics, the light read while waiting at a stop line among
    them; its top-down picture and plan trace written beside the report."""
    variant, seed = job
    if options.through_ros:
        from flashdrive_ros.closed_loop.through_ros import drive_through_ros

        result = drive_through_ros(options, model, variant, seed)
    else:
        result = _drive_in_process(options, model, variant, seed)
    metrics = dict(result.metrics)
    if options.pictures:
        from flashdrive_ros.closed_loop.topdown import draw_drive

        name = f"drive_{variant}_{seed}.png"
        draw_drive(result, options.out_dir / name)
        metrics["picture"] = name
    trace = plan_trace(result)
    metrics["light_waits"] = light_waits(trace)
    metrics["bend_approach"] = bend_approach(trace)
    metrics["collision_events"] = collision_context(metrics["collision_events"], trace,
                                                    result.plans)
    if options.plan_trace:
        name = f"plans_{variant}_{seed}.csv"
        write_plan_trace(trace, options.out_dir / name)
        metrics["plan_trace"] = name
    return metrics


def run(options: RunOptions) -> dict:
    model = ModelConfig.load(options.model_dir / "config.json")
    options.out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(variant, seed) for variant in options.variants for seed in options.seeds]
    drives = map_in_processes(partial(drive_metrics, options=options, model=model), jobs,
                              options.workers, options.threads_per_worker)
    report = {
        "model_dir": str(options.model_dir), "through_ros": options.through_ros,
        **options.drive.lengths(), "seeds": list(options.seeds),
        "variants_run": list(options.variants), "latency": options.latency,
        "num_samples": options.num_samples, "device": options.device,
        "forward_only": options.forward_only,
        "variants": {v: variant_summary([d for d in drives if d["variant"] == v])
                     for v in options.variants},
        "drives": drives}
    if "baseline" in options.variants and "flashdrive" in options.variants:
        report["flashdrive_vs_baseline"] = comparison(report["variants"]["baseline"],
                                                      report["variants"]["flashdrive"])
    write_report(options.out_dir, report)
    return report


def comparison(baseline: dict, flashdrive: dict) -> dict:
    """Per spread metric: flashdrive mean - baseline mean, and whether it lies within the
    larger of the two spreads over seeds."""
    out = {}
    for key in ("route_completion", "collisions", "red_light_violations", "off_road_s"):
        b, f = baseline[key], flashdrive[key]
        delta = f["mean"] - b["mean"]
        worse = delta < 0 if key == "route_completion" else delta > 0
        out[key] = {"delta": round(delta, 4),
                    "worse_beyond_spread": bool(worse and abs(delta) > max(b["std"], f["std"]))}
    return out
