"""A drive recorded the way a vehicle logger records it, replayed offline against the same
drive in simulator conventions; the console lines on skipped windows and the exit status when
no window is planned (offline and through ROS)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.tiny_model import make_tiny_model_dir

from flashdrive_ros.eval.cli import main, parser
from flashdrive_ros.eval.errors import ReplayError
from flashdrive_ros.eval.replay_options import ReplayOptions
from flashdrive_ros.eval.skip_advice import ADVICE, skip_lines, skip_report
from flashdrive_ros.ros.params import DriveParams
from flashdrive_ros.sim.bag import write_bag
from flashdrive_ros.sim.vehicle_bag import VehicleStyle, write_vehicle_bag

ROOT = Path(__file__).resolve().parents[1]
SEED, SECONDS = 5, 8.6
STYLE = VehicleStyle(sizes=((64, 36), (96, 54), (64, 36), (64, 36)),
                     encodings=("jpeg", "png", "bgr8", "rgb8"))


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny_model_dir(tmp_path_factory.mktemp("model") / "model", max_coc_tokens=4)


def _replay(bag, model, out, *extra):
    code = main([str(bag), "--model-dir", str(model), "--out", str(out), "--num-samples", "1",
                 "--device", "cpu", "--quiet", "--no-plots", *map(str, extra)])
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() \
        else None
    return code, report


def test_vehicle_bag_replays_offline_like_the_simulator_bag(tmp_path, model):
    sim = write_bag(tmp_path / "sim", SECONDS, SEED, width=64, height=48, workers=1)
    vehicle = write_vehicle_bag(tmp_path / "vehicle", SECONDS, SEED, STYLE, width=64,
                                height=48)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps(vehicle.topics))
    code, sim_report = _replay(sim.path, model, tmp_path / "sim_out")
    assert code == 0 and sim_report["windows"] >= 5
    code, report = _replay(vehicle.path, model, tmp_path / "vehicle_out", "--topics-yaml",
                           topics)
    assert code == 0, report and report["skipped_windows"]
    assert report["windows"] >= 0.9 * sim_report["windows"], report["skipped_windows"]
    assert report["minade1_6s"] <= 1.25 * sim_report["minade1_6s"] + 0.1
    assert report["cv_minade_6s"] == pytest.approx(sim_report["cv_minade_6s"], abs=0.05)


@pytest.fixture(scope="module")
def one_file_replay(tmp_path_factory, model):
    root = tmp_path_factory.mktemp("one_file")
    bag = write_vehicle_bag(root / "bag", SECONDS, SEED, STYLE, width=64, height=48)
    topics = root / "topics.json"
    topics.write_text(json.dumps(bag.topics))
    code, report = _replay(bag.path, model, root / "out", "--topics-yaml", topics)
    assert code == 0
    return topics, report


@pytest.mark.parametrize("fmt, compression, split_s, layout", [
    ("mcap", "storage", 3.0, "jazzy"), ("sqlite3", "file", 2.5, "jazzy"),
    ("sqlite3", "message", None, "humble")])
def test_split_compressed_and_humble_recordings_replay_like_one_plain_file(
        tmp_path, model, one_file_replay, fmt, compression, split_s, layout):
    topics, plain = one_file_replay
    style = VehicleStyle(**{**STYLE.__dict__, "compression": compression, "split_s": split_s,
                            "layout": layout})
    bag = write_vehicle_bag(tmp_path / "bag", SECONDS, SEED, style, fmt=fmt, width=64,
                            height=48)
    files = sorted(p.name for p in bag.path.iterdir() if p.name != "metadata.yaml")
    if split_s is not None:
        assert len(files) == int(SECONDS // split_s) + 1 and files[0].startswith("bag_0.")
    if compression == "file":
        assert all(name.endswith(".zstd") for name in files)
    code, report = _replay(bag.path, model, tmp_path / "out", "--topics-yaml", topics)
    assert code == 0
    assert report["windows"] == plain["windows"]
    assert report["minade1_6s"] == plain["minade1_6s"]
    assert report["decision_match_rate"] == plain["decision_match_rate"]


def test_no_window_exits_1_with_the_reasons(tmp_path, model, capsys):
    sim = write_bag(tmp_path / "sim", 3.0, SEED, width=64, height=48, workers=1)
    code, report = _replay(sim.path, model, tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 1 and report["windows"] == 0
    assert "planned no window (flashdrive)" in err
    assert "no_future: the odometry does not cover" in err


def test_skip_lines_name_the_flag_offline_and_the_parameter_through_ros():
    block = {"windows": 13, "skipped_windows": {"reasons": {
        "stale_images": 190, "frame_gap": 20, "no_future": 64, "missing_camera": 3,
        "odometry_gap": 2, "nonfinite": 1, "time_jump": 1}}}
    offline = skip_lines(block, through_ros=False)
    assert offline[0].split() [:2] == ["190", "stale_images:"]
    assert "--late-tolerance" in offline[0]
    assert "--node-param frame_stand_in_s" in offline[2]
    assert "--topics-yaml" in offline[3] and "flashdrive-topics" in offline[3]
    assert offline[-1].split() == ["2", "other", "(nonfinite,", "time_jump)"]
    ros = skip_lines({"windows": 0, "skipped_windows": {"reasons": {"no_future": 4}},
                      "node_rejections": {"stale_images": 7}}, through_ros=True)
    assert "--node-param late_tolerance_s=" in ros[0] and ros[1].split()[:2] == ["4",
                                                                                 "no_future:"]
    report = {"mode": "flashdrive", "ticks": 203, **block}
    assert skip_report(report)[0] == ("skipped windows (flashdrive): 13 planned of 203 ticks; "
                                      "main reasons:")


def test_advice_names_existing_flags_and_node_parameters():
    flags = {o for action in parser()._actions for o in action.option_strings}
    params = set(DriveParams.field_names())
    for code, advice in ADVICE.items():
        assert advice.flag is None or advice.flag in flags, code
        assert advice.param is None or advice.param in params, code


@pytest.mark.ros
def test_no_window_through_ros_exits_1_with_the_reasons(tmp_path, model, capsys):
    sim = write_bag(tmp_path / "sim", 3.0, SEED, fmt="sqlite3", width=64, height=48,
                    workers=1)
    code = main([str(sim.path), "--model-dir", str(model), "--out", str(tmp_path / "out"),
                 "--through-ros", "--num-samples", "1", "--device", "cpu", "--quiet"])
    err = capsys.readouterr().err
    assert code != 0
    assert "no_future" in err or "finished no plan" in err, err


DRIVER_ENCODINGS = ("bayer_rggb8", "yuv422", "rgb16", "8UC3")


def test_driver_encodings_replay_with_the_windows_of_rgb8(tmp_path, model):
    """A bag in Bayer / YUV 4:2:2 / 16-bit / 8UC3 against the same drive in rgb8: the same
    windows, minADE1 within 5 % (+0.05 m; the images differ by the formats' loss), and the
    8UC3 camera named on the console."""
    reports = {}
    for name, encodings in (("rgb8", ("rgb8",) * 4), ("drivers", DRIVER_ENCODINGS)):
        style = VehicleStyle(**{**STYLE.__dict__, "sizes": ((64, 36),) * 4,
                                "encodings": encodings, "camera_hz": 10.0})
        bag = write_vehicle_bag(tmp_path / name, SECONDS, SEED, style, width=64, height=48)
        topics = tmp_path / f"{name}.json"
        topics.write_text(json.dumps(bag.topics))
        code, reports[name] = _replay(bag.path, model, tmp_path / f"{name}_out",
                                      "--topics-yaml", topics)
        assert code == 0
    plain, drivers = reports["rgb8"], reports["drivers"]
    assert [w["t0"] for w in drivers["per_window"]] == [w["t0"] for w in plain["per_window"]]
    assert abs(drivers["minade1_6s"] - plain["minade1_6s"]) <= 0.05 * plain["minade1_6s"] + 0.05
    assert any("8UC3" in note and "read as bgr8" in note for note in drivers["input_notes"])


def test_zero_camera_stamps_are_named_on_the_console(tmp_path, model, monkeypatch, capsys):
    from flashdrive_ros.sim import messages
    from flashdrive_ros.sim.topics import CAMERA_NAMES

    stamped = messages.raw_image
    monkeypatch.setattr(messages, "raw_image", lambda t_ns, name, *rest: stamped(
        0 if name == CAMERA_NAMES[1] else t_ns, name, *rest))
    style = VehicleStyle(**{**STYLE.__dict__, "sizes": ((64, 36),) * 4,
                            "encodings": ("rgb8",) * 4})
    bag = write_vehicle_bag(tmp_path / "bag", 2.0, SEED, style, width=64, height=48)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps(bag.topics))
    capsys.readouterr()
    code = main([str(bag.path), "--model-dir", str(model), "--out", str(tmp_path / "out"),
                 "--device", "cpu", "--no-plots", "--topics-yaml", str(topics)])
    captured = capsys.readouterr()
    console = captured.out + captured.err
    assert code == 1
    assert f"{bag.topics['cameras'][1]}: header stamp is zero" in console, console


LARGE_IMAGES_PROFILE = ROOT / "config" / "fastdds_large_images.xml"


def test_a_dds_profile_applies_to_player_and_node_through_ros(tmp_path, model):
    """The shipped large-image profile, given to a replay process: the player and the node
    (each its own process) run on it and every recorded camera message reaches the node."""
    style = VehicleStyle(**{**STYLE.__dict__, "encodings": ("rgb8",) * 4, "drop_rate": 0.0,
                            "camera_hz": 10.0})
    bag = write_vehicle_bag(tmp_path / "bag", SECONDS, SEED, style, width=64, height=48)
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps(bag.topics))
    out = tmp_path / "out"
    env = dict(os.environ)
    env.pop("FASTRTPS_DEFAULT_PROFILES_FILE", None)
    result = subprocess.run(
        [sys.executable, "-m", "flashdrive_ros.eval.cli", str(bag.path), "--model-dir",
         str(model), "--out", str(out), "--through-ros", "--topics-yaml", str(topics),
         "--num-samples", "1", "--device", "cpu", "--quiet", "--no-plots",
         "--dds-profile", str(LARGE_IMAGES_PROFILE)],
        env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["finished_plans"] >= 1
    assert sum(report["node_inputs_received"][k] for k in report["node_inputs_received"]
               if k != "odometry") == sum(bag.camera_frames)
    assert report["dds_profile"] == str(LARGE_IMAGES_PROFILE)
    assert [(c["played"], c["received"]) for c in report["camera_transport"].values()] == [
        (frames, frames) for frames in bag.camera_frames]
    with pytest.raises(ReplayError, match="through ROS only"):
        ReplayOptions(bag.path, model, out, dds_profile=LARGE_IMAGES_PROFILE)
    with pytest.raises(ReplayError, match="is not a file"):
        ReplayOptions(bag.path, model, out, through_ros=True,
                      dds_profile=tmp_path / "missing.xml")
