"""Lamp probe: the standing scene is moved back and recoloured, the summary counts pairs, and
the command plans every wait of a held-out drive under both colours with a real engine."""

import json

import numpy as np
import pytest
from helpers.tiny_model import make_sim_sized_model_dir

from flashdrive_ros.eval.lamp_probe import COLOURS, main, moved_back, summarize
from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.light_branches import red_waits

SEED = 1000103


def test_the_scene_is_moved_back_along_the_heading_and_every_light_recoloured():
    log = simulate(SEED, 12.0)
    wait = red_waits(log)[0]
    scene = log.scenes[wait.first]
    moved = moved_back(scene, 2.0, "green")
    step = np.hypot(moved.ego.x - scene.ego.x, moved.ego.y - scene.ego.y)
    heading = np.array([np.cos(scene.ego.yaw), np.sin(scene.ego.yaw)])
    assert step == pytest.approx(2.0)
    assert np.dot([moved.ego.x - scene.ego.x, moved.ego.y - scene.ego.y], heading) < 0
    assert moved.route_s == pytest.approx(scene.route_s - 2.0)
    assert set(moved.light_states) == {"green"} and "red" in scene.light_states
    assert moved.boxes == scene.boxes


def test_the_summary_counts_the_pairs_of_each_distance():
    def row(seed, back, colour, goes):
        return {"seed": seed, "frame": 100, "back_m": back, "colour": colour, "goes": goes}

    rows = [row(1, 0.0, "red", False), row(1, 0.0, "green", True),
            row(2, 0.0, "red", True), row(2, 0.0, "green", True),
            row(1, 1.0, "red", False), row(1, 1.0, "green", False)]
    assert summarize(rows) == [
        {"back_m": 0.0, "scenes": 2, "red_go": 1, "green_go": 2, "read": 1},
        {"back_m": 1.0, "scenes": 1, "red_go": 0, "green_go": 0, "read": 0}]


def test_the_command_plans_each_wait_under_both_colours(tmp_path, capsys):
    model = make_sim_sized_model_dir(tmp_path / "model")
    out = tmp_path / "out"
    assert main(["--model-dir", str(model), "--out", str(out), "--drives", "1",
                 "--first-seed", str(SEED), "--seconds", "12", "--back-m", "0,1.5"]) == 0
    report = json.loads((out / "lamp_probe.json").read_text())
    assert report["seeds"] == [SEED]
    assert len(report["rows"]) == 2 * len(COLOURS)
    assert {(r["back_m"], r["colour"]) for r in report["rows"]} == {
        (b, c) for b in (0.0, 1.5) for c in COLOURS}
    assert [s["scenes"] for s in report["summary"]] == [1, 1]
    for row in report["rows"]:
        assert row["goes"] == (row["coc"].split(maxsplit=1)[:1] != ["Stop"])
    assert "| 1.5 m | 1 |" in (out / "lamp_probe.md").read_text()
    assert "Lamp probe" in capsys.readouterr().out
    for bad in (["--back-m", "-1"], ["--first-seed", "5"]):
        with pytest.raises(SystemExit):
            main(["--model-dir", str(model), "--out", str(out), *bad])
