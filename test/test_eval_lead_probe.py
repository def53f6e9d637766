"""Lead probe: a lead on a straight road is found, the approach puts the ego's front bumper at
the gap behind a standing or a moving lead, the summary counts pairs, and the command plans
both with a real engine."""

import json

import numpy as np
import pytest
from helpers.tiny_model import make_sim_sized_model_dir

from flashdrive_ros.eval.lead_probe import (
    LEADS,
    approach_scenes,
    approach_window,
    lead_scenes,
    main,
    summarize,
    travel_per_gap,
)
from flashdrive_ros.sim.drive import HISTORY_STEPS, simulate
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.vehicle import FRONT_OFFSET

SEED, SECONDS = 1000109, 4.0


@pytest.fixture(scope="module")
def drive():
    log = simulate(SEED, SECONDS)
    return log, lead_scenes(log)


def test_a_lead_on_a_straight_road_is_found_in_the_ego_lane(drive):
    log, leads = drive
    assert len(leads) == 1
    lead = leads[0]
    assert log.infos[lead.frame].reason == "lead"
    assert lead.frame == HISTORY_STEPS - 1 or log.infos[lead.frame - 1].reason != "lead"
    assert lead.scene.boxes[lead.lead_index].kind == "lead"
    assert lead.lead_s > lead.scene.route_s
    assert abs(lead.lead_d - lead.ego_d) < 0.5


@pytest.mark.parametrize("moving, moving_mps", [(False, None), (True, None), (False, 2.0),
                                                (True, 2.0)])
def test_the_approach_ends_at_the_gap_behind_a_standing_or_moving_lead(drive, moving,
                                                                      moving_mps):
    log, (lead, *_) = drive
    gap, speed, dt = 10.0, 5.0, 0.1
    scenes = approach_scenes(log.world.route, lead, gap, speed, moving, 4, dt, moving_mps)
    box = lead.scene.boxes[lead.lead_index]

    def lead_box(scene):
        return scene.boxes[lead.lead_index]

    def apart(scene):
        shown = lead_box(scene)
        return np.hypot(shown.x - scene.ego.x, shown.y - scene.ego.y)

    assert apart(scenes[-1]) == pytest.approx(gap + FRONT_OFFSET + box.length / 2, abs=0.05)
    ego_steps = [np.hypot(b.ego.x - a.ego.x, b.ego.y - a.ego.y)
                 for a, b in zip(scenes, scenes[1:])]
    lead_steps = [np.hypot(lead_box(b).x - lead_box(a).x, lead_box(b).y - lead_box(a).y)
                  for a, b in zip(scenes, scenes[1:])]
    assert ego_steps == pytest.approx([speed * dt] * 3, abs=1e-3)
    lead_mps = (speed if moving_mps is None else moving_mps) if moving else 0.0
    assert lead_steps == pytest.approx([lead_mps * dt] * 3, abs=1e-3)
    assert all(lead_box(s).braking is not moving for s in scenes)
    assert all(s.ego.v == speed for s in scenes)
    others = [i for i in range(len(lead.scene.boxes)) if i != lead.lead_index]
    assert all(s.boxes[i] == lead.scene.boxes[i] for s in scenes for i in others)


def test_the_window_has_a_straight_history_at_the_speed(drive):
    log, (lead, *_) = drive
    window = approach_window(Renderer(log.world), log.world.route, lead, 10.0, 5.0, False,
                             4, 0.1, 16, 0.1)
    assert window.images.shape[:2] == (4, 4)
    assert window.speed == 5.0
    assert window.ego_history[:, 0] == pytest.approx(-0.5 * np.arange(15, -1, -1), abs=1e-3)
    assert np.abs(window.ego_history[:, 1]).max() < 0.05
    assert not np.array_equal(window.images[:, 0], window.images[:, -1])


def test_the_summary_counts_the_pairs_of_each_cell():
    def row(seed, gap, lead, stops, decision):
        return {"seed": seed, "frame": 7, "speed": 4.0, "gap_m": gap, "lead": lead,
                "stops_short": stops, "clearance_m": 1.0 if stops else -5.0,
                "decision": decision}

    rows = [row(1, 8.0, "standing", True, "stop"), row(1, 8.0, "moving", False, "follow"),
            row(2, 8.0, "standing", True, "stop"), row(2, 8.0, "moving", True, "stop"),
            row(1, 15.0, "standing", False, "follow"), row(1, 15.0, "moving", False, "follow")]
    first, second = summarize(rows)
    assert first == {"speed": 4.0, "gap_m": 8.0, "leads": 2, "standing_stops_short": 2,
                     "moving_stops_short": 1, "read": 1, "standing_clearance_m_median": 1.0,
                     "standing_decisions": {"stop": 2},
                     "moving_decisions": {"follow": 1, "stop": 1},
                     "standing_travel_per_gap": pytest.approx(1.0 + 6.0 / 7.0, abs=1e-3)}
    assert (second["leads"], second["read"], second["standing_clearance_m_median"]) == (
        1, 0, -5.0)
    assert second["standing_travel_per_gap"] == first["standing_travel_per_gap"]
    assert summarize(rows[:4])[0]["standing_travel_per_gap"] is None


def test_the_travel_slope_is_one_for_a_fixed_margin_and_zero_for_a_fixed_travel():
    def standing(gap, clearance):
        return {"gap_m": gap, "clearance_m": clearance}

    assert travel_per_gap([standing(g, 2.0) for g in (8.0, 15.0, 25.0)]) == pytest.approx(1.0)
    assert travel_per_gap([standing(g, g - 30.0) for g in (8.0, 15.0, 25.0)]) == pytest.approx(
        0.0, abs=1e-9)
    assert travel_per_gap([standing(8.0, 1.0), standing(8.0, 3.0)]) is None


def test_the_command_plans_each_lead_standing_and_moving(tmp_path, capsys):
    model = make_sim_sized_model_dir(tmp_path / "model")
    out = tmp_path / "out"
    assert main(["--model-dir", str(model), "--out", str(out), "--drives", "1",
                 "--first-seed", str(SEED), "--seconds", str(SECONDS), "--gaps-m", "10",
                 "--speeds", "5"]) == 0
    report = json.loads((out / "lead_probe.json").read_text())
    assert report["seeds"] == [SEED]
    assert sorted(r["lead"] for r in report["rows"]) == sorted(LEADS)
    for row in report["rows"]:
        assert row["clearance_m"] == pytest.approx(10.0 - row["travel_m"], abs=1e-3)
        assert row["stops_short"] == (row["travel_m"] <= 10.0)
    assert report["summary"][0]["leads"] == 1
    text = (out / "lead_probe.md").read_text()
    assert "| 5 | 10 | 1.2 | 1 |" in text and text.rstrip().endswith("| - |")
    assert "Lead probe" in capsys.readouterr().out
    sentence = "Stop"
    forced = tmp_path / "forced"
    assert main(["--model-dir", str(model), "--out", str(forced), "--drives", "1",
                 "--first-seed", str(SEED), "--seconds", str(SECONDS), "--gaps-m", "10",
                 "--speeds", "5", "--coc", sentence]) == 0
    rows = json.loads((forced / "lead_probe.json").read_text())["rows"]
    assert [r["coc"].strip() for r in rows] == [sentence] * 2
    assert all(r["coc_forced"] and r["decision"] == "stop" for r in rows)
    assert not any(r["coc_forced"] for r in report["rows"])
    assert f'under the CoC "{sentence}"' in (forced / "lead_probe.md").read_text()
    slow = tmp_path / "slow"
    assert main(["--model-dir", str(model), "--out", str(slow), "--drives", "1",
                 "--first-seed", str(SEED), "--seconds", str(SECONDS), "--gaps-m", "10",
                 "--speeds", "5", "--moving-mps", "2"]) == 0
    assert "driving at 2 m/s." in (slow / "lead_probe.md").read_text()
    assert "driving at the ego's speed." in text
    for bad in (["--gaps-m", "1"], ["--speeds", "x"], ["--first-seed", "5"],
                ["--moving-mps", "2,3"], ["--moving-mps", "0"]):
        with pytest.raises(SystemExit):
            main(["--model-dir", str(model), "--out", str(out), *bad])
