"""flashdrive-sim bags read back through rosbags: topics, types, rates, stamps, images."""

import json

import cv2
import numpy as np
import pytest
from rosbags.rosbag2 import Reader

from flashdrive_ros.sim.bag import write_bag
from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.sim.clock import SIM_EPOCH_NS
from flashdrive_ros.sim.labels import DECISIONS
from flashdrive_ros.sim.messages import TYPESTORE
from flashdrive_ros.sim.topics import (
    CAMERA_NAMES,
    LABELS_TOPIC,
    ODOMETRY_TOPIC,
    TF_STATIC_TOPIC,
    camera_image_topic,
    camera_info_topic,
)

W, H = 128, 80
SECONDS = 10.0


def _messages(path):
    with Reader(path) as reader:
        return [(c.topic, c.msgtype, t, bytes(raw)) for c, t, raw in reader.messages()]


@pytest.fixture(scope="module")
def bags(tmp_path_factory):
    root = tmp_path_factory.mktemp("bags")
    out = {}
    for fmt, workers in (("mcap", 1), ("sqlite3", 2)):
        summary = write_bag(root / fmt, SECONDS, seed=7, fmt=fmt, width=W, height=H,
                            workers=workers)
        assert summary.frames == 101 and summary.odometry == 501
        out[fmt] = _messages(root / fmt)
    return out


EXPECTED = {
    **{camera_image_topic(n): ("sensor_msgs/msg/CompressedImage", 101) for n in CAMERA_NAMES},
    **{camera_info_topic(n): ("sensor_msgs/msg/CameraInfo", 101) for n in CAMERA_NAMES},
    ODOMETRY_TOPIC: ("nav_msgs/msg/Odometry", 501),
    LABELS_TOPIC: ("std_msgs/msg/String", 101),
    TF_STATIC_TOPIC: ("tf2_msgs/msg/TFMessage", 1),
}


@pytest.mark.parametrize("fmt", ["mcap", "sqlite3"])
def test_bag_topics_types_rates_and_stamps(bags, fmt):
    msgs = bags[fmt]
    by_topic = {}
    for topic, msgtype, t, raw in msgs:
        by_topic.setdefault(topic, []).append((msgtype, t, raw))
    assert set(by_topic) == set(EXPECTED)
    for topic, (msgtype, count) in EXPECTED.items():
        rows = by_topic[topic]
        assert len(rows) == count, topic
        assert {r[0] for r in rows} == {msgtype}
        stamps = np.array([r[1] for r in rows], dtype=np.int64)
        assert stamps[0] == SIM_EPOCH_NS
        if count > 1:
            steps = np.diff(stamps)
            assert (steps > 0).all(), f"{topic} stamps not increasing"
            expected_dt = 20_000_000 if topic == ODOMETRY_TOPIC else 100_000_000
            assert np.all(np.abs(steps - expected_dt) <= 1), topic
        for _, t, raw in rows:
            msg = TYPESTORE.deserialize_cdr(raw, msgtype)
            head = msg.transforms[0].header if topic == TF_STATIC_TOPIC else \
                getattr(msg, "header", None)
            if head is not None:
                assert head.stamp.sec * 1_000_000_000 + head.stamp.nanosec == t


def test_bag_payloads_decode(bags):
    msgs = bags["mcap"]
    specs = {s.name: s for s in rig()}
    for topic, msgtype, _, raw in msgs[:400]:
        msg = TYPESTORE.deserialize_cdr(raw, msgtype)
        if msgtype == "sensor_msgs/msg/CompressedImage":
            img = cv2.imdecode(msg.data, cv2.IMREAD_COLOR)
            assert img is not None and img.shape == (H, W, 3)
            assert msg.format == "jpeg" and msg.header.frame_id in CAMERA_NAMES
            assert img.std() > 10, "blank image"
        elif msgtype == "sensor_msgs/msg/CameraInfo":
            spec = specs[msg.header.frame_id]
            assert (msg.width, msg.height) == (W, H)
            assert np.allclose(msg.k.reshape(3, 3), spec.intrinsics(W, H))
            assert np.allclose(msg.p.reshape(3, 4)[:, :3], spec.intrinsics(W, H))
            assert np.allclose(msg.d, 0.0) and msg.distortion_model == "plumb_bob"
        elif msgtype == "nav_msgs/msg/Odometry":
            assert (msg.header.frame_id, msg.child_frame_id) == ("odom", "base_link")
            q = msg.pose.pose.orientation
            assert q.x ** 2 + q.y ** 2 + q.z ** 2 + q.w ** 2 == pytest.approx(1.0)
            assert 0.0 <= msg.twist.twist.linear.x < 20.0
        elif msgtype == "std_msgs/msg/String":
            label = json.loads(msg.data)
            assert set(label) == {"t", "coc", "decision", "tags"}
            assert label["decision"] in DECISIONS and 10 <= len(label["coc"].split()) <= 25
        elif msgtype == "tf2_msgs/msg/TFMessage":
            assert {tf.child_frame_id for tf in msg.transforms} == set(CAMERA_NAMES)


def test_same_seed_gives_identical_messages_across_formats_and_workers(bags):
    mcap = [(topic, t, raw) for topic, _, t, raw in bags["mcap"]]
    sqlite = [(topic, t, raw) for topic, _, t, raw in bags["sqlite3"]]
    assert sorted(mcap) == sorted(sqlite)


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    a = write_bag(tmp_path / "a", 1.0, seed=3, width=64, height=48, workers=1)
    b = write_bag(tmp_path / "b", 1.0, seed=3, width=64, height=48, workers=1)
    c = write_bag(tmp_path / "c", 1.0, seed=4, width=64, height=48, workers=1)
    ma, mb, mc = (_messages(s.path) for s in (a, b, c))
    assert ma == mb
    assert ma != mc


def test_bad_bag_requests_are_refused(tmp_path):
    (tmp_path / "exists").mkdir()
    with pytest.raises(FileExistsError):
        write_bag(tmp_path / "exists", 1.0, seed=0, width=64, height=48)
    with pytest.raises(ValueError, match="format"):
        write_bag(tmp_path / "x", 1.0, seed=0, fmt="rosbag1")
    with pytest.raises(ValueError, match="image size"):
        write_bag(tmp_path / "y", 1.0, seed=0, width=4, height=4)
