"""InputHandler without DDS: the drive node's input handling fed duck-typed messages on the
stamp pattern of a live drive (camera sets on a 0.1 s grid of wall-clock stamps, odometry
every 0.02 s up to each set), planned by a PlannerLoop with a stub engine."""

import time
from types import SimpleNamespace

import pytest
from helpers.input_messages import SPEED, StraightEngine, image, input_fault, odometry

from flashdrive_ros.engine.window import MAX_ODOMETRY_MAGNITUDE, WindowBuilder
from flashdrive_ros.ros.convert import seconds_to_stamp
from flashdrive_ros.ros.input_handler import InputHandler
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import ODOMETRY_INPUT, PlannerLoop


def handler_and_loop():
    params = DriveParams()
    loop = PlannerLoop(StraightEngine(), WindowBuilder(len(params.camera_names)),
                       params.camera_names, limits=params.plan_limits)
    return InputHandler(params, loop), loop


def drive(handler, loop, first_stamp, sets, position=lambda t: SPEED * t):
    for k in range(sets):
        stamp = round(first_stamp + 0.1 * k, 6)
        for j in range(5):
            t = stamp - 0.08 + 0.02 * j
            handler.on_odometry(odometry(t, position(t)))
        for index in range(len(handler.params.camera_names)):
            handler.on_image(index, image(stamp))
        loop.run_once()


def test_wall_clock_drive_with_odometry_at_epoch_scale_is_planned():
    handler, loop = handler_and_loop()
    start = round(time.time(), 1)
    assert SPEED * start > 1e9
    drive(handler, loop, start, 25)
    planner, _ = loop.health()
    assert planner.windows_planned >= 5, planner.rejections_by_code
    assert "nonfinite" not in planner.rejections_by_code
    assert input_fault(loop, ODOMETRY_INPUT) == ""


def test_odometry_beyond_the_magnitude_limit_is_named_and_never_planned():
    handler, loop = handler_and_loop()
    drive(handler, loop, 100.0, 25, position=lambda t: 2 * MAX_ODOMETRY_MAGNITUDE)
    planner, _ = loop.health()
    assert planner.windows_planned == 0 and planner.rejections_by_code["nonfinite"] >= 1
    assert input_fault(loop, ODOMETRY_INPUT).startswith("non_finite: odometry position beyond")


def test_late_image_within_max_reorder_is_dropped_as_out_of_order():
    handler, loop = handler_and_loop()
    drive(handler, loop, 100.0, 20)
    handler.on_image(2, image(101.5))
    assert input_fault(loop, handler.params.camera_names[2]).startswith("out_of_order")
    assert not loop.builder.time_base_reset_pending
    drive(handler, loop, 102.0, 3)
    assert loop.latest().plan.t0 == pytest.approx(102.2)


def test_bag_loop_restarts_the_time_base_and_plans_again():
    handler, loop = handler_and_loop()
    drive(handler, loop, 100.0, 20)
    planned = loop.health()[0].windows_planned
    assert loop.latest().time_base == 0
    drive(handler, loop, 98.0, 20)
    planner, _ = loop.health()
    assert planner.rejections_by_code.get("time_backwards", 0) >= 1
    assert input_fault(loop, handler.params.camera_names[0]).startswith("time_backwards")
    assert planner.windows_planned > planned
    assert loop.latest().plan.t0 == pytest.approx(99.9) and loop.latest().time_base == 1


def raw_8uc3(stamp):
    return SimpleNamespace(header=SimpleNamespace(stamp=seconds_to_stamp(stamp), frame_id="c"),
                           height=48, width=64, encoding="8UC3", is_bigendian=0, step=64 * 3,
                           data=bytes(range(256)) * 36)


def test_zero_camera_and_odometry_stamps_are_named_faults_and_never_planned():
    handler, loop = handler_and_loop()
    zero = SimpleNamespace(sec=0, nanosec=0)
    for k in range(25):
        stamp = round(100.0 + 0.1 * k, 6)
        handler.on_odometry(odometry(stamp, SPEED * stamp))
        for index in range(len(handler.params.camera_names)):
            msg = image(stamp)
            if index == 1:
                msg.header.stamp = zero
            handler.on_image(index, msg)
        loop.run_once()
    bad_odometry = odometry(0.0, 0.0)
    bad_odometry.header.stamp = zero
    handler.on_odometry(bad_odometry)
    planner, inputs = loop.health()
    assert planner.windows_planned == 0
    camera = handler.params.camera_names[1]
    for name in (camera, ODOMETRY_INPUT):
        assert input_fault(loop, name).startswith("zero_stamp: header stamp is zero"), name
    assert input_fault(loop, handler.params.camera_names[0]) == ""


def test_cv_bridge_8uc3_is_read_as_bgr8_and_noted_once():
    params = DriveParams()
    loop = PlannerLoop(StraightEngine(), WindowBuilder(len(params.camera_names)),
                       params.camera_names, limits=params.plan_limits)
    warnings = []
    handler = InputHandler(params, loop, image_size=(16, 16), warn=warnings.append)
    for k in range(3):
        handler.on_image(0, raw_8uc3(100.0 + 0.1 * k))
    planner, _ = loop.health()
    note = planner.extra[f"encoding.{params.camera_names[0]}"]
    assert "8UC3" in note and "read as bgr8" in note
    assert [w for w in warnings if "8UC3" in w] == [f"camera {params.camera_names[0]}: {note}"]
    assert input_fault(loop, params.camera_names[0]) == ""


@pytest.mark.parametrize("serialized", [False, True])
def test_camera_messages_dropped_by_the_node_keep_the_frame_gate_on(serialized):
    """A third of one 30 Hz camera's messages dropped by the node's own queue: not lost in
    transport, so the gate stays on; the same share missing altogether opens it."""
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CompressedImage

    from flashdrive_ros.ros.input_handler import GATE_EXTRA, GATE_OPENINGS_EXTRA

    def message(stamp):
        msg = CompressedImage(format="jpeg")
        msg.header.stamp = seconds_to_stamp(stamp)
        return serialize_message(msg) if serialized else msg

    states = {}
    for dropped_by_node in (True, False):
        params = DriveParams()
        loop = PlannerLoop(StraightEngine(), WindowBuilder(len(params.camera_names)),
                           params.camera_names, limits=params.plan_limits)
        handler = InputHandler(params, loop, frame_gate=True)
        for k in range(60):
            stamp = round(100.0 + k / 30, 6)
            for index in range(4):
                if index == 1 and k % 3 == 1:
                    if dropped_by_node:
                        handler.note_dropped(index, message(stamp))
                elif serialized:
                    handler.on_serialized_image(index, message(stamp))
                else:
                    handler.on_image(index, message(stamp))
        extra = loop.health()[0].extra
        states[dropped_by_node] = extra.get(GATE_EXTRA), extra.get(GATE_OPENINGS_EXTRA)
    assert states[True] == ("on", None)
    assert states[False][0].startswith(f"off while {DriveParams().camera_names[1]} loses 3")
    assert states[False][1] == "1"
