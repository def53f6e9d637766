"""Reliability through ROS, each against a drive node process over DDS on loopback: the stop
fallback for plans that fail the checks, a faulted stream (bag loop), and a short soak that
watches the node's threads and resident memory."""

import pytest

from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.reliability.fault_run import run_through_ros
from flashdrive_ros.reliability.fault_table import after_fault
from flashdrive_ros.reliability.faults import apply_fault, parse_faults
from flashdrive_ros.reliability.soak import SoakSettings, run_soak
from flashdrive_ros.ros.harness.node_session import node_session
from flashdrive_ros.ros.harness.stream import read_stream
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.sim.bag import write_bag

pytestmark = [pytest.mark.ros, pytest.mark.timeout(400)]

PARAMS = DriveParams()
TOPICS = {**{t: "sensor_msgs/msg/CompressedImage" for t in PARAMS.camera_topics},
          PARAMS.odom_topic: "nav_msgs/msg/Odometry"}


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    path = tmp_path_factory.mktemp("bag") / "bag"
    write_bag(path, 6.0, seed=6, width=128, height=80, workers=1)
    return path


def node_parameters(model_dir, **extra):
    return {"model_dir": str(model_dir), "device": "cpu", "num_samples": 1,
            "overlay_camera": "", "image_reliability": "reliable", **extra}


def test_plans_failing_the_checks_become_the_flagged_stop_trajectory(bag, tmp_path):
    strict = node_parameters(default_model_dir(), max_plan_accel_mps2=0.5, max_plan_jerk_mps3=0.5,
                             max_plan_curvature_1pm=0.01, invalid_plan_fallback="stop")
    with node_session("drive_node_fallback", strict, TOPICS, tmp_path) as session:
        session.player.play(read_stream(bag, list(TOPICS)))
        observation = session.observer.snapshot()
    planner = observation.planner
    print(planner)
    assert int(planner["plans_rejected"]) >= 1 and planner["windows_planned"] == "0"
    assert planner["fallback"].startswith("stop: plan at t0")
    assert planner["message"].startswith("fallback: stop")
    assert "fallback_stop" in observation.named_faults
    stops = [t for t in observation.trajectories if t.stop]
    assert stops and all(t.poses == 64 for t in stops)
    assert not [t for t in observation.trajectories if t.poses and not t.stop]


def test_bag_loop_through_ros_resets_names_and_recovers(bag, tmp_path):
    """max_plan_age_s is long so that recovery is judged on the plans themselves, not on how
    fast a shared CPU makes them. The drive after the loop outlasts every stamp before it, so
    its last plan cannot be mistaken for one of the old time base."""
    messages = read_stream(bag, list(TOPICS))
    fault = parse_faults("time_jump=3.0", start_s=2.5)[0]
    stream = apply_fault(messages, fault, 0, PARAMS.camera_topics, PARAMS.odom_topic)
    run = run_through_ros(stream, "drive_node_faulted", node_parameters(
        default_model_dir(), max_plan_age_s=5.0), TOPICS, tmp_path)
    print(run)
    assert run.stayed_up and not run.error
    assert "time_backwards" in run.named and run.rejections.get("time_backwards", 0) >= 1
    assert run.full_prefills.get("time base reset", 0) >= 1
    after = after_fault(run.plans, fault, stream)
    assert after and after[-1] >= stream.fault_start_stamp
    assert run.published_t0[-1] == after[-1]


def test_short_soak_has_no_thread_growth_and_bounded_memory(bag, tmp_path):
    report = run_soak(SoakSettings(bag=bag, model_dir=default_model_dir(), out_dir=tmp_path,
                                   seconds=35.0, sample_s=2.5, warmup_fraction=0.3))
    print({k: v for k, v in report.items() if k != "timeline"})
    assert report["plans"] >= 5
    assert report["threads"]["max"] == report["threads"]["start"]
    assert report["threads"]["end"] == report["threads"]["start"]
    assert report["rss_mb"]["max"] - report["rss_mb"]["start"] < 150.0
    assert (tmp_path / "soak.json").is_file()
