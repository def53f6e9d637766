"""Fork probe: the fit tells a plan that stops at the car from one that runs on its speed, the
summary bands the gaps, and the command plans a held-out fork's frames under the expert's CoC
with a real engine, where the expert's own travel ends short of the standing car."""

import json

import numpy as np
import pytest
from helpers.tiny_model import make_sim_sized_model_dir

from flashdrive_ros.eval.fork_probe import MIN_MPS, NEAR_M, fit_travel, main, summarize

SEED, SECONDS = 1000121, 20.0  # a held-out drive with one lead-stop fork in its first 20 s


def test_the_fit_gives_one_per_m_of_gap_for_a_stop_at_the_car_and_none_for_a_run_on_speed():
    rng = np.random.default_rng(0)
    speed = rng.uniform(3.0, 10.0, 40)
    gap = rng.uniform(5.0, 40.0, 40)
    stop = fit_travel(speed, gap, gap - 2.0)
    assert stop == {"a_m": pytest.approx(-2.0), "b_s": pytest.approx(0.0, abs=1e-9),
                    "c": pytest.approx(1.0)}
    run_on = fit_travel(speed, gap, 4.0 * speed)
    assert run_on["c"] == pytest.approx(0.0, abs=1e-9) and run_on["b_s"] == pytest.approx(4.0)
    assert fit_travel(speed[:3], gap[:3], gap[:3]) is None
    assert fit_travel(np.full(10, 5.0), gap[:10], gap[:10]) is None


def test_the_summary_bands_the_gaps_and_counts_overruns():
    def row(gap, speed, expert, plan):
        return {"gap_m": gap, "speed": speed, "expert_travel_m": expert, "travel_m": plan}

    rows = [row(4.0, 2.0, 2.0, 6.0), row(10.0, 5.0, 8.0, 9.0), row(15.0, 8.0, 13.0, 30.0),
            row(30.0, 6.0, 28.0, 20.0)]
    expert, plan = summarize(rows)
    assert (expert["travel"], plan["travel"]) == ("expert", "plan")
    assert (expert["overruns"], plan["overruns"]) == (0, 2)
    assert expert["mean_abs_from_expert_m"] == 0.0
    assert plan["mean_abs_from_expert_m"] == pytest.approx((4 + 1 + 17 + 8) / 4)
    assert [b["windows"] for b in plan["bands"]] == [1, 1, 1, 1]
    assert [b["travel_m_median"] for b in plan["bands"]] == [6.0, 9.0, 30.0, 20.0]
    assert plan["fit"] is not None


def test_the_command_plans_the_fork_frames_under_the_expert_coc(tmp_path, capsys):
    model = make_sim_sized_model_dir(tmp_path / "model", max_coc_tokens=48)
    out = tmp_path / "out"
    assert main(["--model-dir", str(model), "--out", str(out), "--drives", "1",
                 "--first-seed", str(SEED), "--seconds", str(SECONDS), "--per-drive", "1",
                 "--every", "6"]) == 0
    report = json.loads((out / "fork_probe.json").read_text())
    rows = report["rows"]
    assert report["seeds"] == [SEED] and len(rows) >= 4
    assert all(0.0 < r["gap_m"] < NEAR_M and r["speed"] >= MIN_MPS for r in rows)
    assert all(r["expert_travel_m"] < r["gap_m"] for r in rows)
    assert all(r["coc"].startswith("Stop") for r in rows)
    assert all(r["overrun"] == (r["travel_m"] > r["gap_m"]) for r in rows)
    expert, plan = report["summary"]
    assert expert["overruns"] == 0 and expert["windows"] == len(rows)
    assert plan["mean_abs_from_expert_m"] == pytest.approx(
        np.mean([abs(r["travel_m"] - r["expert_travel_m"]) for r in rows]), abs=1e-2)
    text = (out / "fork_probe.md").read_text()
    assert "| expert |" in text and f"0 of {len(rows)}" in text
    assert "Fork probe" in capsys.readouterr().out
    for bad in (["--every", "0"], ["--per-drive", "0"], ["--first-seed", "5"]):
        with pytest.raises(SystemExit):
            main(["--model-dir", str(model), "--out", str(out), *bad])
