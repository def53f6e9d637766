"""Vehicle-style bags (flashdrive-sim --style vehicle) read back through rosbags: rates,
latencies, drops, stamp offsets, sizes, encodings, odometry frame and offset, extra topics, and
the same ground truth as the simulator's bag of the seed."""


from dataclasses import replace

import cv2
import numpy as np
import pytest
import yaml
from helpers.image_loss import neighbour_spread
from rosbags.interfaces import MessageDefinitionFormat, QosDurability
from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore

from flashdrive_ros.eval.bag import BagReader, header_seconds
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.images import decode_image
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.sim.bag import write_bag
from flashdrive_ros.sim.cli import main
from flashdrive_ros.sim.clock import SIM_EPOCH_NS
from flashdrive_ros.sim.messages import TYPESTORE, VELOCITY_REPORT_TYPE
from flashdrive_ros.sim.vehicle_bag import (
    VELOCITY_STATUS_TOPIC,
    VehicleStyle,
    write_vehicle_bag,
)

SEED = 4
SECONDS = 2.5
SIZES = ((96, 54), (160, 90), (96, 54), (96, 54))
STYLE = VehicleStyle(sizes=SIZES, encodings=("jpeg", "png", "bgr8", "mono8"), drop_rate=0.05)


def _messages(path):
    with Reader(path) as reader:
        return [(c.topic, c.msgtype, t, bytes(raw)) for c, t, raw in reader.messages()]


@pytest.fixture(scope="module")
def drive(tmp_path_factory):
    root = tmp_path_factory.mktemp("vehicle")
    vehicle = write_vehicle_bag(root / "vehicle", SECONDS, SEED, STYLE, width=64, height=48,
                                workers=1)
    sim = write_bag(root / "sim", SECONDS, SEED, width=64, height=48, workers=1)
    return vehicle, sim.path, _messages(vehicle.path)


def test_simulator_style_writes_the_simulator_bag(tmp_path):
    a = write_bag(tmp_path / "a", 1.0, seed=3, width=64, height=48, workers=1)
    b = write_vehicle_bag(tmp_path / "b", 1.0, 3, VehicleStyle.simulator(64, 48), width=64,
                          height=48, workers=1)
    assert sorted((t, s, r) for t, _, s, r in _messages(a.path)) == \
        sorted((t, s, r) for t, _, s, r in _messages(b.path))


def test_topics_types_and_extra_topics(drive):
    summary, _, msgs = drive
    types = {topic: msgtype for topic, msgtype, _, _ in msgs}
    assert summary.topics == {
        "cameras": ["/sensing/camera/cross_left/image_raw/compressed",
                    "/sensing/camera/front_wide/image_raw/compressed",
                    "/sensing/camera/cross_right/image_raw",
                    "/sensing/camera/front_tele/image_raw"],
        "odometry": "/localization/kinematic_state", "labels": "/sim/labels"}
    assert [types[t] for t in summary.topics["cameras"]] == \
        ["sensor_msgs/msg/CompressedImage"] * 2 + ["sensor_msgs/msg/Image"] * 2
    assert types["/tf"] == "tf2_msgs/msg/TFMessage"
    assert types["/rosout"] == "rcl_interfaces/msg/Log"
    assert types[VELOCITY_STATUS_TOPIC] == VELOCITY_REPORT_TYPE
    assert VELOCITY_REPORT_TYPE not in get_typestore(Stores.ROS2_JAZZY).types
    assert types["/sensing/camera/front_wide/camera_info"] == "sensor_msgs/msg/CameraInfo"


def test_camera_rate_drops_latency_and_stamp_offsets(drive):
    summary, _, msgs = drive
    frames = int(SECONDS * 30) + 1
    assert summary.dropped == frames * 4 - sum(summary.camera_frames) > 0
    latencies, offsets = [], []
    order = []
    for topic in summary.topics["cameras"]:
        rows = [(t, TYPESTORE.deserialize_cdr(raw, msgtype)) for top, msgtype, t, raw in msgs
                if top == topic]
        stamps = np.array([header_seconds(m) for _, m in rows]) - SIM_EPOCH_NS * 1e-9
        logs = np.array([t for t, _ in rows]) * 1e-9 - SIM_EPOCH_NS * 1e-9
        frame = np.round(stamps * 30)
        assert len(set(frame)) == len(frame) and np.diff(frame).min() >= 1
        assert np.diff(frame).max() > 1 or len(frame) == frames
        offsets.append(stamps - frame / 30)
        latencies.append(logs - stamps)
        order += [(s, log) for s, log in zip(stamps, logs)]
    for offset, latency in zip(offsets, latencies):
        assert np.ptp(offset) < 1e-6 and abs(offset[0]) <= 0.010 + 1e-6
        assert 0.035 - 1e-6 <= latency.min() and latency.max() <= 0.085 + 1e-6
        assert np.ptp(latency) <= 0.010 + 1e-6
    assert np.ptp([o[0] for o in offsets]) > 1e-3
    assert np.ptp([lat.mean() for lat in latencies]) > 5e-3
    order.sort()
    log_order = [log for _, log in order]
    assert log_order != sorted(log_order), "log times follow the stamps"


def test_sizes_and_encodings_decode_in_rgb_order(drive):
    summary, _, msgs = drive
    seen = {}
    for topic, msgtype, _, raw in msgs:
        if topic in summary.topics["cameras"] and topic not in seen:
            seen[topic] = decode_image(msgtype, TYPESTORE.deserialize_cdr(raw, msgtype))
    for (width, height), topic, enc in zip(SIZES, summary.topics["cameras"], STYLE.encodings):
        rgb = seen[topic].astype(float)
        assert rgb.shape == (height, width, 3)
        sky = rgb[: height // 6].reshape(-1, 3).mean(axis=0)
        if enc == "mono8":
            assert np.allclose(rgb[..., 0], rgb[..., 2])
        else:
            assert sky[2] > sky[0] + 10, f"{enc}: sky not blue, channels swapped"


def _first_images(path, cameras):
    """topic -> (message, msgtype) of each camera's first image."""
    seen = {}
    for topic, msgtype, _, raw in _messages(path):
        if topic in cameras and topic not in seen:
            seen[topic] = (TYPESTORE.deserialize_cdr(raw, msgtype), msgtype)
    return [seen[topic] for topic in cameras]


@pytest.mark.parametrize("encodings", [("bayer_rggb8", "yuv422", "bgr16", "8UC3"),
                                       ("bayer_gbrg8", "yuv422_yuy2", "mono16", "8UC1")])
def test_camera_encodings_of_drivers_decode_like_rgb8(tmp_path, encodings):
    """Against the same frame written as rgb8: Bayer within the demosaic bound away from the
    border (helpers/image_loss.py), YUV 4:2:2 within 3 grey levels on average (chroma shared
    by two pixels; its rounding bound is in test_ros_raw_encodings.py), the others exact
    (mono: the grey of the rgb8 frame)."""
    frames = []
    for name, encs in (("new", encodings), ("rgb8", ("rgb8",) * 4)):
        style = VehicleStyle(sizes=((64, 36),) * 4, encodings=encs, drop_rate=0.0)
        summary = write_vehicle_bag(tmp_path / name, 0.2, SEED, style, width=64, height=48,
                                    workers=1)
        frames.append(_first_images(summary.path, summary.topics["cameras"]))
    for encoding, (msg, msgtype), (reference, _) in zip(encodings, *frames):
        assert msg.encoding == encoding and msg.is_bigendian == 0
        rgb = decode_image(msgtype, msg).astype(int)
        source = decode_image("sensor_msgs/msg/Image", reference)
        if encoding in ("mono16", "8UC1"):
            source = np.repeat(cv2.cvtColor(source, cv2.COLOR_RGB2GRAY)[:, :, None], 3, axis=2)
        error = np.abs(rgb - source)
        if encoding.startswith("bayer"):
            inner = (slice(1, -1), slice(1, -1))
            assert (error[inner] <= neighbour_spread(source)[inner] + 1).all(), encoding
        elif encoding.startswith("yuv"):
            assert error.mean() < 3.0, (encoding, error.mean())
        else:
            assert error.max() == 0, encoding


def test_odometry_in_map_with_offset_keeps_the_ground_truth_and_labels(drive):
    summary, sim_path, msgs = drive
    odom = [TYPESTORE.deserialize_cdr(raw, msgtype) for topic, msgtype, _, raw in msgs
            if topic == summary.topics["odometry"]]
    assert len(odom) == summary.odometry == int(SECONDS * 50) + 1
    assert {m.header.frame_id for m in odom} == {"map"}
    assert min(m.pose.pose.position.x for m in odom) > 6e5
    topics = TopicMapping(**summary.topics)
    with BagReader(summary.path, topics) as bag:
        vehicle_track, vehicle_labels = OdometryTrack(bag.odometry()), bag.labels()
    with BagReader(sim_path, TopicMapping()) as bag:
        sim_track, sim_labels = OdometryTrack(bag.odometry()), bag.labels()
    t0 = sim_track.stamps[0] + 1.0
    assert np.allclose(vehicle_track.future(t0, 10, 0.1), sim_track.future(t0, 10, 0.1),
                       atol=1e-6)
    assert [(r.stamp, r.values) for r in vehicle_labels] == \
        [(r.stamp, r.values) for r in sim_labels]
    reports = [TYPESTORE.deserialize_cdr(raw, msgtype) for topic, msgtype, _, raw in msgs
               if topic == VELOCITY_STATUS_TOPIC]
    assert [m.header.stamp for m in reports] == [m.header.stamp for m in odom]
    assert np.allclose([m.longitudinal_velocity for m in reports],
                       [m.twist.twist.linear.x for m in odom], atol=1e-5)


def test_same_seed_same_bytes_and_sqlite3(tmp_path):
    style = VehicleStyle(sizes=((32, 24),) * 4)
    a = write_vehicle_bag(tmp_path / "a", 0.4, 9, style, width=32, height=24, workers=1)
    b = write_vehicle_bag(tmp_path / "b", 0.4, 9, style, "sqlite3", width=32, height=24,
                          workers=2)
    assert sorted((t, s, r) for t, _, s, r in _messages(a.path)) == \
        sorted((t, s, r) for t, _, s, r in _messages(b.path))


def _connections(path):
    with Reader(path) as reader:
        return {c.topic: c for c in reader.connections}


@pytest.mark.parametrize("fmt, compression, split_s", [
    ("sqlite3", "none", None), ("sqlite3", "message", 0.3), ("mcap", "storage", None)])
def test_the_humble_layout_holds_the_same_messages_without_definitions(
        tmp_path, fmt, compression, split_s):
    style = VehicleStyle(sizes=((32, 24),) * 4, compression=compression, split_s=split_s)
    jazzy = write_vehicle_bag(tmp_path / "jazzy", 0.6, 9, style, fmt, width=32, height=24,
                              workers=1)
    humble = write_vehicle_bag(tmp_path / "humble", 0.6, 9, replace(style, layout="humble"),
                               fmt, width=32, height=24, workers=1)
    assert _messages(humble.path) == _messages(jazzy.path)
    info = yaml.safe_load((humble.path / "metadata.yaml").read_text())[
        "rosbag2_bagfile_information"]
    assert info["version"] == 5 and "custom_data" not in info
    qos = {e["topic_metadata"]["name"]: e["topic_metadata"]["offered_qos_profiles"]
           for e in info["topics_with_message_count"]}
    assert isinstance(qos["/tf_static"], str) and "durability: 1" in qos["/tf_static"]
    connections = _connections(humble.path)
    assert connections["/tf_static"].ext.offered_qos_profiles[0].durability \
        == QosDurability.TRANSIENT_LOCAL
    vendor = connections[VELOCITY_STATUS_TOPIC]
    jazzy_vendor = _connections(jazzy.path)[VELOCITY_STATUS_TOPIC]
    assert jazzy_vendor.msgdef.format == MessageDefinitionFormat.MSG
    if fmt == "sqlite3":
        assert vendor.msgtype == VELOCITY_REPORT_TYPE and not vendor.msgdef.data
        files = [p for p in humble.path.iterdir() if p.name != "metadata.yaml"]
        assert len(files) == (1 if split_s is None else 3)
    else:
        assert vendor.msgdef == jazzy_vendor.msgdef
    topics = TopicMapping(**humble.topics)
    with BagReader(humble.path, topics) as bag:
        assert len(bag.odometry()) == humble.odometry


@pytest.mark.parametrize("kwargs, message", [
    ({"latency_ms": (80.0, 40.0)}, "latency_ms"),
    ({"drop_rate": 0.9}, "drop_rate"),
    ({"stamp_offset_ms": 20.0}, "stamp_offset_ms"),
    ({"encodings": ("jpeg", "jpeg", "jpeg", "nv12")}, "encodings"),
    ({"encodings": ("jpeg", "bayer_rggb8", "jpeg", "jpeg"), "sizes": ((64, 48), (64, 47),
                                                                      (64, 48), (64, 48))},
     "multiple of 2x2"),
    ({"encodings": ("jpeg", "jpeg", "jpeg", "yuv422"), "sizes": ((64, 48),) * 3 + ((63, 48),)},
     "multiple of 2x1"),
    ({"sizes": ((64, 48),) * 3}, "sizes"),
    ({"odometry_offset": (1.0, float("nan"), 0.0)}, "odometry_offset"),
    ({"layout": "iron"}, "layout"),
    ({"layout": "humble", "compression": "file"}, "without file compression"),
])
def test_bad_styles_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VehicleStyle(**kwargs)


def test_cli_vehicle_style_and_its_topics_yaml(tmp_path, capsys):
    out, topics_file = tmp_path / "bag", tmp_path / "topics.yaml"
    args = ["--out", str(out), "--seconds", "0.4", "--seed", "1", "--width", "32",
            "--height", "24", "--workers", "1", "--format", "sqlite3"]
    assert main([*args, "--drop-rate", "0.1"]) == 2
    assert "--drop-rate" in capsys.readouterr().err
    assert main([*args, "--style", "vehicle", "--camera-sizes", "32x24,48x27,32x24,32x24",
                 "--encodings", "bayer_grbg8,yuv422_yuy2,rgb16,png", "--odometry-frame", "utm",
                 "--no-extra-topics", "--layout", "humble", "--topics-out",
                 str(topics_file)]) == 0
    mapping = yaml.safe_load(topics_file.read_text())
    assert mapping["cameras"][3].endswith("/front_tele/image_raw/compressed")
    with BagReader(out, TopicMapping.from_yaml(topics_file)) as bag:
        odometry = bag.odometry()
        topics = {c.topic for c in bag.reader.connections}
    assert len(odometry) == 21 and "/tf" not in topics
    info = yaml.safe_load((out / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["version"] == 5
