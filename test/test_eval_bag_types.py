"""A logger's bag whose other topics carry unusable message definitions still replays."""

import pytest
from helpers.bags import write_drive_bag
from helpers.foreign_topics import BYTES, FOREIGN, STATUS_DEF, UNREADABLE
from rosbags.interfaces import (
    Connection,
    ConnectionExtRosbag2,
    MessageDefinition,
    MessageDefinitionFormat,
)
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.errors import UnknownMessageType
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.eval.topics_cli import main as topics_main
from flashdrive_ros.ros.harness.bag_types import TolerantBagReader, topic_types, type_closure
from flashdrive_ros.ros.harness.stream import read_stream

@pytest.fixture(params=["mcap", "sqlite3"])
def logger_bag(request, tmp_path):
    return write_drive_bag(tmp_path / "bag", storage=request.param, foreign_topics=FOREIGN)


def test_each_topic_is_typed_on_its_own(logger_bag):
    with TolerantBagReader([logger_bag],
                           default_typestore=get_typestore(Stores.ROS2_JAZZY)) as reader:
        assert reader.unreadable == UNREADABLE
        status = next(c for c in reader.connections if c.topic == "/vehicle/status")
        _, _, raw = next(iter(reader.messages(connections=[status])))
        msg = reader.deserialize(raw, status.msgtype)
        assert (msg.level, msg.text) == (7, "ok")
        odometry = [c for c in reader.connections if c.topic == TopicMapping().odometry]
        assert sum(1 for _ in reader.messages(connections=odometry)) == 151
    assert {m.topic for m in read_stream(logger_bag)} >= set(UNREADABLE)


def test_the_replay_reads_the_mapped_topics_and_names_the_unread_ones(logger_bag):
    with BagReader(logger_bag, TopicMapping()) as bag:
        assert len(bag.odometry()) == 151 and not any(
            getattr(r, "error", None) for r in bag.records())
        assert [n for n in bag.input_notes() if "not read" in n] == [
            f"{topic}: not read: {why}" for topic, why in sorted(UNREADABLE.items())]


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_a_mapped_topic_whose_definition_is_stale_is_a_clear_error(tmp_path, storage):
    """A bag stores one definition per type: here a recorder's Odometry that is not the one
    the recorded hash names, so the odometry cannot be read."""
    stale = ("/localization/odometry_unused", "nav_msgs/msg/Odometry", "int32 a\n",
             "RIHS01_" + "3" * 64, BYTES)
    bag = write_drive_bag(tmp_path / "bag", storage=storage, foreign_topics=(stale,))
    with pytest.raises(UnknownMessageType, match=f"topic {TopicMapping().odometry} cannot be "
                                                 f"read: its recorded definition of nav_msgs"):
        BagReader(bag, TopicMapping()).__enter__()


def test_the_topic_listing_names_the_unread_topics(logger_bag, capsys):
    assert topics_main([str(logger_bag)]) == 0
    out = capsys.readouterr().out
    for topic, why in UNREADABLE.items():
        assert f"{topic}: not read: {why}" in out


def connection(topic, msgtype, definition, form=MessageDefinitionFormat.MSG):
    return Connection(0, topic, msgtype, MessageDefinition(form, definition), "", 1,
                      ConnectionExtRosbag2("cdr", []), None)


def test_two_files_that_define_a_type_differently_keep_the_first_definition():
    """And a topic recorded without a definition takes Jazzy's; an IDL definition is read."""
    jazzy = get_typestore(Stores.ROS2_JAZZY)
    idl = f"{'=' * 80}\nIDL: custom_msgs/msg/Idl\nmodule custom_msgs {{ module msg {{ " \
          "struct Idl { int32 x; double y; }; }; };"
    types = topic_types([connection("/a", "custom_msgs/msg/Status", STATUS_DEF),
                         connection("/b", "custom_msgs/msg/Status", "int32 level\n"),
                         connection("/c", "sensor_msgs/msg/Imu", "",
                                    MessageDefinitionFormat.NONE),
                         connection("/d", "custom_msgs/msg/Idl", idl,
                                    MessageDefinitionFormat.IDL)], jazzy)
    assert types.unreadable == {"/b": "another topic of the bag defines custom_msgs/msg/Status "
                                      "differently"}
    assert [name for name, _ in types.store.fielddefs["custom_msgs/msg/Status"][1]] == [
        "level", "text"]
    assert [name for name, _ in types.store.fielddefs["custom_msgs/msg/Idl"][1]] == ["x", "y"]
    assert "sensor_msgs/msg/Imu" in types.store.types


def test_missing_types_follows_arrays_and_nested_types():
    types = dict(get_types_from_msg("custom_msgs/Inner[3] inner\ncustom_msgs/Leaf[] leaves\n"
                                    "int32 x\n", "custom_msgs/msg/Outer"))
    assert type_closure(types, "custom_msgs/msg/Outer") == (
        {"custom_msgs/msg/Outer": types["custom_msgs/msg/Outer"]},
        ["custom_msgs/msg/Inner", "custom_msgs/msg/Leaf"])
    types.update(get_types_from_msg("custom_msgs/Leaf leaf\n", "custom_msgs/msg/Inner"))
    types.update(get_types_from_msg("float64 v\n", "custom_msgs/msg/Leaf"))
    types.update(get_types_from_msg("float64 w\n", "custom_msgs/msg/Unused"))
    needed, missing = type_closure(types, "custom_msgs/msg/Outer")
    assert sorted(needed) == ["custom_msgs/msg/Inner", "custom_msgs/msg/Leaf",
                              "custom_msgs/msg/Outer"] and missing == []
