"""H.264 camera streams through the drive node's input handling, without DDS: serialized
sensor_msgs/CompressedImage messages (format h264) of four 30 Hz cameras, every packet decoded,
the frame gate picking the frames on the model's grid, camera sets planned; a packet lost in
transport is a named fault and its camera's frames come back from the next keyframe on, the
frames withheld meanwhile not taken for frames lost in transport."""

import numpy as np
from helpers.input_messages import SPEED, StraightEngine, input_fault, odometry
from rclpy.serialization import serialize_message
from sensor_msgs.msg import CompressedImage

from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.ros.convert import seconds_to_stamp
from flashdrive_ros.ros.image_reduce import ImageReducer
from flashdrive_ros.ros.input_handler import GATE_EXTRA, InputHandler
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.ros.planner_loop import PlannerLoop
from flashdrive_ros.ros.video_decode import VideoStream, frame_rgb
from flashdrive_ros.sim.video_encode import VideoEncoder

WIDTH, HEIGHT = 160, 120
MODEL_SIZE = (48, 64)
CAMERA_HZ = 30
START = 200.0
FRAMES = 90


def picture(camera: int, i: int) -> np.ndarray:
    img = np.full((HEIGHT, WIDTH, 3), 40 * camera, np.uint8)  # [H, W, 3]
    img[30:70, (4 * i) % WIDTH:(4 * i) % WIDTH + 20] = (250, 200, 30)
    return img


def camera_messages(camera: int) -> list[tuple[float, bytes, bytes]]:
    """(stamp, serialized CompressedImage, packet) per frame."""
    encoder = VideoEncoder("h264", WIDTH, HEIGHT, keyframe_every=15)
    out = []
    for i in range(FRAMES):
        stamp = round(START + i / CAMERA_HZ, 6)
        (packet,) = encoder.encode(picture(camera, i))
        msg = CompressedImage(format="h264", data=bytes(packet))
        msg.header.stamp = seconds_to_stamp(stamp)
        msg.header.frame_id = f"camera{camera}"
        out.append((stamp, serialize_message(msg), bytes(packet)))
    return out


def run(lost: set[tuple[int, int]] = frozenset()):
    params = DriveParams()
    loop = PlannerLoop(StraightEngine(), WindowBuilder(len(params.camera_names)),
                       params.camera_names, limits=params.plan_limits)
    handler = InputHandler(params, loop, MODEL_SIZE, frame_gate=True)
    sets: list[tuple[list[float], list[np.ndarray]]] = []
    gate_states = []
    set_extra = loop.set_extra
    loop.set_extra = lambda key, value: (gate_states.append(value) if key == GATE_EXTRA
                                         else None, set_extra(key, value))
    add = loop.add_camera_set
    loop.add_camera_set = lambda stamps, images: (sets.append((stamps, images)),
                                                  add(stamps, images))
    streams = [camera_messages(c) for c in range(4)]
    odometry_t = START - 1.6
    for i in range(FRAMES):
        while odometry_t <= streams[0][i][0]:
            handler.on_odometry(odometry(odometry_t, SPEED * odometry_t))
            odometry_t = round(odometry_t + 0.02, 6)
        for camera in range(4):
            if (camera, i) not in lost:
                handler.on_serialized_image(camera, streams[camera][i][1])
        if i % 3 == 0:
            loop.run_once()
    return handler, loop, sets, streams, gate_states


def test_h264_cameras_are_decoded_and_their_grid_frames_planned():
    handler, loop, sets, streams, _ = run()
    planner, _ = loop.health()
    assert planner.windows_planned >= 15, planner.rejections_by_code
    assert all(input_fault(loop, name) == "" for name in handler.params.camera_names)
    assert len(sets) >= 25
    stamps = [s[0] for s, _ in sets]
    assert np.allclose(np.diff(stamps), 0.1, atol=1e-3)
    reference = VideoStream("h264")
    reducer = ImageReducer(MODEL_SIZE)
    decoded = {}
    for stamp, _, packet in streams[0]:
        for frame_stamp, frame in reference.push(stamp, packet).frames:
            decoded[round(frame_stamp, 6)] = frame_rgb(frame, reducer)
    stamp_set, images = sets[5]
    assert images[0].shape == (*MODEL_SIZE, 3)
    assert np.array_equal(images[0], decoded[round(stamp_set[0], 6)])


def test_a_lost_packet_is_a_named_fault_and_its_camera_returns_at_the_next_keyframe():
    handler, loop, sets, _, gate_states = run(lost={(1, 20)})
    fault = input_fault(loop, handler.params.camera_names[1])
    assert fault.startswith("video: packet at") and "frame_num" in fault
    assert gate_states == ["on"], "frames withheld until the keyframe read as lost in transport"
    set_stamps = [round(s[0] - START, 3) for s, _ in sets]
    assert not any(0.66 < t < 1.0 for t in set_stamps)
    assert any(t >= 1.0 for t in set_stamps) and any(t < 0.66 for t in set_stamps)
    assert loop.health()[0].windows_planned >= 8
