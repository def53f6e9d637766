"""What real transport does to the node's inputs, without DDS: latency per input and stamps on
another clock on /diagnostics, odometry in any fixed frame (map, UTM-scale positions), camera
slot sanity, dropped frames stood in, raw full-HD images reduced on arrival."""

from types import SimpleNamespace

import numpy as np
import pytest
from helpers.input_messages import SPEED, StraightEngine, image, input_fault, xyz

from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.records import OdometryRecord
from flashdrive_ros.ros.camera_slots import name_tokens, slot_mismatch
from flashdrive_ros.ros.convert import seconds_to_stamp
from flashdrive_ros.ros.input_handler import InputHandler
from flashdrive_ros.ros.params import DriveParams, ParameterError
from flashdrive_ros.ros.planner_loop import ODOMETRY_INPUT, PlannerLoop
from flashdrive_ros.ros.transport import CLOCK_MISMATCH_S, LatencyStats, clock_problem

SLOTS = list(DriveParams().camera_names)
MODEL = (80, 128)


def odometry(stamp, x, frame="odom"):
    return SimpleNamespace(
        header=SimpleNamespace(stamp=seconds_to_stamp(stamp), frame_id=frame),
        pose=SimpleNamespace(pose=SimpleNamespace(position=xyz(x, 4.2e6), orientation=xyz(w=1.0))),
        twist=SimpleNamespace(twist=SimpleNamespace(linear=xyz(SPEED), angular=xyz())))


def raw_image(stamp, frame_id="c", height=1080, width=1920):
    return SimpleNamespace(header=SimpleNamespace(stamp=seconds_to_stamp(stamp),
                                                  frame_id=frame_id),
                           encoding="bgr8", height=height, width=width, step=width * 3,
                           is_bigendian=0, data=np.full(height * width * 3, 77, np.uint8))


def setup(now=None, warnings=None, image_size=None, **params):
    params = DriveParams(**params)
    loop = PlannerLoop(StraightEngine(), WindowBuilder(len(params.camera_names)),
                       params.camera_names, limits=params.plan_limits)
    warn = warnings.append if warnings is not None else None
    return InputHandler(params, loop, image_size, now=now, warn=warn), loop


def drive(handler, loop, first, sets, frame="odom", latency=0.0, clock=None, skip=(),
          make_image=image):
    """Camera sets every 0.1 s from `first`, odometry every 0.02 s; messages arrive
    `latency` seconds after their stamp on `clock` (a one-item list the test advances)."""
    for k in range(sets):
        stamp = round(first + 0.1 * k, 6)
        for j in range(5):
            t = stamp - 0.08 + 0.02 * j
            if clock is not None:
                clock[0] = t + latency
            handler.on_odometry(odometry(t, 5e5 + SPEED * t, frame))
        for index in range(len(SLOTS)):
            if (index, k) not in skip:
                handler.on_image(index, make_image(stamp))
        loop.run_once()


def extra(loop):
    return loop.health()[0].extra


def test_latency_per_input_is_measured_and_reported():
    clock = [0.0]
    handler, loop = setup(now=lambda: clock[0])
    drive(handler, loop, 100.0, 30, latency=0.06, clock=clock)
    camera = extra(loop)[f"input_latency_ms.{SLOTS[0]}"]
    assert camera.startswith("p50 60.0") or camera.startswith("p50 59.99"), camera
    assert f"input_latency_ms.{ODOMETRY_INPUT}" in extra(loop)
    assert loop.health()[0].windows_planned >= 14
    assert "clock" not in extra(loop)


def test_stamps_years_behind_the_node_clock_say_use_sim_time():
    warnings = []
    clock = [0.0]
    handler, loop = setup(now=lambda: clock[0], warnings=warnings)
    drive(handler, loop, 100.0, 5, latency=3.2e8, clock=clock)
    message = extra(loop)["clock"]
    assert "older than the node clock" in message
    assert "use_sim_time" in message and "--clock" in message
    assert warnings == [message]
    stats = LatencyStats()
    assert stats.summary()["p50_ms"] is None
    assert clock_problem(CLOCK_MISMATCH_S / 2) == ""
    assert "newer" in clock_problem(-2 * CLOCK_MISMATCH_S)


def test_odometry_in_the_map_frame_is_accepted_and_reported():
    handler, loop = setup()
    drive(handler, loop, 100.0, 25, frame="map")
    planner, _ = loop.health()
    assert planner.windows_planned >= 9, planner.rejections_by_code
    assert planner.extra["odom_frame"] == "map (first odometry message)"
    handler.on_odometry(odometry(102.6, 5e5, "odom"))
    fault = input_fault(loop, ODOMETRY_INPUT)
    assert "'odom' is not 'map'" in fault and "first odometry message" in fault


def test_a_configured_odometry_frame_rejects_others_with_the_reason():
    handler, loop = setup(odom_frame="odom")
    drive(handler, loop, 100.0, 5, frame="map")
    assert loop.health()[0].windows_planned == 0
    fault = input_fault(loop, ODOMETRY_INPUT)
    assert "'map' is not 'odom' (odom_frame parameter)" in fault
    assert extra(loop)["odom_frame"] == "odom (odom_frame parameter)"


def test_utm_scale_odometry_gives_ground_truth_of_the_origin():
    def track(offset):
        return OdometryTrack([OdometryRecord(
            t, np.array([offset[0] + 12.0 * t, offset[1] + 0.3 * t * t, 0.0]),
            np.array([0.0, 0.0, np.sin(0.01 * t), np.cos(0.01 * t)]), np.array([12.0, 0, 0]))
            for t in np.arange(0.0, 10.0, 0.02)])

    near, far = track((0.0, 0.0)), track((6.9e5, 5.3e6))
    np.testing.assert_allclose(far.future(2.0), near.future(2.0), rtol=0, atol=1e-6)
    np.testing.assert_allclose(far.constant_velocity(2.0), near.constant_velocity(2.0),
                               rtol=0, atol=1e-6)


def test_swapped_camera_topics_are_warned_about_at_start_and_on_diagnostics():
    topics = list(DriveParams().camera_topics)
    topics[0], topics[2] = topics[2], topics[0]
    warnings = []
    handler, loop = setup(warnings=warnings, camera_topics=topics)
    assert len(warnings) == 2
    assert "camera_cross_right_120fov" in extra(loop)[f"camera_slot.{SLOTS[0]}"]
    assert "swapped" in warnings[0]
    assert f"camera_slot.{SLOTS[1]}" not in extra(loop)


def test_frame_ids_are_checked_by_name_or_against_configured_ids():
    warnings = []
    handler, loop = setup(warnings=warnings)
    handler.on_image(1, image(100.0))
    handler.on_image(1, SimpleNamespace(header=SimpleNamespace(
        stamp=seconds_to_stamp(100.1), frame_id="camera_front_tele_30fov"), format="jpeg",
        data=image(0.0).data))
    assert "names camera_front_tele_30fov" in extra(loop)[f"camera_slot.{SLOTS[1]}"]
    ids = ["cam_l", "cam_f", "cam_r", "cam_t"]
    handler, loop = setup(warnings=warnings, camera_frame_ids=ids)
    handler.on_image(0, SimpleNamespace(header=SimpleNamespace(
        stamp=seconds_to_stamp(100.0), frame_id="cam_r"), format="jpeg", data=image(0).data))
    assert "expects frame_id 'cam_l', got 'cam_r'" in extra(loop)[f"camera_slot.{SLOTS[0]}"]
    with pytest.raises(ParameterError, match="camera_frame_ids has 2 entries"):
        DriveParams(camera_frame_ids=["a", "b"])
    assert DriveParams(camera_names=["a", "b"], camera_topics=["/a", "/b"],
                       camera_info_topics=["/ai", "/bi"], overlay_camera="",
                       camera_frame_ids=["", "", "", ""]).expected_frame_id(1) == ""


def test_slot_names_match_by_their_distinctive_words():
    assert name_tokens("/sensing/camera/camera_front_wide_120fov/image_raw") == {
        "front", "wide", "120"}
    assert slot_mismatch(SLOTS, 0, "CAM_FRONT_LEFT") == ""
    assert slot_mismatch(SLOTS, 3, "front_camera") == ""
    assert slot_mismatch(SLOTS, 0, "lidar_top") == ""
    assert "names camera_cross_right_120fov" in slot_mismatch(SLOTS, 0, "cross_right_cam")


def test_dropped_frames_are_stood_in_and_counted_on_diagnostics():
    handler, loop = setup()
    drive(handler, loop, 100.0, 30)
    planned = loop.health()[0].windows_planned
    handler, loop = setup()
    drive(handler, loop, 100.0, 30, skip={(1, 18), (3, 24)})
    planner, _ = loop.health()
    assert "frame_gap" not in planner.rejections_by_code, planner.rejections_by_code
    assert int(planner.extra["frame_stand_ins"]) >= 2
    assert planner.windows_planned >= planned - 2


def test_full_hd_raw_images_are_kept_at_the_model_size():
    handler, loop = setup(image_size=MODEL, image_transport="raw",
                          camera_topics=[f"/cam{i}/image_raw" for i in range(4)])
    drive(handler, loop, 100.0, 18, make_image=raw_image)
    planner, _ = loop.health()
    assert planner.windows_planned >= 2, planner.rejections_by_code
    window = loop.builder.build(loop.builder.latest_t0())
    assert window.images.shape[2:] == (*MODEL, 3)
    np.testing.assert_array_equal(window.images[0, -1, 0, 0], [77, 77, 77])
