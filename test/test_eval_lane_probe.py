"""Lane probe: bend, nudge and straight frames are found on the side the route turns, the
window moves the ego sideways across the route and is the ordinary one unmoved, the deviation
reads a plan against the expert's line, the clearance and the summary add up, and the command
plans every frame at every offset with a real engine."""

import json

import numpy as np
import pytest
from helpers.tiny_model import make_sim_sized_model_dir

from flashdrive_ros.eval.lane_probe import (
    AHEAD_M,
    FRAMES_APART,
    KINDS,
    MIN_NUDGE_M,
    PER_STRETCH,
    STRAIGHT_AHEAD_M,
    STRAIGHT_CURVATURE,
    STRAIGHT_PER_DRIVE,
    clearance,
    lateral_deviation,
    main,
    probe_frames,
    route_positions,
    shifted_poses,
    shifted_scene,
    shifted_window,
    summarize,
    to_world,
)
from flashdrive_ros.model.config import ActionConfig, PromptConfig
from flashdrive_ros.sim.bends import TIGHT_CURVATURE
from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.sim.drive import HISTORY_STEPS, SUBSTEPS, simulate
from flashdrive_ros.sim.expert import Expert
from flashdrive_ros.sim.render import Renderer

SECONDS = 20.0
# nudge, straight, right bend | left bend, nudge, straight | straight only, more than the cap
BEND_SEEDS = {1000111: "right_bend", 1000110: "left_bend"}
STRAIGHT_SEED = 1000100
CLI_SEED, CLI_SECONDS = 1000111, 3.0


@pytest.fixture(scope="module")
def drives():
    out = {}
    for seed in (*BEND_SEEDS, STRAIGHT_SEED):
        log = simulate(seed, SECONDS)
        out[seed] = (log, probe_frames(log, Expert(log.world)), route_positions(log))
    return out


def _ahead(s: float, metres: float) -> np.ndarray:
    return s + np.arange(0.0, metres + 0.25, 0.5)


@pytest.mark.parametrize("seed", sorted(BEND_SEEDS))
def test_each_kind_is_found_with_the_side_the_route_turns(drives, seed):
    log, frames, _ = drives[seed]
    route, expert = log.world.route, Expert(log.world)
    assert {p.kind for p in frames} == {BEND_SEEDS[seed], "nudge", "straight"}
    assert [p.frame for p in frames] == sorted({p.frame for p in frames})
    assert all(HISTORY_STEPS - 1 <= p.frame < log.frame_count for p in frames)
    for p in frames:
        info = log.infos[p.frame]
        assert info.v >= 3.0 and info.ped_gap is None
        s = info.route_s
        if p.kind == "nudge":
            assert expert.nudge_at(_ahead(s, AHEAD_M)).max() >= MIN_NUDGE_M
            parked = [route.project((b.x, b.y), hint=s, window=80.0)
                      for b in log.scenes[p.frame].boxes if b.kind == "parked"]
            assert any(d < 0 and s - 10.0 < car_s < s + 60.0 for car_s, d in parked)
        elif p.kind == "straight":
            assert np.abs(route.curvature_at(_ahead(s, STRAIGHT_AHEAD_M))).max() <= (
                STRAIGHT_CURVATURE)
            assert expert.nudge_at(_ahead(s, STRAIGHT_AHEAD_M)).max() == 0.0
        else:
            assert np.abs(route.curvature_at(_ahead(s, AHEAD_M))).max() >= TIGHT_CURVATURE
            turn = route.pose_at(s + 2 * AHEAD_M)[2] - route.pose_at(s)[2]
            assert (turn > 0.1) if p.kind == "left_bend" else (turn < -0.1)
    for kind in KINDS:
        chosen = [p.frame for p in frames if p.kind == kind]
        stretches = np.split(chosen, np.flatnonzero(np.diff(chosen) != FRAMES_APART) + 1)
        assert all(len(stretch) <= PER_STRETCH for stretch in stretches)


def test_straight_frames_are_capped_evenly_over_the_drive(drives):
    log, frames, _ = drives[STRAIGHT_SEED]
    straight = [p.frame for p in frames if p.kind == "straight"]
    assert len(straight) == STRAIGHT_PER_DRIVE
    assert straight[0] == min(p.frame for p in frames)
    assert max(np.diff(straight)) > 5 * FRAMES_APART


def _window(log, positions, k, d0):
    renderer = Renderer(log.world, 64, 32, rig())
    return shifted_window(renderer, log, positions, k, d0, PromptConfig(), ActionConfig())


@pytest.mark.parametrize("seed, kind, tolerance", [(1000111, "straight", 1e-6),
                                                   (1000111, "right_bend", 1e-3),
                                                   (1000110, "left_bend", 1e-3)])
def test_the_window_moves_the_ego_across_the_route(drives, seed, kind, tolerance):
    log, frames, positions = drives[seed]
    route = log.world.route
    k = next(p.frame for p in frames if p.kind == kind)
    i0 = k * SUBSTEPS
    logged, moved = _window(log, positions, k, 0.0), _window(log, positions, k, 0.5)
    assert np.abs(logged.ego_history - log.history(k)).max() < 1e-9
    assert logged.speed == moved.speed == pytest.approx(log.ego[i0, 4])
    assert not np.array_equal(logged.images, moved.images)
    origin = shifted_poses(route, log, positions, slice(i0, i0 + 1), 0.5)[0]
    history = to_world(origin, moved.ego_history[:, [0, 1, 3]])  # history: [16, 3]
    rows = i0 - SUBSTEPS * np.arange(HISTORY_STEPS - 1, -1, -1)
    moved_d = [route.project(pose[:2], hint=positions[i0, 0])[1] for pose in history]
    assert np.abs(np.array(moved_d) - positions[rows, 1] - 0.5).max() < tolerance
    assert np.abs(history[:, 2] - log.ego[rows, 3]).max() < 1e-9
    for j in range(k - 3, k + 1):
        scene = log.scenes[j]
        shifted = shifted_scene(route, scene, 0.5)
        s, d = route.project((shifted.ego.x, shifted.ego.y), hint=scene.route_s)
        assert d == pytest.approx(log.infos[j].route_d + 0.5, abs=tolerance)
        assert s == pytest.approx(scene.route_s, abs=0.05)
        assert (shifted.ego.yaw, shifted.ego.v, shifted.route_s, shifted.boxes) == (
            scene.ego.yaw, scene.ego.v, scene.route_s, scene.boxes)


@pytest.mark.parametrize("kind", ["straight", "right_bend"])
def test_the_expert_future_as_a_plan_keeps_to_the_line(drives, kind):
    log, frames, positions = drives[1000111]
    route = log.world.route
    k = next(p.frame for p in frames if p.kind == kind)
    i0 = k * SUBSTEPS
    expert_d = positions[i0 + np.array([50, 100, 150]), 1]
    future = log.future(k)  # future: [64, 3] (x, y, yaw) in the t0 ego frame
    s0 = positions[i0, 0]
    assert lateral_deviation(route, log.ego[i0, 1:4], s0, future, 0.1, expert_d) == (
        pytest.approx([0.0] * 3, abs=1e-6))
    if kind == "straight":
        moved = shifted_poses(route, log, positions, slice(i0, i0 + 1), 0.5)[0]
        assert lateral_deviation(route, moved, s0, future, 0.1, expert_d) == pytest.approx(
            [0.5] * 3, abs=1e-6)
        left = future + (0.0, 0.5, 0.0)
        assert lateral_deviation(route, log.ego[i0, 1:4], s0, left, 0.1, expert_d) == (
            pytest.approx([0.5] * 3, abs=2e-3))


def test_the_expert_passes_the_parked_car_with_room(drives):
    log, frames, positions = drives[1000111]
    k = next(p.frame for p in frames if p.kind == "nudge")
    i0 = k * SUBSTEPS
    poses = log.ego[i0 + SUBSTEPS * np.arange(1, 65), 1:4]
    parked = [b for b in log.scenes[k].boxes if b.kind == "parked"]
    assert 0.2 < clearance(poses, parked) < 1.0
    assert clearance(poses, []) is None


def test_the_summary_takes_medians_per_kind_and_offset():
    def row(kind, d0, dev_3s, inside=None, towards=None, plan=None, expert=None):
        return {"kind": kind, "offset_m": d0, "dev_1s": 0.1, "dev_2s": 0.2, "dev_3s": dev_3s,
                "return_3s": None if d0 == 0 else 1 - dev_3s / d0, "inside_3s": inside,
                "towards_car_3s": towards, "plan_clearance_m": plan,
                "expert_clearance_m": expert}

    rows = [row("straight", 0.0, 0.3), row("right_bend", 1.0, 0.5, inside=-0.5),
            row("right_bend", 1.0, -0.1, inside=0.1), row("right_bend", 1.0, 0.2, inside=-0.2),
            row("nudge", 0.0, -0.4, towards=0.4, plan=0.2, expert=0.5)]
    bend, nudge, straight = summarize(rows)
    assert (bend["kind"], bend["offset_m"], bend["frames"]) == ("right_bend", 1.0, 3)
    assert bend["dev_3s_median"] == 0.2 and bend["dev_3s_mean"] == pytest.approx(0.2)
    assert bend["return_3s_median"] == pytest.approx(0.8)
    assert bend["inside_3s_median"] == -0.2 and bend["towards_car_3s_median"] is None
    assert (nudge["towards_car_3s_median"], nudge["plan_clearance_m_median"],
            nudge["expert_clearance_m_median"], nudge["return_3s_median"]) == (
        0.4, 0.2, 0.5, None)
    assert (straight["frames"], straight["dev_1s_median"], straight["plan_clearance_m_median"]
            ) == (1, 0.1, None)


def test_the_command_plans_every_frame_at_every_offset(tmp_path, capsys):
    model = make_sim_sized_model_dir(tmp_path / "model")
    out = tmp_path / "out"
    assert main(["--model-dir", str(model), "--out", str(out), "--drives", "1",
                 "--first-seed", str(CLI_SEED), "--seconds", str(CLI_SECONDS),
                 "--offsets-m", "0,0.5"]) == 0
    report = json.loads((out / "lane_probe.json").read_text())
    assert report["seeds"] == [CLI_SEED]
    frames = {row["frame"] for row in report["rows"]}
    assert frames and len(report["rows"]) == 2 * len(frames)
    assert {row["offset_m"] for row in report["rows"]} == {0.0, 0.5}
    for row in report["rows"]:
        assert row["kind"] == "nudge" and row["inside_3s"] is None
        assert row["towards_car_3s"] == pytest.approx(-row["dev_3s"])
        assert row["plan_clearance_m"] is not None and row["expert_clearance_m"] is not None
        if row["offset_m"] == 0.0:
            assert row["return_3s"] is None
        else:
            assert row["return_3s"] == pytest.approx(1 - row["dev_3s"] / 0.5, abs=2e-3)
        assert row["coc"] and row["decision"]
    summary = report["summary"]
    assert [(s["kind"], s["offset_m"], s["frames"]) for s in summary] == [
        ("nudge", 0.0, len(frames)), ("nudge", 0.5, len(frames))]
    assert {"dev_1s_median", "dev_3s_mean", "return_3s_median", "inside_3s_median",
            "towards_car_3s_median", "plan_clearance_m_median",
            "expert_clearance_m_median"} <= set(summary[0])
    text = (out / "lane_probe.md").read_text()
    assert f"| nudge | +0.5 | {len(frames)} |" in text
    assert "Lane probe" in capsys.readouterr().out
    for bad in (["--offsets-m", "3"], ["--offsets-m", "x"], ["--first-seed", "5"]):
        with pytest.raises(SystemExit):
            main(["--model-dir", str(model), "--out", str(out), *bad])
