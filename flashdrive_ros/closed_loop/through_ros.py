"""A closed-loop drive through ROS: the real drive node in its own process (sim time,
loopback DDS), fed the rendered cameras (JPEG) and the odometry of the simulated ego as they
happen, paced against the wall clock by `rate`; the newest ~/trajectory it publishes is
tracked by the controller, so the latency is the node's own."""

from __future__ import annotations

import os
import time

from flashdrive_ros.closed_loop.controller import TrajectoryTracker, WorldPlan
from flashdrive_ros.closed_loop.metrics import DriveMonitor
from flashdrive_ros.closed_loop.runner import (DriveResult, handover_time, latency_summary,
                                               reference_progress)
from flashdrive_ros.closed_loop.variants import ENGINE_VARIANTS
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.sim.clock import SIM_EPOCH_NS, stamp_ns
from flashdrive_ros.sim.drive import FRAME_HZ, SUBSTEPS
from flashdrive_ros.sim.frames import encode_jpeg
from flashdrive_ros.sim.messages import TYPESTORE, compressed_image, odometry
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.topics import ODOMETRY_TOPIC, camera_image_topic

IMAGE_TYPE = "sensor_msgs/msg/CompressedImage"
ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
OWNED_PARAMS = ("model_dir", "camera_names", "camera_topics", "odom_topic", "image_transport",
                "image_reliability", "control_rate_hz", "num_samples", "mode", "device",
                "dtype", "drafter_file", "forward_only", *ENGINE_VARIANTS["streaming_only"])


def node_name() -> str:
    return f"drive_node_closed_loop_{os.getpid()}"


def node_parameters(options, model: ModelConfig, variant: str) -> dict:
    """drive_node parameters (DriveParams names) for `variant`; options.node_params may add
    any other parameter."""
    owned = sorted(set(options.node_params) & set(OWNED_PARAMS))
    if owned:
        raise ValueError(f"--node-param: the closed loop sets {owned} itself")
    names = list(model.prompt.camera_names)
    params = {"model_dir": str(options.model_dir.resolve()), "camera_names": names,
              "camera_topics": [camera_image_topic(n) for n in names],
              "odom_topic": ODOMETRY_TOPIC, "image_transport": "compressed",
              "image_reliability": "reliable", "control_rate_hz": float(FRAME_HZ),
              "num_samples": int(options.num_samples), "device": options.device,
              "dtype": options.dtype, "forward_only": options.forward_only,
              **ENGINE_VARIANTS[variant], **options.node_params}
    if options.drafter_file is not None:
        params["drafter_file"] = options.drafter_file
    unknown = sorted(set(params) - set(DriveParams.field_names()))
    if unknown:
        raise ValueError(f"--node-param: {unknown} are not drive_node parameters")
    try:
        DriveParams().replace(**params)
    except TypeError as exc:
        raise ValueError(f"--node-param: {exc}") from None
    return params


def _publish(player, topic: str, msgtype: str, msg) -> None:
    player.publishers[topic].publish(bytes(TYPESTORE.serialize_cdr(msg, msgtype)))


def drive_through_ros(options, model: ModelConfig, variant: str, seed: int) -> DriveResult:
    from flashdrive_ros.ros.harness.node_session import node_session
    from flashdrive_ros.ros.harness.trajectory_listener import TrajectoryListener

    settings = options.drive
    names = list(model.prompt.camera_names)
    specs = rig(tuple(names))
    topics = {camera_image_topic(n): IMAGE_TYPE for n in names}
    topics[ODOMETRY_TOPIC] = ODOMETRY_TYPE
    sim = settings.ego_world(seed)
    renderer = Renderer(sim.world, settings.width, settings.height, specs)
    tracker = TrajectoryTracker(settings.tracking)
    monitor = DriveMonitor(sim.world, sim.dt)
    handover = handover_time(model)
    poses: dict[int, object] = {}
    applied: list[WorldPlan] = []
    latencies_ms: list[float] = []
    current: WorldPlan | None = None
    last_stamp = None
    name = node_name()
    out_dir = options.out_dir / f"node_{variant}_{seed}"
    with node_session(name, node_parameters(options, model, variant), topics, out_dir,
                      options.rate) as session:
        listener = TrajectoryListener(session.feeder, name)
        deadline = time.monotonic() + 30.0
        while not listener.matched():
            if time.monotonic() > deadline:
                raise OSError(f"{name} publishes no trajectory; log:\n{session.node.log_tail()}")
            time.sleep(0.05)
        player = session.player
        steps = int(round(settings.seconds * FRAME_HZ * SUBSTEPS))
        wall_start = time.monotonic()
        for i in range(steps + 1):
            if not session.node.alive():
                raise OSError(f"{name} exited during the drive; log:\n"
                              f"{session.node.log_tail()}")
            t, ego = sim.t, sim.ego
            delay = wall_start + t / options.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            poses[i] = ego
            t_ns = stamp_ns(t)
            player.publish_clock(t_ns)
            _publish(player, ODOMETRY_TOPIC, ODOMETRY_TYPE,
                     odometry(t_ns, ego.x, ego.y, ego.yaw, ego.v, ego.yaw_rate))
            if i % SUBSTEPS == 0:
                for spec, image in zip(specs, renderer.render(sim.snapshot())):
                    _publish(player, camera_image_topic(spec.name), IMAGE_TYPE,
                             compressed_image(t_ns, spec.name, encode_jpeg(image)))
            latest = listener.latest()
            if latest is not None and latest[0] != last_stamp:
                last_stamp = latest[0]
                stamp, dt, local = latest
                t0 = (stamp * 1e9 - SIM_EPOCH_NS) / 1e9
                k = int(round(t0 * FRAME_HZ * SUBSTEPS))
                if len(local) and k in poses:
                    latencies_ms.append((t - t0) * 1000.0)
                    current = WorldPlan.from_ego_frame(t0, dt, local, poses[k], t)
                    applied.append(current)
                else:
                    current = None
            s, d = sim.route_position()
            expert = t < handover - 1e-9
            if expert:
                accel, steer, _ = sim.expert_control()
            else:
                accel, steer = tracker.command(ego, t, current)
            monitor.record(t, ego, s, d, None if current is None else t - current.t0,
                           expert or tracker.usable(current, t))
            if i < steps:
                sim.step(accel, steer)
        wall_s = time.monotonic() - wall_start
    progress, end_s = reference_progress(seed, settings)
    metrics = monitor.summary(handover, progress, end_s)
    metrics.update({
        "seed": seed, "variant": variant, **settings.lengths(),
        "engaged_at_s": handover, "plans": len(applied),
        "latency_ms": latency_summary(latencies_ms,
                                      "first receipt of each new ~/trajectory, sim time"),
        "trajectories_received": listener.received,
        "wall_s": round(wall_s, 2),
        "sim_seconds_per_wall_second": round(settings.seconds / max(wall_s, 1e-9), 3),
        "node_log": str(session.node.log_file)})
    return DriveResult(seed, variant, metrics, monitor.rows(), applied, sim.world)
