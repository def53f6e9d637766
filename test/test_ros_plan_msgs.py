import math

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from visualization_msgs.msg import Marker

from flashdrive_ros.engine.types import Plan
from flashdrive_ros.ros.convert import stamp_to_seconds
from flashdrive_ros.ros.diagnostics import InputHealth, PlannerHealth, build_diagnostics
from flashdrive_ros.ros.plan_msgs import (
    plan_to_finished_plan,
    plan_to_markers,
    plan_to_path,
    plan_to_reasoning,
)


def make_plan(k=3, n=64):
    t = np.arange(1, n + 1) * 0.1
    trajectories = np.zeros((k, n, 3))
    for i in range(k):
        trajectories[i, :, 0] = 5.0 * t
        trajectories[i, :, 1] = 0.1 * i * t
        trajectories[i, :, 2] = 0.02 * i
    return Plan(t0=100.25, trajectories=trajectories, dt=0.1, coc_text="Slow down: lead car.",
                timings_ms={"encode": 1.0, "prefill": 2.0, "decode": 3.0, "action": 4.0,
                            "total": 10.0},
                accepted_lengths=[4, 6])


def test_path_is_first_sample_in_base_frame_with_input_stamp():
    plan = make_plan()
    plan.trajectories[0, 5, 2] = math.pi / 2
    path = plan_to_path(plan, "base_link")
    assert path.header.frame_id == "base_link"
    assert stamp_to_seconds(path.header.stamp) == pytest.approx(100.25)
    assert len(path.poses) == 64
    assert path.poses[9].pose.position.x == pytest.approx(5.0)
    assert stamp_to_seconds(path.poses[9].header.stamp) == pytest.approx(101.25)
    q = path.poses[5].pose.orientation
    assert (q.z, q.w) == pytest.approx((math.sqrt(0.5), math.sqrt(0.5)))


def test_markers_deleteall_then_one_line_strip_per_sample():
    plan = make_plan(k=4)
    markers = plan_to_markers(plan, "base_link").markers
    assert markers[0].action == Marker.DELETEALL
    strips = markers[1:]
    assert [m.id for m in strips] == [0, 1, 2, 3]
    assert all(m.type == Marker.LINE_STRIP and m.action == Marker.ADD for m in strips)
    assert all(len(m.points) == 65 and m.header.frame_id == "base_link" for m in strips)
    assert strips[3].points[-1].y == pytest.approx(0.3 * 6.4)
    colors = {(round(m.color.r, 3), round(m.color.g, 3), round(m.color.b, 3)) for m in strips}
    assert len(colors) == 4


def test_reasoning_text():
    assert plan_to_reasoning(make_plan()).data == "Slow down: lead car."


def test_finished_plan_holds_every_sample_and_the_coc():
    plan = make_plan(k=2)
    markers = plan_to_finished_plan(plan, "base_link").markers
    strips = [m for m in markers if m.type == Marker.LINE_STRIP]
    texts = [m for m in markers if m.type == Marker.TEXT_VIEW_FACING]
    assert [m.id for m in strips] == [0, 1] and len(texts) == 1
    assert texts[0].text == "Slow down: lead car."
    assert all(stamp_to_seconds(m.header.stamp) == pytest.approx(100.25) for m in markers)
    assert strips[1].points[-1].y == pytest.approx(0.1 * 6.4)


@pytest.mark.parametrize("bad", ["nan", "shape"])
def test_bad_plan_is_rejected(bad):
    plan = make_plan()
    if bad == "nan":
        plan.trajectories[1, 3, 0] = np.nan
    else:
        plan.trajectories = plan.trajectories[0]
    with pytest.raises(ValueError):
        plan_to_path(plan, "base_link")


def test_diagnostics_levels_and_values():
    planner = PlannerHealth(plan=make_plan(), plan_age_s=0.12, plan_valid=True, ticks=7,
                            skipped_ticks=2)
    inputs = [InputHealth("camera front_wide", received=5, last_stamp=100.2, last_receipt=9.5),
              InputHealth("odometry", fault="non_finite: odometry position holds NaN",
                          faults_total=1)]
    array = build_diagnostics("drive_node", 100.3, planner, inputs, now_s=10.0)
    assert len(array.status) == 3
    plan_status, camera, odom = array.status
    assert plan_status.level == DiagnosticStatus.OK
    values = {kv.key: kv.value for kv in plan_status.values}
    assert values["latency_ms.decode"] == "3.000"
    assert values["accepted_length_mean"] == "5.000"
    assert values["skipped_ticks"] == "2"
    assert values["plan_age_s"] == "0.120"
    assert camera.level == DiagnosticStatus.OK
    assert {kv.key: kv.value for kv in camera.values}["since_last_receipt_s"] == "0.500"
    assert odom.level == DiagnosticStatus.ERROR and "non_finite" in odom.message

    stale = build_diagnostics("drive_node", 1.0, PlannerHealth(plan=make_plan()), [], 0.0)
    assert stale.status[0].level == DiagnosticStatus.WARN
    assert stale.status[0].message == "plan is stale"
    broken = build_diagnostics("drive_node", 1.0, PlannerHealth(engine_error="CUDA OOM"), [], 0)
    assert broken.status[0].level == DiagnosticStatus.ERROR
