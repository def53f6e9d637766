"""One replay run: options -> engines or the node -> per-mode results -> report and plots."""

from __future__ import annotations

from flashdrive_ros.engine.dtype_choice import resolve_dtype
from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.offline import (
    OfflineReplay,
    ReplayResults,
    ReplaySettings,
    check_camera_count,
)
from flashdrive_ros.eval.plots import write_plots
from flashdrive_ros.eval.replay_options import ReplayOptions, load_model_config
from flashdrive_ros.eval.report import write_report
from flashdrive_ros.eval.summary import compare_blocks, summarize
from flashdrive_ros.eval.through_ros import run_through_ros


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
                                               options.topics.cameras, bag.frame_ids) \
            + bag.input_notes()
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
    header["input_notes"] = replay.input_notes
    if node_stats is None:
        header.update(input_latency_ms=replay.input_latency_ms,
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
        replay, node_stats, overlays = run_through_ros(options)
    else:
        replay, node_stats, overlays = run_offline(options), None, []
    report = build_report(options, replay, node_stats)
    plots = write_plots(replay.results, options.out_dir, overlays) if options.plots else []
    write_report(options.out_dir, report, plots)
    return report
