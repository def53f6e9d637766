"""Held-out drive evaluation end to end: one short simulated drive, the tiny model with random
weights and a drafter, streaming on and off; every aggregate is checked against the
per-window rows it comes from."""

import json

import numpy as np
import pytest
from helpers.tiny_model import make_sim_sized_model_dir

from flashdrive_ros.eval.held_out_breakdown import (
    BREAKDOWNS,
    FULL,
    MODES,
    STREAMING,
    STANDING_MPS,
    UNLABELLED,
    speed_band,
    standstill_group,
    time_band,
)
from flashdrive_ros.eval.held_out_drives import JSON_FILE, MARKDOWN_FILE, HeldOutSettings, main
from flashdrive_ros.eval.metrics import named_sides

SEED, SECONDS = 1000011, 8.6


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    root = tmp_path_factory.mktemp("held_out")
    model = make_sim_sized_model_dir(root / "model")
    out = root / "out"
    code = main(["--model-dir", str(model), "--out", str(out), "--drives", "1", "--seconds",
                 str(SECONDS), "--first-seed", str(SEED), "--device", "cpu",
                 "--num-samples", "2"])
    return code, out


def members(rows, breakdown, group):
    if breakdown == "scenario tag":
        return [r for r in rows if group in r["tags"]]
    if breakdown == "decision":
        return [r for r in rows if (r["decision"] or UNLABELLED) == group]
    if breakdown == "speed band":
        return [r for r in rows if speed_band(r["speed_mps"]) == group]
    if breakdown == "standstill":
        return [r for r in rows if standstill_group(r["speed_mps"], r["decision"]) == (group,)]
    return [r for r in rows if time_band(r["elapsed_s"]) == group]


def expected_block(rows, mode):
    minade1 = np.mean([r[mode]["minade1_6s"] for r in rows])
    cv = np.mean([r["cv_minade_6s"] for r in rows])
    matches = [r[mode]["predicted_decision"] == r["decision"] for r in rows if r["decision"]]
    sides = [r[mode]["side_match"] for r in rows if r[mode]["side_match"] is not None]
    return {"windows": len(rows), "minade1_6s": minade1, "cv_minade_6s": cv,
            "minade1_cv_ratio": minade1 / cv, "decision_match_rate": np.mean(matches),
            "side_windows": len(sides), "side_match_rate": np.mean(sides) if sides else None}


def test_every_ratio_and_rate_comes_from_the_same_windows(evaluated):
    code, out = evaluated
    assert code == 0
    report = json.loads((out / JSON_FILE).read_text())
    rows = report["windows"]
    assert report["seeds"] == [SEED] and {r["seed"] for r in rows} == {SEED}
    assert 5 <= len(rows) and all(0 < r["elapsed_s"] < SECONDS for r in rows)
    assert all(r["decision"] and r["tags"] for r in rows)
    assert any(r["label_sides"] for r in rows)
    for r in rows:
        for mode in MODES:
            decided = r[mode]["predicted_decision"] == r["decision"]
            expected = (named_sides(r[mode]["coc"]) == tuple(r["label_sides"])
                        if r["label_sides"] and decided else None)
            assert r[mode]["side_match"] == expected
    for mode in MODES:
        block = report["overall"][mode]
        for key, value in expected_block(rows, mode).items():
            assert block[key] == (None if value is None else pytest.approx(value))
        assert block["minade6_6s"] <= block["minade1_6s"] + 1e-9
    for name in BREAKDOWNS:
        groups = report["breakdowns"][name]
        assert groups or name == "standstill", name
        covered = set()
        for group, entry in groups.items():
            picked = members(rows, name, group)
            covered.update((r["seed"], r["t0"]) for r in picked)
            for mode in MODES:
                for key, value in expected_block(picked, mode).items():
                    assert entry[mode][key] == (None if value is None else pytest.approx(value)), \
                        (name, group, mode, key)
            assert entry["agreement"]["same_coc"] == pytest.approx(
                np.mean([r[STREAMING]["coc"] == r[FULL]["coc"] for r in picked]))
        grouped = [r for r in rows if name != "standstill" or r["speed_mps"] < STANDING_MPS]
        assert covered == {(r["seed"], r["t0"]) for r in grouped}, name
    agreement = report["agreement"]
    deltas = [r[STREAMING]["minade1_6s"] - r[FULL]["minade1_6s"] for r in rows]
    assert agreement["minade1_delta_mean"] == pytest.approx(np.mean(deltas))
    assert agreement["minade1_abs_delta_mean"] == pytest.approx(np.mean(np.abs(deltas)))
    assert agreement["accepted_length_mean_streaming"] >= 1.0
    predicted = report["breakdowns"]["decision"]
    assert sum(sum(e["predicted"][STREAMING].values()) for e in predicted.values()) == len(rows)


def test_standstill_groups_hold_only_standing_windows_by_their_label():
    assert standstill_group(0.0, "keep_lane") == ("standing, label keep_lane",)
    assert standstill_group(STANDING_MPS - 0.01, "stop") == ("standing, label stop",)
    assert standstill_group(STANDING_MPS - 0.01, None) == (f"standing, label {UNLABELLED}",)
    assert standstill_group(STANDING_MPS, "stop") == ()
    assert standstill_group(5.0, "keep_lane") == ()


def test_targets_are_judged_on_the_streaming_figures(evaluated):
    _, out = evaluated
    report = json.loads((out / JSON_FILE).read_text())
    targets, overall = report["targets"], report["overall"][STREAMING]
    checks = targets["checks"]
    assert targets["mode"] == STREAMING and targets["limits"]["cv_ratio"] == 0.5
    assert checks["minade1_cv_ratio"]["value"] == overall["minade1_cv_ratio"]
    assert checks["minade1_cv_ratio"]["pass"] == (overall["minade1_cv_ratio"] <= 0.5)
    assert checks["decision_match"]["pass"] == (overall["decision_match_rate"] >= 0.9)
    assert checks["accepted_length_streaming"]["value"] == overall["accepted_length_mean"]
    gap = checks["streaming_minade1_gap"]
    assert gap["value"] == pytest.approx(abs(report["agreement"]["minade1_delta_mean"]))
    assert gap["limit"] == pytest.approx(max(0.1, 0.1 * report["overall"][FULL]["minade1_6s"]))
    tags = report["breakdowns"]["scenario tag"]
    per_tag = checks["decision_match_per_tag"]
    assert set(per_tag["tags"]) == {t for t, e in tags.items() if e[STREAMING]["windows"] >= 30}
    assert targets["pass"] == all(c["pass"] for c in checks.values())
    markdown = (out / MARKDOWN_FILE).read_text()
    assert "By scenario tag:" in markdown and "| streaming_same_coc |" in markdown
    assert "minADE6" not in markdown


def test_bad_settings_and_windowless_drives_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="held-out range"):
        HeldOutSettings(first_seed=5)
    with pytest.raises(ValueError, match="held-out range"):
        HeldOutSettings(first_seed=1000999, drives=2)
    with pytest.raises(ValueError, match="device"):
        HeldOutSettings(device="tpu")
    model = make_sim_sized_model_dir(tmp_path / "model")
    assert main(["--model-dir", str(model), "--out", str(tmp_path / "out"), "--drives", "1",
                 "--seconds", "2"]) == 2
    assert "no window was planned" in capsys.readouterr().err


def test_streaming_only_gives_the_streaming_figures_and_leaves_the_pair_checks_open(
        evaluated, tmp_path):
    _, paired_out = evaluated
    paired = json.loads((paired_out / JSON_FILE).read_text())
    model = make_sim_sized_model_dir(tmp_path / "model")
    out = tmp_path / "out"
    assert main(["--model-dir", str(model), "--out", str(out), "--drives", "1", "--seconds",
                 str(SECONDS), "--first-seed", str(SEED), "--device", "cpu",
                 "--num-samples", "2", "--streaming-only"]) == 0
    report = json.loads((out / JSON_FILE).read_text())
    assert set(report["overall"]) == {STREAMING} and report["agreement"] is None
    rows, paired_rows = report["windows"], paired["windows"]
    assert [r["t0"] for r in rows] == [r["t0"] for r in paired_rows]
    assert all(FULL not in r for r in rows)
    assert [r[STREAMING]["coc"] for r in rows] == [r[STREAMING]["coc"] for r in paired_rows]
    checks = report["targets"]["checks"]
    for name in ("streaming_same_coc", "streaming_minade1_gap"):
        assert checks[name]["measured"] is False and checks[name]["pass"] is False
    assert checks["decision_match"]["value"] == report["overall"][STREAMING][
        "decision_match_rate"]
    assert not report["targets"]["pass"]
    markdown = (out / MARKDOWN_FILE).read_text()
    assert "Streaming only" in markdown and "not measured" in markdown
