"""Topics YAML schema errors, the missing-topics error of a vehicle bag, and flashdrive-topics
proposing a mapping the replay accepts."""

import pytest
import yaml

from flashdrive_ros.eval.bag import BagReader, TopicInfo
from flashdrive_ros.eval.errors import MissingTopics, TopicsConfigError
from flashdrive_ros.eval.topic_proposal import ProposalError, propose
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.eval.topics_cli import main
from flashdrive_ros.sim.topics import CAMERA_NAMES
from flashdrive_ros.sim.vehicle_bag import (
    VELOCITY_STATUS_TOPIC,
    VehicleStyle,
    write_vehicle_bag,
)

CAMS = "cameras: [/c/a, /c/b, /c/c, /c/d]\n"
SLOTS = tuple(CAMERA_NAMES)
COMPRESSED, RAW = "sensor_msgs/msg/CompressedImage", "sensor_msgs/msg/Image"
ODOM = "nav_msgs/msg/Odometry"


@pytest.fixture(scope="module")
def vehicle_bag(tmp_path_factory):
    style = VehicleStyle(camera_hz=10.0, sizes=((32, 24),) * 4, drop_rate=0.0,
                         encodings=("jpeg", "bgr8", "png", "rgb8"))
    return write_vehicle_bag(tmp_path_factory.mktemp("topics") / "bag", 0.5, 2, style,
                             width=32, height=24, workers=1)


def _load(tmp_path, text, **given):
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    return TopicMapping.from_yaml(path, **given)


@pytest.mark.parametrize("text, messages", [
    (CAMS, ["missing keys ['odometry']", "--odom-topic"]),
    ("odometry: /o\n", ["missing keys ['cameras']", "--camera-topics"]),
    (CAMS + "odometry: /o\nlabel: /l\ncamera: /x\n",
     ["unknown keys ['camera', 'label']", "known: cameras, odometry, labels"]),
    ("cameras: /c/a\nodometry: /o\n", ["cameras must be a list of topic names",
                                       "got str '/c/a'"]),
    (CAMS + "odometry: 5\n", ["odometry must be a topic name", "got int 5"]),
    (CAMS + "odometry: /o\nlabels: [/l]\n", ["labels must be a topic name", "or null"]),
    ("cameras:\n  front: /c/a\n  odometry: /o\n",
     ["cameras must be a list", "a mapping with keys ['front', 'odometry']",
      "missing keys ['odometry']"]),
    ("cameras:\n- /c/a\n- /c/b\n  /c/c\n- /c/d\nodometry: /o\n",
     ["'/c/b /c/c' is not an absolute topic name", "check the indentation"]),
    ("cameras:\n  /c/a\n  /c/b\nodometry: /o\n",
     ["cameras must be a list", "got str '/c/a /c/b'"]),
    ("cameras:\n  - /c/a\n odometry: /o\n", ["does not parse", "indentation"]),
    ("just text\n", ["must hold a mapping", "cameras:"]),
])
def test_schema_errors_name_the_key_type_and_fix(tmp_path, text, messages):
    with pytest.raises(TopicsConfigError) as exc:
        _load(tmp_path, text)
    for message in messages:
        assert message in str(exc.value)
    assert "flashdrive-topics BAG --out topics.yaml" in str(exc.value)


def test_labels_left_out_means_no_labels_and_flags_fill_missing_keys(tmp_path):
    topics = _load(tmp_path, CAMS + "odometry: /o\n")
    assert topics.labels is None and topics.odometry == "/o"
    topics = _load(tmp_path, CAMS, odometry="/ego/odom", labels="")
    assert (topics.odometry, topics.labels) == ("/ego/odom", None)
    topics = _load(tmp_path, "odometry: /o\nlabels: /l\n", cameras=["/x/a", "/x/b"])
    assert topics.cameras == ("/x/a", "/x/b") and topics.labels == "/l"


def test_missing_camera_topics_name_the_present_ones_and_the_fix(vehicle_bag):
    with pytest.raises(MissingTopics) as exc:
        BagReader(vehicle_bag.path, TopicMapping()).__enter__()
    text = str(exc.value)
    assert "--topics-yaml" in text and "flashdrive-topics" in text
    assert "/sensing/camera/front_wide/image_raw (sensor_msgs/msg/Image, 6 messages)" in text
    assert "/localization/kinematic_state (nav_msgs/msg/Odometry" in text


def test_proposal_for_a_vehicle_bag_is_its_mapping_and_replays(vehicle_bag, tmp_path, capsys):
    out = tmp_path / "proposal.yaml"
    assert main([str(vehicle_bag.path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "/tf " in printed and "rcl_interfaces/msg/Log" in printed and "rate (Hz)" in printed
    assert "mix Image and CompressedImage" in printed
    assert yaml.safe_load(out.read_text()) == vehicle_bag.topics
    with BagReader(vehicle_bag.path, TopicMapping.from_yaml(out)) as bag:
        assert len(bag.odometry()) == 26 and bag.has_labels


def test_a_humble_sqlite3_bag_with_a_vendor_type_gets_its_mapping(tmp_path, capsys):
    style = VehicleStyle(camera_hz=10.0, sizes=((32, 24),) * 4, drop_rate=0.0,
                         layout="humble")
    bag = write_vehicle_bag(tmp_path / "bag", 0.5, 2, style, "sqlite3", width=32, height=24,
                            workers=1)
    out = tmp_path / "proposal.yaml"
    assert main([str(bag.path), "--out", str(out)]) == 0
    assert f"{VELOCITY_STATUS_TOPIC} " in capsys.readouterr().out
    assert yaml.safe_load(out.read_text()) == bag.topics
    with BagReader(bag.path, TopicMapping.from_yaml(out)) as reader:
        assert len(reader.odometry()) == 26 and reader.has_labels


def test_proposal_prefers_compressed_and_flags_guesses():
    infos = [TopicInfo("/cams/front/image", RAW, 30), TopicInfo("/cams/front/image/compressed",
                                                                COMPRESSED, 30),
             TopicInfo("/cams/front_narrow/image", RAW, 30),
             TopicInfo("/cams/left/image", RAW, 30), TopicInfo("/cams/right/image", RAW, 30),
             TopicInfo("/vehicle/odom", ODOM, 100), TopicInfo("/gnss/odometry_raw", ODOM, 200)]
    proposal = propose(infos, SLOTS)
    assert proposal.mapping.cameras == ("/cams/left/image", "/cams/front/image/compressed",
                                        "/cams/right/image", "/cams/front_narrow/image")
    assert proposal.mapping.odometry == "/gnss/odometry_raw"
    assert proposal.mapping.labels is None
    guess = propose([TopicInfo(f"/cam{i}/image", COMPRESSED, 10) for i in "abcd"]
                    + [TopicInfo("/odom", ODOM, 10)], SLOTS)
    assert guess.mapping.cameras == tuple(f"/cam{i}/image" for i in "abcd")
    assert sum("GUESSED" in note for note in guess.notes) == 4


def test_no_proposal_without_cameras_or_odometry(vehicle_bag, tmp_path, capsys):
    with pytest.raises(ProposalError, match="2 image topics"):
        propose([TopicInfo("/a/image", RAW, 1), TopicInfo("/b/image", RAW, 1)], SLOTS)
    with pytest.raises(ProposalError, match="no nav_msgs/msg/Odometry"):
        propose([TopicInfo(f"/{i}/image", RAW, 1) for i in "abcd"], SLOTS)
    assert main([str(tmp_path / "nothing")]) == 2
    assert "not found" in capsys.readouterr().err
