"""Offline replay end to end: a bag written here, the tiny model with random weights, the
real engine in both modes, the CLI writing report.json, report.md and plots."""

import json

import numpy as np
import pytest
from helpers.bags import SPEED, T_START, YAW_RATE, write_drive_bag
from helpers.tiny_model import make_tiny_model_dir

from flashdrive_ros.eval.cli import main
from flashdrive_ros.eval.report import summary_table

CONTRACT_KEYS = ("windows", "minade1_6s", "minade6_6s", "cv_minade_6s",
                 "accepted_length_mean", "latency_ms", "deadline_misses", "skipped_windows")


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline")
    model = make_tiny_model_dir(root / "model", max_coc_tokens=4)
    bag = write_drive_bag(root / "bag", seconds=8.2, corrupt_frames={(1, 16), (1, 17), (1, 18)})
    out = root / "out"
    code = main([str(bag), "--model-dir", str(model), "--out", str(out), "--mode", "compare",
                 "--num-samples", "2", "--device", "cpu", "--quiet"])
    return code, out


def cv_ade_on_the_circle(horizon_steps):
    tau = 0.1 * np.arange(1, horizon_steps + 1)
    radius = SPEED / YAW_RATE
    truth = np.stack([radius * np.sin(YAW_RATE * tau), radius * (1 - np.cos(YAW_RATE * tau))], 1)
    straight = np.stack([SPEED * tau, np.zeros_like(tau)], 1)
    return float(np.linalg.norm(truth - straight, axis=1).mean())


def test_compare_report_holds_both_modes_on_the_same_windows(replay):
    code, out = replay
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert set(report["modes"]) == {"baseline", "flashdrive"}
    for key in CONTRACT_KEYS:
        assert key in report
    base, fast = report["modes"]["baseline"], report["modes"]["flashdrive"]
    for block in (base, fast):
        for key in CONTRACT_KEYS:
            assert key in block
        assert block["windows"] == 2
        for stage in ("encode", "prefill", "decode", "action", "total"):
            assert block["latency_ms"][stage]["p50"] > 0
            assert block["latency_ms"][stage]["p90"] >= block["latency_ms"][stage]["p50"]
        assert block["minade6_6s"] <= block["minade1_6s"]
        assert block["cv_minade_6s"] == pytest.approx(cv_ade_on_the_circle(64), abs=0.02)
        assert block["cv_minade_3s"] == pytest.approx(cv_ade_on_the_circle(30), abs=0.02)
        assert block["labelled_windows"] == 2
        assert 0.0 <= block["decision_match_rate"] <= 1.0
    assert [w["t0"] for w in base["per_window"]] == [w["t0"] for w in fast["per_window"]]
    assert [w["t0"] for w in base["per_window"]] == pytest.approx(
        [T_START + 1.5, T_START + 1.6])
    skipped = fast["skipped_windows"]["reasons"]
    # camera 1 broken over 101.6 .. 101.8: at t0 = 101.6 the 101.5 frame stands in for the
    # newest; t0 = 101.7 .. 102.0 want a frame 0.2 s from any good one
    assert skipped["corrupt_image"] == 4
    assert report["frame_stand_ins"] >= 1
    assert "corrupt_payload" in fast["skipped_windows"]["examples"]["corrupt_image"]
    assert skipped["no_future"] >= 1
    assert base["accepted_length_mean"] is None
    assert fast["accepted_length_mean"] >= 1.0
    assert report["speedup_total_p50"] == pytest.approx(
        base["latency_ms"]["total"]["p50"] / fast["latency_ms"]["total"]["p50"])


def test_report_blocks_per_scenario_tag_of_the_labels(replay):
    _, out = replay
    report = json.loads((out / "report.json").read_text())
    for block in report["modes"].values():
        windows = {w["tags"][0]: w for w in block["per_window"]}
        assert sorted(block["scenarios"]) == sorted(windows) == ["keep_lane", "red_light_stop"]
        for tag, group in block["scenarios"].items():
            assert group["windows"] == group["labelled_windows"] == 1
            assert group["decision_match_rate"] == float(windows[tag]["decision_match"])
            assert group["side_windows"] == 0 and group["side_match_rate"] is None
            assert group["minade1_cv_ratio"] == pytest.approx(
                group["minade1_6s"] / group["cv_minade_6s"])
        assert np.mean([g["minade1_6s"] for g in block["scenarios"].values()]) == \
            pytest.approx(block["minade1_6s"])
    markdown = (out / "report.md").read_text()
    assert "## Per scenario tag (flashdrive)" in markdown
    assert "| red_light_stop | 1 |" in markdown
    table = summary_table(report)
    assert "scenario tag (baseline)" in table and "scenario tag (flashdrive)" in table
    assert "side match" in table


def test_report_markdown_plots_and_summary_table(replay):
    _, out = replay
    report = json.loads((out / "report.json").read_text())
    for name in ("latency_over_time.png", "latency_histograms.png", "birds_eye.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG")
    markdown = (out / "report.md").read_text()
    assert report["num_samples"] == 2 and "corrupt_image" in markdown
    assert "| minADE1 @6.4 s (m) |" in markdown and "minADE6" not in markdown
    assert "| minADE2 (m) |" in markdown
    table = summary_table(report)
    assert "const. velocity ADE @6.4 s (m)" in table
    assert "speedup total p50" in table and "minADE6" not in table
    assert f"{report['modes']['flashdrive']['minade1_6s']:.3f}" in table
    six = summary_table({**report, "num_samples": 6})
    assert f"{report['modes']['flashdrive']['minade6_6s']:.3f}" in six
