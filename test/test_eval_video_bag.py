"""Drives whose cameras a logger recorded as H.264 / H.265 video packets (sensor_msgs/
CompressedImage with format h264 / h265, foxglove_msgs/CompressedVideo or
ffmpeg_image_transport_msgs/FFMPEGPacket) replay offline and
through the drive node like the same drive recorded as JPEG; the frames a camera's stream
cannot vouch for are named, never planned on."""

import dataclasses
import json

import pytest
from helpers.tiny_model import make_tiny_model_dir

from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.cli import main
from flashdrive_ros.eval.records import ImageRecord
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.sim.vehicle_bag import VIDEO_MESSAGES, VehicleStyle, write_vehicle_bag

SEED, SECONDS = 5, 8.6
SIZES = ((64, 36), (96, 54), (64, 36), (64, 36))
JPEG = VehicleStyle(sizes=SIZES, encodings=("jpeg",) * 4)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("model") / "model", max_coc_tokens=4)


def replay(bag, model, out, *extra):
    topics = out.parent / f"{out.name}_topics.json"
    topics.write_text(json.dumps(bag.topics))
    code = main([str(bag.path), "--model-dir", str(model), "--out", str(out), "--num-samples",
                 "1", "--device", "cpu", "--quiet", "--no-plots", "--topics-yaml", str(topics),
                 *extra])
    return code, json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def jpeg_report(tmp_path_factory, model):
    root = tmp_path_factory.mktemp("jpeg")
    bag = write_vehicle_bag(root / "bag", SECONDS, SEED, JPEG, width=64, height=48)
    code, report = replay(bag, model, root / "out")
    assert code == 0 and report["windows"] >= 5
    return report


@pytest.mark.parametrize("encodings, message, fmt", [
    (("h264",) * 4, "compressed_image", "mcap"),
    (("h264", "h265", "h264", "h265"), "compressed_video", "sqlite3"),
    (("h265", "h264", "h265", "h264"), "ffmpeg_packet", "mcap")])
def test_video_cameras_replay_offline_like_jpeg(tmp_path, model, jpeg_report, encodings,
                                                message, fmt):
    style = dataclasses.replace(JPEG, encodings=encodings, video_message=message,
                                drop_rate=0.0, keyframe_every=15)
    bag = write_vehicle_bag(tmp_path / "bag", SECONDS, SEED, style, fmt=fmt, width=64,
                            height=48)
    code, report = replay(bag, model, tmp_path / "out")
    assert code == 0, report["skipped_windows"]
    assert report["windows"] >= jpeg_report["windows"] - 1, report["skipped_windows"]
    assert report["minade1_6s"] <= 1.25 * jpeg_report["minade1_6s"] + 0.1


def camera_records(bag) -> list[ImageRecord]:
    topics = TopicMapping(cameras=list(bag.topics["cameras"]), odometry=bag.topics["odometry"])
    with BagReader(bag.path, topics) as reader:
        return [r for r in reader.records() if isinstance(r, ImageRecord)]


def test_frames_the_cameras_skipped_cost_no_other_frame(tmp_path):
    style = dataclasses.replace(JPEG, encodings=("h264", "h265", "h264", "h265"),
                                drop_rate=0.1, keyframe_every=10)
    bag = write_vehicle_bag(tmp_path / "bag", 4.0, SEED, style, width=64, height=48)
    assert bag.dropped > 0
    records = camera_records(bag)
    for camera, written in enumerate(bag.camera_frames):
        mine = [r for r in records if r.camera == camera]
        assert [r.error for r in mine if r.rgb is None] == []
        assert len(mine) == written
        assert mine[0].rgb.shape == (SIZES[camera][1], SIZES[camera][0], 3)


def test_h264_cameras_replay_through_the_node(tmp_path, model, jpeg_report):
    style = dataclasses.replace(JPEG, encodings=("h264",) * 4, drop_rate=0.0)
    bag = write_vehicle_bag(tmp_path / "bag", SECONDS, SEED, style, width=64, height=48)
    code, report = replay(bag, model, tmp_path / "out", "--through-ros")
    assert code == 0, (tmp_path / "out" / "drive_node_flashdrive.log").read_text()[-3000:]
    assert report["windows"] >= 1, report["skipped_windows"]
    assert report["minade1_6s"] <= 1.25 * jpeg_report["minade1_6s"] + 0.1
    transport = report["camera_transport"]
    assert [c["played"] for c in transport.values()] == list(bag.camera_frames)
    assert all(c["received"] > 0 for c in transport.values())


@pytest.mark.parametrize("message", ["compressed_video", "ffmpeg_packet"])
def test_video_messages_the_node_does_not_subscribe_are_refused_through_ros(tmp_path, model,
                                                                          capsys, message):
    style = dataclasses.replace(JPEG, encodings=("h264",) * 4, video_message=message)
    bag = write_vehicle_bag(tmp_path / "bag", 3.0, SEED, style, width=64, height=48)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps(bag.topics))
    code = main([str(bag.path), "--model-dir", str(model), "--out", str(tmp_path / "out"),
                 "--device", "cpu", "--quiet", "--topics-yaml", str(topics), "--through-ros"])
    assert code != 0
    error = capsys.readouterr().err
    assert "have types drive_node does not subscribe" in error
    assert VIDEO_MESSAGES[message] in error
