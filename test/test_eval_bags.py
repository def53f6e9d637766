"""Bags written with rosbags for the replay tests (helpers imported by the other eval tests),
and the bag-reading tests."""

import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from flashdrive_ros.eval.bag import BagReader, ImageRecord, LabelRecord, OdometryRecord
from flashdrive_ros.eval.errors import (BagNotFound, CorruptBag, EmptyBag, MissingTopics,
                                        TopicsConfigError, UnknownMessageType)
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.topics import TopicMapping

TYPESTORE = get_typestore(Stores.ROS2_JAZZY)
T_START = 100.0
SPEED = 5.0
YAW_RATE = 0.2
START_YAW = 0.3
START_XY = (10.0, -5.0)


def ego_pose(t):
    """Unicycle on a circle: world (x, y, yaw) at bag time t."""
    tau = t - T_START
    yaw = START_YAW + YAW_RATE * tau
    radius = SPEED / YAW_RATE
    x = START_XY[0] + radius * (math.sin(yaw) - math.sin(START_YAW))
    y = START_XY[1] - radius * (math.cos(yaw) - math.cos(START_YAW))
    return x, y, yaw


def _stamp(t):
    ns = int(round(t * 1e9))
    return TYPESTORE.types["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9)


def _header(t, frame="base_link"):
    return TYPESTORE.types["std_msgs/msg/Header"](stamp=_stamp(t), frame_id=frame)


def odometry_msg(t, frame="odom", offset=(0.0, 0.0)):
    ts = TYPESTORE.types
    x, y, yaw = ego_pose(t)
    pose = ts["geometry_msgs/msg/Pose"](
        position=ts["geometry_msgs/msg/Point"](x=x + offset[0], y=y + offset[1], z=0.0),
        orientation=ts["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=math.sin(yaw / 2),
                                                       w=math.cos(yaw / 2)))
    twist = ts["geometry_msgs/msg/Twist"](
        linear=ts["geometry_msgs/msg/Vector3"](x=SPEED, y=0.0, z=0.0),
        angular=ts["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=YAW_RATE))
    return ts["nav_msgs/msg/Odometry"](
        header=_header(t, frame), child_frame_id="base_link",
        pose=ts["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
        twist=ts["geometry_msgs/msg/TwistWithCovariance"](twist=twist, covariance=np.zeros(36)))


def make_image(camera, frame, width, height):
    rng = np.random.default_rng(1000 * camera + frame)
    image = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    image[: height // 2] = (40 * camera, 200, 10 * (frame % 20))
    return image


def image_msg(rgb, t, raw, corrupt=False):
    ts = TYPESTORE.types
    if raw:
        h, w = rgb.shape[:2]
        data = rgb.reshape(-1).copy()
        if corrupt:
            data = data[: data.size // 2]
        return ts["sensor_msgs/msg/Image"](header=_header(t, "cam"), height=h, width=w,
                                           encoding="rgb8", is_bigendian=0, step=w * 3,
                                           data=data)
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    assert ok
    data = jpeg.reshape(-1) if not corrupt else np.frombuffer(b"not an image", np.uint8)
    return ts["sensor_msgs/msg/CompressedImage"](header=_header(t, "cam"), format="jpeg",
                                                 data=data)


def write_drive_bag(path, *, seconds=3.0, storage="mcap", raw=False, topics=None, width=64,
                    height=48, labels=True, corrupt_frames=(), skip_topics=(),
                    extra_topics=(), camera_latency=(), dropped_frames=(), sizes=(),
                    odom_frame="odom", odom_offset=(0.0, 0.0)):
    """Cameras at 10 Hz, odometry at 50 Hz on a circle, labels at 10 Hz, from T_START.
    corrupt_frames: (camera, frame index) pairs whose payload is broken; dropped_frames:
    (camera, frame index) pairs left out; camera_latency: per camera, seconds from stamp to
    log time; sizes: per camera (width, height) instead of width x height."""
    topics = topics or TopicMapping()
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    image_type = "sensor_msgs/msg/Image" if raw else "sensor_msgs/msg/CompressedImage"
    events = []
    for k in range(int(round(seconds * 50)) + 1):
        t = T_START + k * 0.02
        events.append((t, 0, topics.odometry, "nav_msgs/msg/Odometry",
                       odometry_msg(t, odom_frame, odom_offset)))
    for frame in range(int(round(seconds * 10)) + 1):
        t = T_START + frame * 0.1
        for cam, topic in enumerate(topics.cameras):
            if (cam, frame) in dropped_frames:
                continue
            size = sizes[cam] if sizes else (width, height)
            msg = image_msg(make_image(cam, frame, *size), t, raw,
                            (cam, frame) in corrupt_frames)
            latency = camera_latency[cam] if camera_latency else 0.0
            events.append((t + latency, 1 + cam, topic, image_type, msg))
        if labels and topics.labels:
            decision = "stop" if frame % 2 else "keep lane"
            text = json.dumps({"t": t, "coc": f"clear road, {decision}", "decision": decision,
                               "tags": ["red_light_stop"] if frame % 2 else ["keep_lane"]})
            events.append((t, 9, topics.labels, "std_msgs/msg/String",
                           TYPESTORE.types["std_msgs/msg/String"](data=text)))
    events += list(extra_topics)
    events.sort(key=lambda e: (e[0], e[1]))
    with Writer(Path(path), version=9, storage_plugin=plugin) as writer:
        connections = {}
        for t, _, topic, msgtype, msg in events:
            if topic in skip_topics:
                continue
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=TYPESTORE)
            writer.write(connections[topic], int(round(t * 1e9)),
                         TYPESTORE.serialize_cdr(msg, msgtype))
    return Path(path)


def read_all(path, topics=None):
    with BagReader(path, topics or TopicMapping()) as bag:
        return bag, list(bag.records())


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
@pytest.mark.parametrize("raw", [False, True])
def test_reads_images_odometry_and_labels(tmp_path, storage, raw):
    path = write_drive_bag(tmp_path / "bag", seconds=0.5, storage=storage, raw=raw)
    bag, records = read_all(path)
    images = [r for r in records if isinstance(r, ImageRecord)]
    odometry = [r for r in records if isinstance(r, OdometryRecord)]
    labels = [r for r in records if isinstance(r, LabelRecord)]
    assert len(images) == 4 * 6 and len(odometry) == 26 and len(labels) == 6
    assert bag.has_labels
    first = next(r for r in images if r.camera == 2)
    assert first.stamp == pytest.approx(T_START)
    expected = make_image(2, 0, 64, 48)
    assert first.rgb.shape == (48, 64, 3) and first.rgb.dtype == np.uint8
    tolerance = 0 if raw else 8
    assert np.abs(first.rgb[:16].astype(int) - expected[:16]).max() <= tolerance
    x, y, yaw = ego_pose(odometry[5].stamp)
    assert odometry[5].position[:2] == pytest.approx([x, y])
    assert odometry[5].quaternion[2:] == pytest.approx([math.sin(yaw / 2), math.cos(yaw / 2)])
    assert labels[1].values["decision"] == "stop"


def test_topics_yaml_maps_other_names_and_resolution(tmp_path):
    topics_file = tmp_path / "topics.yaml"
    topics_file.write_text("cameras: [/cam/a, /cam/b, /cam/c, /cam/d]\n"
                           "odometry: /ego/odom\nlabels: null\n")
    topics = TopicMapping.from_yaml(topics_file)
    assert topics.labels is None
    path = write_drive_bag(tmp_path / "bag", seconds=0.3, raw=True, topics=TopicMapping(
        cameras=topics.cameras, odometry=topics.odometry, labels="/other/labels"),
        width=40, height=30)
    bag, records = read_all(path, topics)
    assert not bag.has_labels
    cams = sorted({r.camera for r in records if isinstance(r, ImageRecord)})
    assert cams == [0, 1, 2, 3]
    assert all(r.rgb.shape == (30, 40, 3) for r in records if isinstance(r, ImageRecord))


def test_bag_storage_file_path_is_accepted(tmp_path):
    path = write_drive_bag(tmp_path / "bag", seconds=0.2)
    bag, records = read_all(next(path.glob("*.mcap")))
    assert records


@pytest.mark.parametrize("text, message", [
    ("cameras: /a\n", "must be a list"),
    ("cams: [/a]\n", "unknown keys"),
    ("cameras: [a]\nodometry: /o\n", "absolute topic name"),
    ("cameras: [/a, /a]\nodometry: /o\n", "twice"),
    ("- just a list\n", "mapping"),
    ("cameras: [/a\n", "does not parse"),
])
def test_bad_topics_yaml(tmp_path, text, message):
    topics_file = tmp_path / "topics.yaml"
    topics_file.write_text(text)
    with pytest.raises(TopicsConfigError, match=message):
        TopicMapping.from_yaml(topics_file)


def test_missing_bag_and_non_bag_directory(tmp_path):
    with pytest.raises(BagNotFound, match="not found"):
        BagReader(tmp_path / "nothing", TopicMapping())
    with pytest.raises(CorruptBag, match="metadata.yaml"):
        BagReader(tmp_path, TopicMapping())


def test_missing_topic_is_named(tmp_path):
    topics = TopicMapping()
    path = write_drive_bag(tmp_path / "bag", seconds=0.3, skip_topics=(topics.cameras[1],))
    with pytest.raises(MissingTopics, match=topics.cameras[1].replace("/", ".")):
        read_all(path)


def test_wrong_type_on_camera_topic(tmp_path):
    topics = TopicMapping(labels=None)
    bad = [(T_START, 0, "/strings", "std_msgs/msg/String",
            TYPESTORE.types["std_msgs/msg/String"](data="x"))]
    path = write_drive_bag(tmp_path / "bag", seconds=0.3, labels=False, extra_topics=bad)
    mapping = TopicMapping(cameras=(*topics.cameras[:3], "/strings"), labels=None)
    with pytest.raises(UnknownMessageType, match="/strings has type std_msgs/msg/String"):
        read_all(path, mapping)


def test_empty_bag(tmp_path):
    with Writer(tmp_path / "bag", version=9, storage_plugin=StoragePlugin.MCAP):
        pass
    with pytest.raises(EmptyBag, match="no messages"):
        read_all(tmp_path / "bag")


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_truncated_bag(tmp_path, storage):
    path = write_drive_bag(tmp_path / "bag", seconds=0.5, storage=storage)
    storage_file = next(p for p in path.iterdir() if p.suffix in (".mcap", ".db3"))
    with open(storage_file, "r+b") as f:
        f.truncate(storage_file.stat().st_size // 2)
    with pytest.raises(CorruptBag, match="cannot open bag"):
        read_all(path)


def test_corrupt_payloads_become_error_records(tmp_path):
    path = write_drive_bag(tmp_path / "bag", seconds=0.3, corrupt_frames={(1, 2)})
    _, records = read_all(path)
    bad = [r for r in records if isinstance(r, ImageRecord) and r.rgb is None]
    assert len(bad) == 1 and bad[0].camera == 1
    assert bad[0].stamp == pytest.approx(T_START + 0.2)
    assert "corrupt_payload" in bad[0].error


def test_ground_truth_on_a_circle_in_the_ego_frame(tmp_path):
    path = write_drive_bag(tmp_path / "bag", seconds=8.0, labels=False)
    with BagReader(path, TopicMapping()) as bag:
        track = OdometryTrack(bag.odometry())
    t0 = T_START + 1.0
    future = track.future(t0)
    tau = 0.1 * np.arange(1, 65)
    radius = SPEED / YAW_RATE
    expected = np.stack([radius * np.sin(YAW_RATE * tau),
                         radius * (1 - np.cos(YAW_RATE * tau)), YAW_RATE * tau], axis=1)
    assert future.shape == (64, 3)
    assert np.abs(future - expected).max() < 0.02  # linear interpolation of 50 Hz samples
    cv = track.constant_velocity(t0)
    assert cv[:, 0] == pytest.approx(SPEED * tau)
    assert cv[:, 1:] == pytest.approx(np.zeros((64, 2)))
    assert track.future(T_START + 1.7) is None  # 6.4 s later is past the end (8 s)
    assert track.future(T_START + 1.6) is not None


def test_constant_velocity_falls_back_to_poses_without_twist():
    records = [OdometryRecord(t, np.array([4.0 * t, 0.0, 0.0]), np.array([0.0, 0.0, 0.0, 1.0]),
                              np.zeros(3)) for t in np.arange(0.0, 2.0, 0.02)]
    track = OdometryTrack(records)
    assert track.velocity(1.0) == pytest.approx([4.0, 0.0])
    parked = OdometryTrack([OdometryRecord(r.stamp, np.zeros(3), r.quaternion, np.zeros(3))
                            for r in records])
    assert parked.velocity(1.0) == pytest.approx([0.0, 0.0])


def write_tiny_model(path, max_coc_tokens=4):
    """The tiny config with random weights (seed 0), a drafter, and a short CoC budget."""
    import torch

    from flashdrive_ros.model.alpamayo import AlpamayoModel
    from flashdrive_ros.model.config import tiny
    from flashdrive_ros.model.drafter import Drafter
    from flashdrive_ros.model.tokenizer import build_tokenizer
    from flashdrive_ros.model.weights import save_model_dir

    tokenizer = build_tokenizer(["slow down and stop because the light is red",
                                 "keep lane and maintain speed, the road is clear"] * 10,
                                vocab_size=4400)
    cfg = tiny(vocab_size=tokenizer.vocab_size)
    cfg.prompt.max_coc_tokens = max_coc_tokens
    torch.manual_seed(0)
    model = AlpamayoModel(cfg).eval()
    save_model_dir(model, cfg, tokenizer, path)
    Drafter(cfg.drafter, cfg.text).save_safetensors(Path(path) / "drafter.safetensors")
    return Path(path)
