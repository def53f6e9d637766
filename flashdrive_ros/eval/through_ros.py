"""Through-ROS replay: the real drive node in its own process, the bag played into it over
DDS (loopback, a domain of this process's own) and its outputs recorded, once per mode."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from flashdrive_ros.eval.bag import BagReader, unread_topic_notes
from flashdrive_ros.eval.bag_source import BagSource, bag_source
from flashdrive_ros.eval.dds_profile import (
    ENVIRONMENT,
    choose_dds_profile,
    dds_profile_environment,
)
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.images import NOT_SUBSCRIBED_TYPES, RAW_TYPE
from flashdrive_ros.eval.input_notes import transport_lines
from flashdrive_ros.eval.offline import LabelIndex, ReplayResults, check_camera_count
from flashdrive_ros.eval.recording import plan_results, read_recording
from flashdrive_ros.eval.replay_options import ReplayOptions, load_model_config
from flashdrive_ros.eval.skip_advice import skip_lines


def node_parameters(options: ReplayOptions, mode: str, raw_images: bool) -> dict:
    """drive_node parameters (DriveParams names) for one mode of this replay."""
    params = {
        "model_dir": str(options.model_dir.resolve()),
        "camera_topics": list(options.topics.cameras),
        "odom_topic": options.topics.odometry,
        "image_transport": "raw" if raw_images else "compressed",
        "image_reliability": "reliable",
        "control_rate_hz": float(options.control_rate_hz),
        "late_tolerance_s": float(options.late_tolerance_s),
        "num_samples": int(options.num_samples),
        "mode": mode,
        "device": options.device,
        "dtype": options.dtype,
        "backend": options.backend,
        **options.drafter_choice(),
    }
    if options.max_plan_age_s is not None:
        params["max_plan_age_s"] = float(options.max_plan_age_s)
    params.update(options.node_params)
    return params


def node_name() -> str:
    """A drive_node name of this process, so that another replay or node sharing the DDS
    domain is never driven or recorded by mistake."""
    return f"drive_node_replay_{os.getpid()}"


def run_mode(options: ReplayOptions, bag: list[Path], mode: str, raw_images: bool,
             domain_id: int):
    from flashdrive_ros.ros.harness.lifecycle_client import LifecycleError
    from flashdrive_ros.ros.harness.node_process import NodeProcess
    from flashdrive_ros.ros.harness.plan_recorder import SessionSettings, record_replay

    recorded = options.out_dir / f"recorded_{mode}"
    if recorded.exists():
        raise ReplayError(f"{recorded} exists; choose an empty --out directory")
    node = NodeProcess(node_name(), node_parameters(options, mode, raw_images), domain_id,
                       options.out_dir, autostart=False, file_stem=f"drive_node_{mode}")
    with node:
        settings = SessionSettings(rate=options.rate, node_name=node_name(),
                                   domain_id=domain_id,
                                   input_topics=[*options.topics.cameras,
                                                 options.topics.odometry],
                                   node_alive=node.alive, progress=options.progress)
        try:
            session = record_replay(bag, recorded, settings)
        except (LifecycleError, OSError) as exc:
            raise ReplayError(f"through-ROS replay ({mode}) failed: {exc}\n"
                              f"drive_node log ({node.log_file}):\n"
                              f"{node.log_tail()}") from None
    return recorded, session


def camera_transport(camera_names: list[str], topics: tuple[str, ...] | list[str],
                     played: dict[str, int], received: dict[str, int]) -> dict[str, dict]:
    """Per camera slot: its topic, the messages the player published on it and those the
    node counted as received."""
    return {name: {"topic": topic, "played": played.get(topic, 0),
                   "received": received.get(name, 0)}
            for name, topic in zip(camera_names, topics)}


def run_through_ros(options: ReplayOptions
                    ) -> tuple[ReplayResults, dict[str, dict], list[tuple[float, np.ndarray]]]:
    with bag_source(options.bag) as source:
        return replay_source_through_ros(options, source)


def replay_source_through_ros(options: ReplayOptions, source: BagSource
                              ) -> tuple[ReplayResults, dict[str, dict],
                                         list[tuple[float, np.ndarray]]]:
    from flashdrive_ros.ros import names
    from flashdrive_ros.ros.harness.loopback import loopback_domain_id
    from flashdrive_ros.ros.harness.node_process import log_tail
    from flashdrive_ros.ros.params import DriveParams

    options.out_dir.mkdir(parents=True, exist_ok=True)
    model = load_model_config(options.model_dir)
    check_camera_count(model, options.topics)
    with BagReader(source, options.topics) as bag:
        transports = {bag.image_types[t] for t in options.topics.cameras}
        foreign = {t: bag.image_types[t] for t in options.topics.cameras
                   if bag.image_types[t] in NOT_SUBSCRIBED_TYPES}
        if foreign:
            raise ReplayError(f"camera topics {foreign} have types drive_node does not "
                              f"subscribe (it takes H.264 / H.265 packets as "
                              f"sensor_msgs/CompressedImage with format h264 / h265); replay "
                              f"the bag offline (without --through-ros)")
        if len(transports) > 1:
            types = {t: bag.image_types[t] for t in options.topics.cameras}
            raise ReplayError(f"the camera topics mix {sorted(transports)} ({types}); "
                              f"drive_node subscribes one image_transport for all cameras")
        raw_images = transports == {RAW_TYPE}
        dds = choose_dds_profile(options.dds_profile, bag.largest_first_camera_message())
        end_s = bag.end_time
        track = OdometryTrack(bag.odometry())
        labels = LabelIndex(bag.labels(), 0.5 / options.control_rate_hz)
        unread = unread_topic_notes(bag.reader.unreadable)
    roles = {"trajectory": names.TRAJECTORY_TOPIC, "trajectory_samples": names.SAMPLES_TOPIC,
             "reasoning": names.REASONING_TOPIC, "finished_plans": names.FINISHED_PLANS_TOPIC,
             "overlay": names.OVERLAY_TOPIC, "diagnostics": names.DIAGNOSTICS_TOPIC}
    topics = {role: names.resolved(topic, node_name=node_name())
              for role, topic in roles.items()}
    defaults = DriveParams()
    max_plan_age_s = (defaults.max_plan_age_s if options.max_plan_age_s is None
                      else options.max_plan_age_s)
    replay = ReplayResults({}, {})
    replay.input_notes = source.all_notes() + unread + ([dds.note] if dds.note else [])
    camera_names = options.node_params.get("camera_names", defaults.camera_names)
    node_stats, overlays = {}, []
    for mode in options.modes:
        with dds_profile_environment(dds):
            recorded, session = run_mode(options, source.reader_paths(), mode, raw_images,
                                       loopback_domain_id())
        recording = read_recording(recorded, topics, end_s, node_name())
        results, skipped = plan_results(recording, track, labels,
                                        model.action.num_waypoints, model.action.dt)
        transport = {"dds_profile": str(dds.profile or ENVIRONMENT),
                     "camera_transport": camera_transport(
                         camera_names, options.topics.cameras, session.play.per_topic,
                         recording.node_stats["node_inputs_received"])}
        if not recording.plans:
            stats = recording.node_stats
            lost = "".join(f"\n{line}" for line in transport_lines(mode, transport))
            reasons = "\n".join(skip_lines(stats, through_ros=True)) or "  none reported"
            faults = "".join(f"\n  input {name}: {fault}"
                             for name, fault in sorted(stats["node_input_faults"].items()))
            raise ReplayError(f"drive_node ({mode}) finished no plan while "
                              f"{session.play.messages} messages were played (planner: "
                              f"{stats['node_planner_message'] or 'no diagnostics'}, windows "
                              f"rejected {stats['node_windows_rejected']}, last rejection "
                              f"{stats['node_last_rejection']}); the node's rejections:\n"
                              f"{reasons}\nthe node's input faults:{faults or ' none'}{lost}"
                              f"\nlog:\n"
                              f"{log_tail(options.out_dir / f'drive_node_{mode}.log')}")
        replay.results[mode], replay.skipped[mode] = results, skipped
        replay.ticks = max(replay.ticks, recording.node_stats["control_ticks"])
        node_stats[mode] = {**recording.node_stats, "max_plan_age_s": max_plan_age_s,
                            "recorded_bag": str(recorded),
                            "played_messages": session.play.messages,
                            **transport,
                            "unplayable_topics": session.unplayable,
                            "playback_max_lateness_s": session.play.max_lateness_s,
                            "recorded_messages": recording.counts}
        overlays = overlays or recording.overlays
    return replay, node_stats, overlays
