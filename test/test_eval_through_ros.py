"""Through-ROS replay end to end: a simulator bag (sqlite3), the real drive_node in its own
process (tiny random model), the bag played over DDS on loopback, the node's outputs
recorded and evaluated."""

import json

import numpy as np
import pytest
from helpers.bags import TYPESTORE, write_drive_bag
from helpers.foreign_topics import FOREIGN, UNREADABLE
from helpers.tiny_model import make_tiny_model_dir
from rosbags.highlevel import AnyReader

from flashdrive_ros.eval.cli import main
from flashdrive_ros.eval.recording import control_ticks
from flashdrive_ros.eval.replay import ReplayOptions, run_replay
from flashdrive_ros.eval.through_ros import node_name
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.bag import write_bag
from flashdrive_ros.sim.labels import DECISIONS
from flashdrive_ros.sim.topics import ODOMETRY_TOPIC

pytestmark = pytest.mark.ros


def test_replay_through_the_node(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "model", max_coc_tokens=4)
    bag = tmp_path / "bag"
    write_bag(bag, 8.6, seed=5, fmt="sqlite3", width=64, height=48, workers=1)
    with AnyReader([bag], default_typestore=TYPESTORE) as reader:
        start = reader.start_time * 1e-9
    out = tmp_path / "out"
    code = main([str(bag), "--model-dir", str(model), "--out", str(out), "--through-ros",
                 "--num-samples", "2", "--device", "cpu"])
    printed = capsys.readouterr().out
    assert code == 0, (out / "drive_node_flashdrive.log").read_text()[-3000:]
    report = json.loads((out / "report.json").read_text())
    print({k: v for k, v in report.items() if k != "per_window"})
    assert report["through_ros"] is True
    for key in ("windows", "minade1_6s", "minade6_6s", "cv_minade_6s", "accepted_length_mean",
                "latency_ms", "deadline_misses", "skipped_windows", "plan_age_s"):
        assert key in report
    assert report["windows"] >= 1
    assert report["latency_ms"]["total"]["p50"] > 0
    assert 0 <= report["deadline_misses"] <= report["control_ticks"]
    t0s = np.array([w["t0"] for w in report["per_window"]])
    # Path stamps are the input stamps: image times on the 0.1 s grid from the bag start
    assert np.allclose((t0s - start) * 10, np.round((t0s - start) * 10), atol=1e-5)
    assert report["plan_age_s"]["p50"] > 0
    assert report["labelled_windows"] == report["windows"]
    assert {w["decision"] for w in report["per_window"]} <= set(DECISIONS)
    with AnyReader([out / "recorded_flashdrive"], default_typestore=TYPESTORE) as reader:
        topics = {c.topic: c.msgcount for c in reader.connections}
    node = f"/{node_name()}"
    assert topics[f"{node}/trajectory"] >= report["windows"]
    assert topics[f"{node}/finished_plans"] == report["finished_plans"] >= report["windows"]
    assert topics[f"{node}/reasoning"] >= report["plans_published_valid"]
    assert topics["/diagnostics"] >= 1
    assert topics[f"{node}/overlay"] >= 1
    assert (out / "overlay_0.png").read_bytes().startswith(b"\x89PNG")
    params = (out / "drive_node_flashdrive.yaml").read_text()
    assert "use_sim_time: true" in params and str(model) in params
    assert "through ROS" in printed and "deadline misses" in printed


def test_late_plans_at_the_sim_resolution_are_recorded_and_missed(tmp_path):
    """The simulator's default 480x272 cameras into the embedded model with max_plan_age_s
    at its minimum: every plan is too late to be published as valid on ~/trajectory, yet
    every finished plan is recorded and every control tick after the first is a deadline
    miss. (The drive is shorter than the 6.4 s horizon: plans are skipped as no_future.)
    While the model runs, the node's callbacks keep up: every odometry message arrives and
    no window is refused for missing or late odometry."""
    bag = tmp_path / "bag"
    write_bag(bag, 6.0, seed=5, fmt="sqlite3", workers=1)
    with AnyReader([bag], default_typestore=TYPESTORE) as reader:
        odometry = sum(c.msgcount for c in reader.connections if c.topic == ODOMETRY_TOPIC)
    options = ReplayOptions(bag=bag, model_dir=default_model_dir(), out_dir=tmp_path / "out",
                            through_ros=True, num_samples=1, device="cpu", max_plan_age_s=0.05,
                            progress=False, plots=False)
    report = run_replay(options)
    print({k: v for k, v in report.items() if k != "per_window"})
    assert report["finished_plans"] >= 1 and report["plans_published_valid"] == 0
    assert report["skipped_windows"]["reasons"] == {"no_future": report["finished_plans"]}
    assert report["max_plan_age_s"] == 0.05
    assert report["control_ticks"] >= 1
    assert report["deadline_misses"] == report["control_ticks"]
    assert report["control_rate_held"] == 0.0
    assert report["node_inputs_received"]["odometry"] == odometry
    assert not {"odometry_gap", "stale_odometry", "time_jump"} & set(report["node_rejections"])


def test_node_plans_equal_offline_plans_on_the_same_windows(tmp_path):
    """Every window the node planned through ROS against the offline replay's window at the
    same t0, both in baseline mode (no streaming state) and float32: the node builds the
    same window from the DDS messages (images, stamps, ego history), draws the same noise
    and its recorded plan scores as the offline plan against the same ground truth. The
    node waits up to 0.5 s for the odometry at t0 (late_tolerance_s), so that a loaded CI
    machine does not make it extrapolate the last history pose where the bag holds it. The
    model's action encoder is kept to low frequencies: with the config's, node and replay
    batch their work differently and the random expert would swing their plans apart by
    centimetres on CPUs whose GEMM kernels round by shape (MKL's AVX2 path)."""
    model = make_tiny_model_dir(tmp_path / "model", max_coc_tokens=4, fourier_max_freq=1.0)
    bag = tmp_path / "bag"
    write_bag(bag, 10.0, seed=5, fmt="sqlite3", width=64, height=48, workers=1)
    common = dict(bag=bag, model_dir=model, mode="baseline", num_samples=2, device="cpu",
                  dtype="float32", progress=False, plots=False, late_tolerance_s=0.5)
    reports = {through_ros: run_replay(ReplayOptions(
        out_dir=tmp_path / str(through_ros), through_ros=through_ros, **common))
        for through_ros in (True, False)}
    offline = {round(w["t0"], 3): w for w in reports[False]["per_window"]}
    planned = {round(w["t0"], 3): w for w in reports[True]["per_window"]}
    both = sorted(set(planned) & set(offline))
    assert len(both) >= 3 and len(both) >= len(planned) - 1
    for t0 in both:
        assert planned[t0]["coc"] == offline[t0]["coc"]
        assert planned[t0]["minade6_6s"] == pytest.approx(offline[t0]["minade6_6s"], abs=1e-3)


def test_node_that_cannot_configure_is_a_clear_error(tmp_path, capsys):
    from flashdrive_ros.model.config import tiny

    model = tmp_path / "model"
    model.mkdir()
    tiny().save(model / "config.json")  # no weights: the node's configure fails
    write_bag(tmp_path / "bag", 1.0, seed=1, width=64, height=48, workers=1)
    code = main([str(tmp_path / "bag"), "--model-dir", str(model), "--out",
                 str(tmp_path / "out"), "--through-ros", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "transition 1 failed (state now unconfigured)" in err
    assert "configure failed: engine could not be loaded" in err


def test_control_ticks_count_ticks_without_a_new_plan():
    ticks = [(1.0, None), (1.1, 0.9), (1.2, 0.9), (1.3, None), (1.4, 1.2), (1.5, 1.3),
             (1.6, 1.3)]
    assert control_ticks(ticks, end_s=1.55) == {"control_ticks": 5, "deadline_misses": 2,
                                                "control_rate_held": 0.6,
                                                "valid_trajectory_rate": 0.8}
    assert control_ticks([(1.0, None)], end_s=2.0)["control_rate_held"] is None


def replay_one_sample(bag, model, out, capsys) -> tuple[dict, str]:
    """The through-ROS replay of `bag` with one sample -> (its report, what it printed); it
    must plan at least one window."""
    code = main([str(bag), "--model-dir", str(model), "--out", str(out), "--through-ros",
                 "--num-samples", "1", "--device", "cpu", "--no-plots"])
    printed = capsys.readouterr().out
    assert code == 0, (out / "drive_node_flashdrive.log").read_text()[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["windows"] >= 1
    return report, printed


def test_a_recording_cut_off_without_metadata_replays_through_the_node(tmp_path, capsys):
    model = make_tiny_model_dir(tmp_path / "model", max_coc_tokens=4)
    bag = tmp_path / "bag"
    write_bag(bag, 14.0, seed=6, fmt="mcap", width=320, height=180, workers=1)
    (bag / "metadata.yaml").unlink()
    storage = next(bag.glob("*.mcap"))
    with open(storage, "r+b") as f:
        f.truncate(int(storage.stat().st_size * 0.85))
    report, printed = replay_one_sample(bag, model, tmp_path / "out", capsys)
    notes = report["input_notes"]
    assert any("no metadata.yaml (the recording was not closed)" in n for n in notes)
    assert any(f"{storage.name}: the recording was cut off (no MCAP footer)" in n
               for n in notes)
    assert "the recording was cut off" in printed
    played = [c["played"] for c in report["camera_transport"].values()]
    assert min(played) > 0


def test_a_logger_bag_with_topics_no_reader_can_type_replays_through_the_node(tmp_path,
                                                                              capsys):
    model = make_tiny_model_dir(tmp_path / "model", max_coc_tokens=4)
    bag = write_drive_bag(tmp_path / "bag", seconds=8.0, foreign_topics=FOREIGN)
    report, printed = replay_one_sample(bag, model, tmp_path / "out", capsys)
    unread = [f"{topic}: not read: {why}" for topic, why in sorted(UNREADABLE.items())]
    assert [n for n in report["input_notes"] if "not read" in n] == unread
    assert unread[0] in printed
    unplayable = report["unplayable_topics"]
    assert {t: unplayable[t] for t in UNREADABLE} == UNREADABLE
