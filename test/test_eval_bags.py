"""Reading bags: records, topic mappings and the errors of broken or missing bags."""

import math

import numpy as np
import pytest
from helpers.bags import SPEED, T_START, TYPESTORE, YAW_RATE, ego_pose, make_image, write_drive_bag
from rosbags.rosbag2 import StoragePlugin, Writer

from flashdrive_ros.eval.bag import BagReader, ImageRecord, LabelRecord, OdometryRecord
from flashdrive_ros.eval.errors import (
    BagNotFound,
    CorruptBag,
    EmptyBag,
    MissingTopics,
    TopicsConfigError,
    UnknownMessageType,
)
from flashdrive_ros.eval.ground_truth import OdometryTrack
from flashdrive_ros.eval.topics import TopicMapping


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


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_odometry_and_labels_come_from_one_pass_over_the_bag(tmp_path, storage, monkeypatch):
    path = write_drive_bag(tmp_path / "bag", seconds=0.5, storage=storage)
    with BagReader(path, TopicMapping()) as bag:
        everything = list(bag.records())
        passes = []
        read = BagReader.records

        def counted(self, topics=None):
            passes.append(topics)
            return read(self, topics)

        monkeypatch.setattr(BagReader, "records", counted)
        odometry, labels = bag.odometry(), bag.labels()
        assert bag.odometry() is odometry and bag.labels() is labels
    assert passes == [[TopicMapping().odometry, TopicMapping().labels]]
    assert [r.stamp for r in odometry] == [r.stamp for r in everything
                                          if isinstance(r, OdometryRecord)]
    assert [r.values for r in labels] == [r.values for r in everything
                                          if isinstance(r, LabelRecord)]
    assert len(odometry) == 26 and len(labels) == 6


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


def test_truncated_sqlite3_bag(tmp_path):
    path = write_drive_bag(tmp_path / "bag", seconds=0.5, storage="sqlite3")
    storage_file = next(path.glob("*.db3"))
    with open(storage_file, "r+b") as f:
        f.truncate(storage_file.stat().st_size // 2)
    with pytest.raises(CorruptBag, match="cannot open bag"):
        read_all(path)


def test_mcap_cut_off_inside_its_first_chunk_holds_no_message(tmp_path):
    path = write_drive_bag(tmp_path / "bag", seconds=0.5)
    storage_file = next(path.glob("*.mcap"))
    with open(storage_file, "r+b") as f:
        f.truncate(storage_file.stat().st_size // 2)
    with pytest.raises(EmptyBag, match="holds no messages; bag.mcap: the recording was cut off"):
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

