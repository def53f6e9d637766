"""Through-ROS replay: the real drive node in its own process, the bag played into it over
DDS (loopback, a domain of this process's own) and its outputs recorded, once per mode."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.images import RAW_TYPE
from flashdrive_ros.eval.offline import LabelIndex, ReplayResults, check_camera_count
from flashdrive_ros.eval.recording import plan_results, read_recording
from flashdrive_ros.eval.replay import ReplayOptions, load_model_config

STOP_TIMEOUT_S = 15.0
LOG_TAIL_CHARS = 3000


def node_parameters(options: ReplayOptions, mode: str, raw_images: bool) -> dict:
    """drive_node parameters (DriveParams names) for one mode of this replay."""
    params = {
        "use_sim_time": True,
        "model_dir": str(options.model_dir.resolve()),
        "camera_topics": list(options.topics.cameras),
        "odom_topic": options.topics.odometry,
        "image_transport": "raw" if raw_images else "compressed",
        "image_reliability": "reliable",
        "control_rate_hz": float(options.control_rate_hz),
        "num_samples": int(options.num_samples),
        "mode": mode,
        "device": options.device,
        "dtype": options.dtype,
    }
    if options.max_plan_age_s is not None:
        params["max_plan_age_s"] = float(options.max_plan_age_s)
    if mode == "baseline":
        params.update(streaming=False, speculative=False, cached_velocity=False,
                      cuda_graphs=False)
    return {"/**": {"ros__parameters": params}}


def _log_tail(path: Path) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-LOG_TAIL_CHARS:]


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def node_name() -> str:
    """A drive_node name of this process, so that another replay or node sharing the DDS
    domain is never driven or recorded by mistake."""
    return f"drive_node_replay_{os.getpid()}"


def run_mode(options: ReplayOptions, mode: str, raw_images: bool, domain_id: int):
    from flashdrive_ros.ros.plan_recorder import (LifecycleError, SessionSettings,
                                                  record_replay)

    out = options.out_dir
    params_file = out / f"drive_node_{mode}.yaml"
    params_file.write_text(yaml.safe_dump(node_parameters(options, mode, raw_images)))
    log_file = out / f"drive_node_{mode}.log"
    recorded = out / f"recorded_{mode}"
    if recorded.exists():
        raise ReplayError(f"{recorded} exists; choose an empty --out directory")
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain_id),
               ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST", PYTHONUNBUFFERED="1")
    env.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    command = [sys.executable, "-m", "flashdrive_ros.ros.node", "--ros-args",
               "--params-file", str(params_file), "-r", f"__node:={node_name()}"]
    with open(log_file, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    settings = SessionSettings(rate=options.rate, node_name=node_name(), domain_id=domain_id,
                               input_topics=[*options.topics.cameras, options.topics.odometry],
                               node_alive=lambda: process.poll() is None,
                               progress=options.progress)
    try:
        session = record_replay(options.bag, recorded, settings)
    except (LifecycleError, OSError) as exc:
        raise ReplayError(f"through-ROS replay ({mode}) failed: {exc}\n"
                          f"drive_node log ({log_file}):\n{_log_tail(log_file)}") from None
    finally:
        _stop(process)
    return recorded, session


def run_through_ros(options: ReplayOptions
                    ) -> tuple[ReplayResults, dict[str, dict], list[tuple[float, np.ndarray]]]:
    from flashdrive_ros.ros import names
    from flashdrive_ros.ros.loopback import process_domain_id
    from flashdrive_ros.ros.params import DriveParams

    options.out_dir.mkdir(parents=True, exist_ok=True)
    model = load_model_config(options.model_dir)
    check_camera_count(model, options.topics)
    with BagReader(options.bag, options.topics) as bag:
        raw_images = {bag.image_types[t] for t in options.topics.cameras} == {RAW_TYPE}
        end_s = bag.end_time
        track = OdometryTrack(bag.odometry())
        labels = LabelIndex(bag.labels(), 0.5 / options.control_rate_hz)
    roles = {"trajectory": names.TRAJECTORY_TOPIC, "trajectory_samples": names.SAMPLES_TOPIC,
             "reasoning": names.REASONING_TOPIC, "finished_plans": names.FINISHED_PLANS_TOPIC,
             "overlay": names.OVERLAY_TOPIC, "diagnostics": names.DIAGNOSTICS_TOPIC}
    topics = {role: names.resolved(topic, node_name=node_name())
              for role, topic in roles.items()}
    max_plan_age_s = (DriveParams().max_plan_age_s if options.max_plan_age_s is None
                      else options.max_plan_age_s)
    replay = ReplayResults({}, {})
    node_stats, overlays = {}, []
    for mode in options.modes:
        recorded, session = run_mode(options, mode, raw_images, process_domain_id())
        recording = read_recording(recorded, topics, end_s, node_name())
        results, skipped = plan_results(recording, track, labels,
                                        model.action.num_waypoints, model.action.dt)
        if not recording.plans:
            stats = recording.node_stats
            raise ReplayError(f"drive_node ({mode}) finished no plan while "
                              f"{session.play.messages} messages were played (planner: "
                              f"{stats['node_planner_message'] or 'no diagnostics'}, windows "
                              f"rejected {stats['node_windows_rejected']}, last rejection "
                              f"{stats['node_last_rejection']}); log:\n"
                              f"{_log_tail(options.out_dir / f'drive_node_{mode}.log')}")
        replay.results[mode], replay.skipped[mode] = results, skipped
        replay.ticks = max(replay.ticks, recording.node_stats["control_ticks"])
        node_stats[mode] = {**recording.node_stats, "max_plan_age_s": max_plan_age_s,
                            "recorded_bag": str(recorded),
                            "played_messages": session.play.messages,
                            "unplayable_topics": session.unplayable,
                            "playback_max_lateness_s": session.play.max_lateness_s,
                            "recorded_messages": recording.counts}
        overlays = overlays or recording.overlays
    return replay, node_stats, overlays
