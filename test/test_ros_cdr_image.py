"""Image and CompressedImage read from their serialized CDR bytes (ros/cdr_image.py) against
rclpy's and rosbags' deserialization, and the frame gate (ros/frame_gate.py) on camera
stamp patterns of a vehicle logger."""

import cv2
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.typesys import Stores, get_typestore
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.ros.cdr_image import (
    TruncatedMessage,
    UnsupportedEncapsulation,
    image_header,
    read_compressed,
    read_image,
)
from flashdrive_ros.ros.convert import image_msg_to_rgb, seconds_to_stamp
from flashdrive_ros.ros.frame_gate import FrameGate
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.ros.input_handler import InputHandler
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import PlannerLoop

CAMERAS = DriveParams().camera_names
MODEL_SIZE = (20, 32)

REDUCER = ImageReducer((20, 32))
RNG = np.random.default_rng(7)
PIXELS = cv2.GaussianBlur(RNG.integers(0, 256, (120, 200, 4), dtype=np.uint8), (5, 5), 2)


def raw_image(encoding, frame_id="camera_front_wide_120fov", pad=6):
    channels = {"rgb8": 3, "bgr8": 3, "mono8": 1, "rgba8": 4, "bgra8": 4}[encoding]
    height, width = PIXELS.shape[:2]
    rows = np.zeros((height, width * channels + pad), np.uint8)
    rows[:, :width * channels] = PIXELS[:, :, :channels].reshape(height, -1)
    return Image(header=Header(stamp=seconds_to_stamp(1.7e9 + 0.0333), frame_id=frame_id),
                 height=height, width=width, encoding=encoding, step=width * channels + pad,
                 data=rows.tobytes())


def compressed_image(kind):
    ok, data = cv2.imencode("." + kind, PIXELS[:, :, :3])
    assert ok
    return CompressedImage(header=Header(stamp=seconds_to_stamp(12.5), frame_id="tele"),
                           format=kind, data=data.tobytes())


@pytest.mark.parametrize("frame_id", ["", "c", "cam", "camera_cross_left_120fov"])
@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "mono8", "rgba8", "bgra8"])
def test_raw_image_read_from_cdr_equals_the_deserialized_message(encoding, frame_id):
    msg = raw_image(encoding, frame_id)
    buffer = serialize_message(msg)
    header, reader = image_header(buffer)
    fields = read_image(header, reader)
    assert (header.stamp.sec, header.stamp.nanosec, header.frame_id) == (
        msg.header.stamp.sec, msg.header.stamp.nanosec, frame_id)
    assert (fields.height, fields.width, fields.encoding, fields.step, fields.is_bigendian) == (
        msg.height, msg.width, encoding, msg.step, 0)
    assert np.shares_memory(fields.data, np.frombuffer(buffer, np.uint8))
    np.testing.assert_array_equal(
        image_msg_to_rgb(fields, REDUCER),
        image_msg_to_rgb(deserialize_message(buffer, Image), REDUCER))


@pytest.mark.parametrize("kind", ["jpeg", "png"])
def test_compressed_image_read_from_cdr_equals_the_deserialized_message(kind):
    buffer = serialize_message(compressed_image(kind))
    header, reader = image_header(buffer)
    fields = read_compressed(header, reader)
    assert (header.stamp.sec, header.stamp.nanosec, fields.format) == (12, 500_000_000, kind)
    np.testing.assert_array_equal(
        image_msg_to_rgb(fields, REDUCER),
        image_msg_to_rgb(deserialize_message(buffer, CompressedImage), REDUCER))


def test_big_endian_cdr_reads_the_same_fields():
    store = get_typestore(Stores.ROS2_JAZZY)
    cls = store.types["sensor_msgs/msg/Image"]
    header_cls = store.types["std_msgs/msg/Header"]
    time_cls = store.types["builtin_interfaces/msg/Time"]
    msg = raw_image("bgr8", "front")
    stored = cls(header=header_cls(stamp=time_cls(sec=msg.header.stamp.sec,
                                                  nanosec=msg.header.stamp.nanosec),
                                   frame_id="front"),
                 height=msg.height, width=msg.width, encoding="bgr8", is_bigendian=0,
                 step=msg.step, data=np.frombuffer(bytes(msg.data), np.uint8))
    big = bytes(store.serialize_cdr(stored, "sensor_msgs/msg/Image", little_endian=False))
    assert big[:2] == b"\x00\x00"
    header, reader = image_header(big)
    fields = read_image(header, reader)
    assert (header.stamp.sec, header.stamp.nanosec, header.frame_id) == (
        msg.header.stamp.sec, msg.header.stamp.nanosec, "front")
    assert (fields.height, fields.width, fields.step) == (msg.height, msg.width, msg.step)
    np.testing.assert_array_equal(fields.data, np.frombuffer(bytes(msg.data), np.uint8))


def test_every_truncation_raises_a_named_error():
    buffer = serialize_message(raw_image("rgb8", "front"))
    for end in [0, 3, 4, 7, 11, 15, 19, 23, 27, 31, 35, 40, 44, 48, len(buffer) - 1]:
        with pytest.raises(TruncatedMessage):
            header, reader = image_header(buffer[:end])
            read_image(header, reader)


def test_other_encapsulations_are_named():
    buffer = bytearray(serialize_message(raw_image("rgb8")))
    buffer[1] = 0x07
    with pytest.raises(UnsupportedEncapsulation, match="07"):
        image_header(bytes(buffer))


def run_gate(gate, stamps_per_camera):
    """Feeds the stamps camera by camera at each step (the order they arrive); returns the
    stamps decoded per camera, in the order they were let through."""
    taken = [[] for _ in stamps_per_camera]
    steps = max(len(s) for s in stamps_per_camera)
    for k in range(steps):
        for camera, stamps in enumerate(stamps_per_camera):
            if k < len(stamps):
                for stamp, item in gate.admit(camera, stamps[k], ("item", stamps[k])):
                    assert item == ("item", stamp)
                    taken[camera].append(stamp)
    return taken


def gate():
    return FrameGate(4, frame_dt=0.1, tolerance=0.04, max_jump=1.0)


def test_30_hz_cameras_keep_the_frame_nearest_each_grid_time():
    offsets = [0.0, 0.004, -0.011, 0.015]
    stamps = [[100.0 + k / 30 + off for k in range(60)] for off in offsets]
    frame_gate = gate()
    taken = run_gate(frame_gate, stamps)
    grid = 100.0 + 0.1 * np.arange(20)
    for camera, kept in enumerate(taken):
        assert len(kept) == 20, (camera, len(kept))
        np.testing.assert_allclose(np.asarray(kept) - offsets[camera], grid, atol=1e-9)
    assert all(dropped in (39, 40) for dropped in frame_gate.dropped)  # the last one held


def test_a_lost_grid_frame_is_replaced_by_its_neighbours():
    stamps = [[100.0 + k / 30 for k in range(30)] for _ in range(4)]
    lost = [100.0 + k / 30 for k in (12, 21, 22)]
    for stamp in lost:
        stamps[2].remove(stamp)
    taken = run_gate(gate(), stamps)
    frame = [100.0 + k / 30 for k in range(30)]
    assert taken[0] == frame[::3]
    kept = [0, 3, 6, 9, 11, 13, 15, 18, 20, 24, 27]  # 12 lost: 11 and 13; 21, 22 lost: 20
    assert taken[2] == [frame[k] for k in kept]


def test_cameras_at_the_frame_rate_and_restarts_take_every_frame():
    frame_gate = gate()
    stamps = [[50.0 + 0.1 * k + 0.003 * (k % 2) for k in range(20)] for _ in range(4)]
    assert run_gate(frame_gate, stamps) == stamps
    fast = [[60.0 + k / 30 for k in range(6)] for _ in range(4)]
    assert [kept[0] for kept in run_gate(frame_gate, fast)] == [60.0] * 4
    frame_gate.reset()
    assert all(frame_gate.admit(camera, 10.0, None) == [(10.0, None)] for camera in range(4))


def test_a_camera_losing_many_frames_in_transport_opens_the_gate_for_all():
    frame_gate = gate()
    stamps = [[100.0 + k / 30 for k in range(90)] for _ in range(4)]
    arrived = np.random.default_rng(5).random(90) > 0.4
    stamps[3] = [s for s, kept in zip(stamps[3], arrived) if kept]
    taken = run_gate(frame_gate, stamps)
    camera, loss = frame_gate.lossy()
    assert camera == 3 and loss == pytest.approx(1 - np.mean(arrived[-30:]), abs=0.15)
    assert taken[3][-20:] == stamps[3][-20:]
    assert taken[0][-40:] == stamps[0][-40:]
    assert len(taken[1]) > 60


def test_frames_the_node_dropped_itself_are_not_lost_in_transport():
    stamps = [100.0 + k / 30 for k in range(90)]
    held_back = np.random.default_rng(5).random(90) < 0.4
    frame_gate = gate()
    for k, stamp in enumerate(stamps):
        for camera in range(4):
            if camera == 3 and held_back[k]:
                frame_gate.note_seen(camera, stamp)
            else:
                frame_gate.admit(camera, stamp, None)
    assert frame_gate.lossy() is None and frame_gate.loss(3) == 0.0
    assert frame_gate.period(3) == pytest.approx(1 / 30)


def test_other_encapsulations_go_to_rclpy_and_its_failure_is_a_fault():
    params = DriveParams(camera_topics=[f"/camera{i}/image_raw" for i in range(4)],
                         image_transport="raw")
    loop = PlannerLoop(None, WindowBuilder(4), CAMERAS)
    handler = InputHandler(params, loop, MODEL_SIZE, frame_gate=True)

    def fault(index):
        _, inputs = loop.health()
        return next(h for h in inputs if h.name == CAMERAS[index]).last_fault

    buffer = bytearray(serialize_message(raw_image("rgb8")))
    buffer[1] = 0x07
    handler.on_serialized_image(0, bytes(buffer))
    assert "unsupported_encapsulation" in fault(0) and "rclpy could not" not in fault(0)
    handler.deserialize = lambda data: deserialize_message(data, Image)
    handler.on_serialized_image(1, bytes(buffer[:40]))
    assert "rclpy could not deserialize" in fault(1)
