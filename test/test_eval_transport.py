"""Offline replay of bags written the way a vehicle logger writes them: cameras logged 40-80 ms
after their stamps, dropped frames, mixed camera sizes, odometry in a map frame at UTM-scale
coordinates. The tiny model with random weights, the real engine."""

import numpy as np
import pytest
from helpers.bags import write_drive_bag
from helpers.tiny_model import make_tiny_model_dir

from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.input_notes import input_lines
from flashdrive_ros.eval.offline import OfflineReplay, ReplaySettings
from flashdrive_ros.eval.replay import (
    ReplayOptions,
    camera_slot_notes,
    load_engines,
    load_model_config,
)
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.ros.params import DriveParams

SECONDS = 8.5
LATENCY = (0.04, 0.08, 0.06, 0.05)
rng = np.random.default_rng(7)
DROPPED = {(cam, frame) for cam in range(4) for frame in range(5, 85)
           if rng.random() < 0.03} | {(2, 20)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("transport")
    model = make_tiny_model_dir(root / "model", max_coc_tokens=4)
    options = ReplayOptions(bag=root, model_dir=model, out_dir=root / "out", mode="flashdrive",
                            num_samples=1, device="cpu", progress=False)
    return root, load_model_config(model), load_engines(options)


def replay(setup, bag, **settings):
    root, model, engines = setup
    with BagReader(bag, TopicMapping()) as reader:
        reader.reduce_images_to((model.prompt.image_height, model.prompt.image_width))
        replay = OfflineReplay(reader, engines, model,
                               ReplaySettings(progress=False, **settings))
        out = replay.run()
        return out, replay.builder.stand_ins, {t: s.summary() for t, s in
                                                reader.latency.items()}


def windows(out):
    return [round(r.t0, 3) for r in out.results["flashdrive"]]


def test_a_vehicle_style_bag_keeps_the_windows_of_the_clean_drive(setup):
    """Default late tolerance: every window of the clean drive, the same ground truth to
    1e-6 m, dropped frames stood in. With the former fixed 0.05 s wait the newest frame of the
    80 ms camera is not in yet when its window is built, and the frame before stands in
    (without stand-ins those windows were stale_images)."""
    root = setup[0]
    clean = write_drive_bag(root / "clean", seconds=SECONDS, labels=False)
    logged = write_drive_bag(root / "logged", seconds=SECONDS, labels=False,
                             camera_latency=LATENCY, dropped_frames=DROPPED,
                             sizes=[(96, 64), (64, 48), (64, 48), (128, 72)],
                             odom_frame="map", odom_offset=(6.9e5, 5.3e6))
    reference, _, _ = replay(setup, clean)
    out, stand_ins, latency = replay(setup, logged)
    assert len(windows(reference)) >= 6
    assert len(windows(out)) >= 0.9 * len(windows(reference)), out.skipped["flashdrive"]
    assert stand_ins >= 1
    strict, strict_stand_ins, _ = replay(setup, logged, late_tolerance_s=0.05)
    assert strict_stand_ins >= stand_ins + len(windows(strict))
    camera = TopicMapping().cameras[1]
    assert latency[camera]["p50_ms"] == pytest.approx(80.0, abs=0.01)
    truth = {round(r.t0, 3): r.truth for r in reference.results["flashdrive"]}
    for result in out.results["flashdrive"]:
        np.testing.assert_allclose(result.truth, truth[round(result.t0, 3)], atol=1e-6)
    with pytest.raises(ValueError, match="late tolerance"):
        ReplaySettings(late_tolerance_s=0.6)


def test_swapped_slots_and_node_input_faults_reach_the_console():
    slots = list(DriveParams().camera_names)
    topics = list(TopicMapping().cameras)
    topics[1], topics[3] = topics[3], topics[1]
    notes = camera_slot_notes(slots, topics, {})
    assert len(notes) == 2 and "camera_front_tele_30fov" in notes[0]
    assert camera_slot_notes(slots, TopicMapping().cameras, {0: "camera_cross_left_120fov"}) \
        == []
    assert "names camera_cross_right" in camera_slot_notes(
        slots, ["/cam/a", "/cam/b", "/cam/c", "/cam/d"], {0: "cross_right_optical"})[0]
    offline = {"mode": "flashdrive", "windows": 3, "input_notes": notes}
    assert input_lines(offline)[0] == "inputs:" and "swapped" in input_lines(offline)[1]
    ros = {"mode": "flashdrive", "windows": 0, "through_ros": True,
           "node_input_faults": {"odometry": "frame: odometry frame_id 'odom' is not 'map' "
                                             "(odom_frame parameter); dropped (250 faults)"},
           "node_input_notes": {"odom_frame": "map (odom_frame parameter)", "clock": "ok",
                                "input_latency_ms.odometry": "p50 1.0, p90 2.0, max 3.0"}}
    lines = input_lines(ros)
    assert "input odometry: frame: odometry frame_id 'odom' is not 'map'" in lines[1]
    assert lines[2].endswith("odom_frame: map (odom_frame parameter)") and len(lines) == 3
    assert input_lines({**ros, "playback_max_lateness_s": 0.2}) == lines
    late = input_lines({**ros, "playback_max_lateness_s": 36.4})
    assert len(late) == 4 and "player (flashdrive): fell up to 36.4 s behind" in late[3]
    behind = input_lines({**ros, "node_input_notes": {**ros["node_input_notes"],
                                                      "camera_messages_behind": "12"}})
    assert len(behind) == 4 and "12 camera messages dropped by its own camera thread's queue" \
        in behind[3]
