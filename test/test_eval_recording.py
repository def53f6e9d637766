"""Recorded node outputs (a bag written here with rosbags) -> plans, metrics, tick counts."""

import math

import numpy as np
import pytest
from helpers.bags import TYPESTORE, header_msg
from rosbags.rosbag2 import StoragePlugin, Writer

from flashdrive_ros.eval.bag import OdometryRecord
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.offline import LabelIndex
from flashdrive_ros.eval.recording import plan_results, read_recording

T = TYPESTORE.types
NODE = "drive_node_x"
TOPICS = {"trajectory": f"/{NODE}/trajectory", "finished_plans": f"/{NODE}/finished_plans",
          "overlay": f"/{NODE}/overlay", "diagnostics": "/diagnostics"}
TYPES = {"trajectory": "nav_msgs/msg/Path", "finished_plans": "visualization_msgs/msg/MarkerArray",
         "overlay": "sensor_msgs/msg/Image", "diagnostics": "diagnostic_msgs/msg/DiagnosticArray"}
MARKER = T["visualization_msgs/msg/Marker"]


def path_msg(t0, lateral, steps=64):
    poses = []
    for i in range(steps):
        pose = T["geometry_msgs/msg/Pose"](
            position=T["geometry_msgs/msg/Point"](x=1.0 * (i + 1) * 0.1, y=lateral, z=0.0),
            orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0))
        poses.append(T["geometry_msgs/msg/PoseStamped"](header=header_msg(t0 + (i + 1) * 0.1),
                                                         pose=pose))
    return T["nav_msgs/msg/Path"](header=header_msg(t0), poses=poses)


def marker(t0, marker_id, marker_type, points=(), text=""):
    return MARKER(
        header=header_msg(t0), ns="plan", id=marker_id, type=marker_type, action=MARKER.ADD,
        pose=T["geometry_msgs/msg/Pose"](
            position=T["geometry_msgs/msg/Point"](x=0.0, y=0.0, z=0.0),
            orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0)),
        scale=T["geometry_msgs/msg/Vector3"](x=0.1, y=0.0, z=0.0),
        color=T["std_msgs/msg/ColorRGBA"](r=1.0, g=0.0, b=0.0, a=1.0),
        lifetime=T["builtin_interfaces/msg/Duration"](sec=0, nanosec=0), frame_locked=False,
        points=list(points), colors=[], texture_resource="",
        texture=T["sensor_msgs/msg/CompressedImage"](header=header_msg(t0), format="",
                                                     data=np.zeros(0, np.uint8)),
        uv_coordinates=[], text=text, mesh_resource="",
        mesh_file=T["visualization_msgs/msg/MeshFile"](filename="", data=np.zeros(0, np.uint8)),
        mesh_use_embedded_materials=False)


def finished_plan_msg(t0, laterals, coc, steps=64):
    """A ~/finished_plans message: the CoC text marker, then straight samples at the given
    lateral offsets in reverse id order (the reader orders them by id)."""
    point = T["geometry_msgs/msg/Point"]
    strips = [marker(t0, k, MARKER.LINE_STRIP, [point(x=0.0, y=0.0, z=0.0)] + [
        point(x=(i + 1) * 0.1, y=lateral, z=0.0) for i in range(steps)])
        for k, lateral in enumerate(laterals)]
    text = marker(t0, 0, MARKER.TEXT_VIEW_FACING, text=coc)
    return T["visualization_msgs/msg/MarkerArray"](markers=[text, *reversed(strips)])


def diagnostics_msg(t, node, values):
    kv = [T["diagnostic_msgs/msg/KeyValue"](key=k, value=v) for k, v in values.items()]
    status = T["diagnostic_msgs/msg/DiagnosticStatus"](level=0, name=f"{node}: planner",
                                                       message="", hardware_id="", values=kv)
    return T["diagnostic_msgs/msg/DiagnosticArray"](header=header_msg(t), status=[status])


def write_recording(path, events):
    with Writer(path, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conns = {role: writer.add_connection(TOPICS[role], TYPES[role], typestore=TYPESTORE)
                 for role in TYPES}
        for t, role, msg in sorted(events, key=lambda e: e[0]):
            writer.write(conns[role], int(round(t * 1e9)),
                         TYPESTORE.serialize_cdr(msg, TYPES[role]))


def planner_values(t0, total, ticks, skipped):
    return {"plan_t0": f"{t0:.3f}", "latency_ms.encode": "1.000", "latency_ms.total":
            f"{total:.3f}", "accepted_length_mean": "3.500", "tokens_generated": "12",
            "ticks": str(ticks), "skipped_ticks": str(skipped), "windows_rejected": "0"}


def test_every_finished_plan_is_recorded_and_late_ones_are_deadline_misses(tmp_path):
    empty_path = T["nav_msgs/msg/Path"](header=header_msg(10.0), poses=[])
    events = [
        (10.0, "trajectory", empty_path),  # before the first plan: not a control tick
        (10.3, "finished_plans", finished_plan_msg(10.0, [1.0, 0.5], "stop for the light")),
        (10.3, "trajectory", path_msg(10.0, 1.0)),
        (10.3, "diagnostics", diagnostics_msg(10.3, NODE, planner_values(10.0, 250.0, 4, 3))),
        (10.3, "diagnostics", diagnostics_msg(10.3, "other_node", planner_values(10.0, 9.0, 99,
                                                                                 99))),
        (10.4, "trajectory", path_msg(10.0, 1.0)),  # same plan again: a missed tick
        (10.45, "trajectory", path_msg(10.45, 0.0)),  # a fallback stamped now: a miss
        (10.5, "finished_plans", finished_plan_msg(10.2, [2.0], "keep lane")),
        (10.5, "trajectory", empty_path),  # the plan of 10.2 is late: not valid, a miss
        (10.5, "diagnostics", diagnostics_msg(10.5, NODE, planner_values(10.2, 150.0, 6, 4))),
        (10.6, "finished_plans", finished_plan_msg(10.4, [0.0], "")),  # after the bag's end
        (10.6, "trajectory", path_msg(10.4, 0.0)),
    ]
    write_recording(tmp_path / "rec", events)
    recording = read_recording(tmp_path / "rec", TOPICS, end_s=10.55, node_name=NODE)
    assert [p.t0 for p in recording.plans] == pytest.approx([10.0, 10.2, 10.4])
    assert [p.published_valid for p in recording.plans] == [True, False, True]
    first, second = recording.plans[:2]
    assert first.received_s == pytest.approx(10.3)
    assert first.coc_text == "stop for the light" and second.coc_text == "keep lane"
    assert first.samples.shape == (2, 64, 2)
    assert first.samples[1, :, 1] == pytest.approx(np.full(64, 0.5))
    assert first.diagnostics["latency_ms.total"] == "250.000"
    stats = recording.node_stats
    assert (stats["control_ticks"], stats["deadline_misses"]) == (4, 3)
    assert (stats["finished_plans"], stats["plans_published_valid"]) == (3, 2)
    assert stats["node_skipped_ticks"] == 4.0

    odometry = [OdometryRecord(t, np.array([1.0 * (t - 9.0), 0.0, 0.0]),
                               np.array([0.0, 0.0, 0.0, 1.0]), np.array([1.0, 0.0, 0.0]))
                for t in np.arange(8.0, 16.7, 0.02)]
    track = OdometryTrack(odometry)
    labels = LabelIndex([], 0.05)
    results, skipped = plan_results(recording, track, labels, steps=64, dt=0.1)
    assert [r.t0 for r in results] == pytest.approx([10.0, 10.2])
    assert skipped.to_dict()["reasons"] == {"no_future": 1}  # 10.4 + 6.4 > 16.68
    assert results[0].metrics["minade1_6s"] == pytest.approx(1.0)
    assert results[0].metrics["minade6_6s"] == pytest.approx(0.5)
    assert results[0].plan_age_s == pytest.approx(0.3)
    assert results[0].timings_ms == {"encode": 1.0, "total": 250.0}
    assert results[0].accepted_lengths == [3.5] and results[0].tokens_generated == 12
    assert results[1].metrics["minade1_6s"] == pytest.approx(2.0)
    assert math.isclose(results[1].plan_age_s, 0.3)
