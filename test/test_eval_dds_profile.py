"""The through-ROS replay's DDS profile choice (auto: the shipped large-image profile for
camera messages over Fast DDS's default shared-memory segment), the environment it sets for
the player and the node, and the console lines on camera messages lost between them."""

import pytest

from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.dds_profile import (
    AUTO,
    DDS_PROFILE_VARIABLES,
    ENVIRONMENT,
    FASTDDS_DEFAULT_SEGMENT_BYTES,
    LARGE_IMAGES_PROFILE,
    DdsChoice,
    choose_dds_profile,
    dds_profile_environment,
    segment_bytes,
)
from flashdrive_ros.eval.input_notes import input_lines, transport_lines
from flashdrive_ros.eval.through_ros import camera_transport
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.sim.vehicle_bag import VehicleStyle, write_vehicle_bag

LARGE = 1920 * 1080 * 3 + 100


def roomy_shm() -> int:
    return 2**30


def test_auto_takes_the_large_image_profile_only_for_messages_over_the_default_segment():
    choice = choose_dds_profile(AUTO, LARGE, environ={}, shm_free=roomy_shm)
    assert choice.profile is not None and choice.profile.name == LARGE_IMAGES_PROFILE
    assert choice.profile.is_file()
    assert "5.9 MiB" in choice.note and "--dds-profile environment" in choice.note
    assert choose_dds_profile(AUTO, FASTDDS_DEFAULT_SEGMENT_BYTES, environ={},
                              shm_free=roomy_shm) == DdsChoice(None)


def test_auto_keeps_the_defaults_and_says_why_where_dev_shm_is_too_small_for_the_profile():
    profile = choose_dds_profile(AUTO, LARGE, environ={}, shm_free=roomy_shm).profile
    assert segment_bytes(profile) == 256 * 2**20
    choice = choose_dds_profile(AUTO, LARGE, environ={}, shm_free=lambda: 64 * 2**20)
    assert choice.profile is None
    assert "/dev/shm has 64 MiB free" in choice.note and "needs 512 MiB" in choice.note
    assert "--shm-size" in choice.note


@pytest.mark.parametrize("environ", [
    {"FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/car_dds.xml"},
    {"FASTDDS_DEFAULT_PROFILES_FILE": "/etc/car_dds.xml"},
    {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"},
])
def test_auto_leaves_a_configured_environment_alone(environ):
    assert choose_dds_profile(AUTO, LARGE, environ=environ, shm_free=roomy_shm) == \
        DdsChoice(None)


def test_environment_and_a_file_are_taken_as_asked(tmp_path):
    assert choose_dds_profile(ENVIRONMENT, LARGE, environ={}, shm_free=roomy_shm) == \
        DdsChoice(None)
    xml = tmp_path / "mine.xml"
    assert choose_dds_profile(xml, 10, environ={}, shm_free=lambda: 0) == DdsChoice(xml)


def test_the_profile_environment_is_set_inside_the_block_and_restored_after(tmp_path):
    environ = {"FASTRTPS_DEFAULT_PROFILES_FILE": "/old.xml", "OTHER": "x"}
    with dds_profile_environment(DdsChoice(tmp_path / "p.xml"), environ):
        assert all(environ[name] == str(tmp_path / "p.xml") for name in DDS_PROFILE_VARIABLES)
    assert environ == {"FASTRTPS_DEFAULT_PROFILES_FILE": "/old.xml", "OTHER": "x"}
    with pytest.raises(RuntimeError), dds_profile_environment(DdsChoice(tmp_path / "p.xml"),
                                                               environ):
        raise RuntimeError("replay failed")
    assert environ == {"FASTRTPS_DEFAULT_PROFILES_FILE": "/old.xml", "OTHER": "x"}
    with dds_profile_environment(DdsChoice(None), environ):
        assert environ["FASTRTPS_DEFAULT_PROFILES_FILE"] == "/old.xml"


def test_the_largest_first_camera_message_is_read_from_a_real_bag(tmp_path):
    style = VehicleStyle(sizes=((64, 36), (96, 54), (64, 36), (64, 36)),
                         encodings=("rgb8", "bgr8", "mono8", "rgb8"))
    bag = write_vehicle_bag(tmp_path / "bag", 2.0, 3, style, width=64, height=48)
    with BagReader(bag.path, TopicMapping(cameras=tuple(bag.topics["cameras"]),
                                          odometry=bag.topics["odometry"])) as reader:
        largest = reader.largest_first_camera_message()
    assert 96 * 54 * 3 < largest < 96 * 54 * 3 + 512


def block(received: dict[str, int], profile: str) -> dict:
    names = ["camera_a", "camera_b"]
    topics = ["/cam/a", "/cam/b"]
    return {"dds_profile": profile, "windows": 1,
            "camera_transport": camera_transport(names, topics, {"/cam/a": 300, "/cam/b": 300},
                                                 received)}


def test_cameras_losing_messages_on_the_way_to_the_node_are_named_with_a_remedy():
    lines = transport_lines("flashdrive", block({"camera_a": 120, "camera_b": 297},
                                                "environment"))
    assert len(lines) == 1
    assert ("camera_a: received 120 of the 300 messages played on /cam/a (60% lost" in lines[0])
    assert f"--dds-profile config/{LARGE_IMAGES_PROFILE}" in lines[0]
    lines = transport_lines("flashdrive", block({"camera_a": 120, "camera_b": 100},
                                                f"/share/config/{LARGE_IMAGES_PROFILE}"))
    assert len(lines) == 2 and all("too slowly (CPU load)" in line for line in lines)
    assert transport_lines("flashdrive", block({"camera_a": 300, "camera_b": 295},
                                               "environment")) == []
    report = {"mode": "flashdrive", "input_notes": ["DDS: chosen"],
              **block({"camera_a": 0, "camera_b": 300}, "environment")}
    assert input_lines(report)[:3] == [
        "inputs:", "  DDS: chosen",
        "  drive_node (flashdrive) camera_a: received 0 of the 300 messages played on /cam/a "
        f"(100% lost between the player and the node); for large raw images: --dds-profile "
        f"config/{LARGE_IMAGES_PROFILE}"]
