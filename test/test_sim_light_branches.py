"""Light branches: a light edit changes the head facing the ego from its time on and nothing
before it, and the other traffic keeps the light's cycle; the forks of a red-light wait start
from the seed's own drive, an early green holds the car a reaction time under a green lamp
with go labels and the expert's start as the future, then it starts; a held red keeps it
standing under a red one; a stand-back stands farther short of the line than the expert
waits, moving up under red and starting under green in its futures, and released under red
it moves up to the line before the green; the training drives of the forks carry those
labels."""

import dataclasses

import numpy as np
import pytest

from flashdrive_ros.model.config import tiny
from flashdrive_ros.sim.drive import FRAME_HZ, HISTORY_STEPS, SUBSTEPS, simulate
from flashdrive_ros.sim.entities import LightEdit, TrafficLight
from flashdrive_ros.sim.labels import DECISIONS, RED_WAIT_GAP, STANDING_MPS, label_drive
from flashdrive_ros.sim.light_branches import (
    LightBranches,
    branch_logs,
    drive_forks,
    red_waits,
)
from flashdrive_ros.sim.vehicle import EGO_LENGTH, REAR_OVERHANG
from flashdrive_ros.train.generate import light_branch_drives

SEED, SECONDS = 1000, 14.0


@pytest.fixture(scope="module")
def drive():
    return simulate(SEED, SECONDS)


SPEC = LightBranches(early_greens=3, held_red=True, natural_wait=True)


@pytest.fixture(scope="module")
def branches(drive):
    return branch_logs(SEED, SECONDS, SPEC, drive)


def test_an_ego_view_changes_the_head_facing_the_ego_and_not_the_cycle():
    light = TrafficLight(stop_s=100.0, oncoming_stop_s=110.0, mode="stop", t_trigger=10.0)
    assert light.turned_green_at() == 20.5 and light.ego_green_at() == 20.5
    LightEdit(15.0, 0, "green").apply([light])
    assert [light.ego_state(t) for t in (11.0, 14.99, 15.0, 30.0)] == [
        "yellow", "red", "green", "green"]
    assert [light.state(t) for t in (15.0, 20.0, 21.0)] == ["red", "red", "green"]
    assert light.ego_green_at() == 15.0
    LightEdit(21.0, 0, "red").apply([light])
    assert light.ego_state(25.0) == "red" and light.state(25.0) == "green"
    assert light.ego_green_at() is None
    light.held = "green"
    assert light.ego_state(25.0) == "green"
    with pytest.raises(ValueError, match="a green edit ends a red"):
        LightEdit(5.0, 0, "green").apply([TrafficLight(stop_s=100.0, oncoming_stop_s=110.0,
                                                       mode="stop", t_trigger=10.0)])


def test_light_edits_and_branch_settings_are_validated():
    for bad in ({"state": "yellow"}, {"index": -1}, {"t": float("nan")}):
        with pytest.raises(ValueError):
            LightEdit(**{"t": 1.0, "index": 0, "state": "green", **bad})
    for bad in ({"early_greens": -1}, {"after_s": 0.0}, {"after_s": float("inf")},
                {"reaction_s": (2.0, 1.0)}, {"reaction_s": (-1.0, 1.0)},
                {"min_standing_s": -1.0}, {"stand_back_m": (RED_WAIT_GAP - 1.0, 8.0)},
                {"stand_back_m": (9.0, 8.0)}, {"stand_back_release": "amber"}):
        with pytest.raises(ValueError, match="LightBranches"):
            LightBranches(**bad)
    assert not LightBranches().enabled
    assert LightBranches(stand_back=True).enabled


def test_a_light_edit_leaves_the_drive_before_its_time_unchanged(drive):
    wait = red_waits(drive)[0]
    t = (wait.first + 10) / FRAME_HZ
    edited = simulate(SEED, SECONDS, light_edits=(LightEdit(t, wait.light, "green"),))
    step = int(round(t * FRAME_HZ)) * SUBSTEPS
    assert np.array_equal(edited.ego[:step + 1], drive.ego[:step + 1])
    assert edited.scenes[wait.first + 9].light_states == drive.scenes[wait.first + 9].light_states
    assert edited.scenes[wait.first + 10].light_states[wait.light] == "green"
    assert drive.scenes[wait.first + 10].light_states[wait.light] == "red"
    assert edited.ego[-1, 1:3].tolist() != drive.ego[-1, 1:3].tolist()


def test_a_drive_that_ends_early_is_the_start_of_the_full_drive(drive):
    short = simulate(SEED, SECONDS, end_s=5.0)
    assert short.frame_count == 51
    assert np.array_equal(short.ego, drive.ego[:len(short.ego)])
    with pytest.raises(ValueError, match="end_s"):
        simulate(SEED, SECONDS, end_s=SECONDS + 1.0)


def test_the_drive_has_one_red_wait_where_the_ego_stands_at_a_red_light(drive):
    waits = red_waits(drive)
    assert len(waits) == 1 and waits[0].last - waits[0].first >= 20
    for k in range(waits[0].first, waits[0].last + 1):
        assert drive.infos[k].v < STANDING_MPS
        assert drive.scenes[k].light_states[waits[0].light] == "red"
    assert drive.scenes[waits[0].last + 1].light_states[waits[0].light] == "green"


def test_forks_are_drawn_inside_the_wait(drive):
    wait = red_waits(drive)[0]
    forks = drive_forks(drive, SPEC, np.random.default_rng(0))
    greens = [f for f in forks if f.edit is not None and f.edit.state == "green"]
    reds = [f for f in forks if f.edit is not None and f.edit.state == "red"]
    natural = [f for f in forks if f.edit is None]
    assert len(greens) == 3 and len({f.frame for f in greens}) == 3
    margin = SPEC.min_standing_s * FRAME_HZ
    for fork in greens:
        assert wait.first + margin <= fork.frame <= wait.last - margin
        assert fork.edit.t == fork.hold_at == fork.frame / FRAME_HZ
        assert SPEC.reaction_s[0] <= fork.hold_s <= SPEC.reaction_s[1]
    assert [(f.frame, f.edit.t, f.edit.index, f.hold_s) for f in reds] == [
        (wait.last, wait.last / FRAME_HZ, wait.light, 0.0)]
    assert [(f.frame, f.hold_at) for f in natural] == [(wait.first, (wait.last + 1) / FRAME_HZ)]
    assert drive_forks(drive, LightBranches(), np.random.default_rng(0)) == []


def test_each_fork_starts_from_the_seed_drive_and_holds_history_then_the_new_colour(drive,
                                                                                    branches):
    wait = red_waits(drive)[0]
    after = int(round(SPEC.after_s * FRAME_HZ))
    assert len(branches) == SPEC.early_greens + 2
    for log in branches:
        first = int(round(log.infos[0].t * FRAME_HZ))
        fork = first + HISTORY_STEPS - 1
        assert min(HISTORY_STEPS + after, drive.frame_count - first) <= log.frame_count
        assert log.frame_count <= drive.frame_count - first
        assert np.allclose(log.ego[:HISTORY_STEPS * SUBSTEPS - SUBSTEPS, 1:],
                           drive.ego[first * SUBSTEPS:fork * SUBSTEPS, 1:])
        assert log.ego[0, 0] == 0.0
        assert log.future(log.frame_count - 1).shape == (64, 3)
        assert wait.first <= fork <= wait.last


def test_an_early_green_starts_the_waiting_expert_and_a_held_red_keeps_it_standing(branches):
    wait_light = 0
    fork = HISTORY_STEPS - 1
    starts = [b for b in branches if b.scenes[fork].light_states[wait_light] == "green"]
    holds = [b for b in branches if b.scenes[-1].light_states[wait_light] == "red"
             and b.scenes[fork - 1].light_states[wait_light] == "red"]
    assert len(starts) == SPEC.early_greens and len(holds) == 1
    for log in starts:
        labels = label_drive(log.infos, log.frame_count)
        assert log.scenes[fork - 1].light_states[wait_light] == "red"
        assert log.infos[fork].v < STANDING_MPS
        assert labels[fork - 1].decision == "stop"
        assert labels[fork].decision == "keep_lane" and "green" in labels[fork].coc
        assert log.future(fork)[-1, 0] > 10.0
        assert np.abs(log.future(fork - 1)[:, :2]).max() < 1.0
        held = int(SPEC.reaction_s[0] * FRAME_HZ)
        assert max(info.v for info in log.infos[fork:fork + held]) < STANDING_MPS
        assert all(label.decision == "keep_lane" for label in labels[fork:fork + held])
        assert all(log.future(k)[-1, 0] > 5.0 for k in range(fork, fork + held))
        assert log.infos[-1].v > 1.0
        assert all(info.reason != "vehicle" for info in log.infos[fork:])
    hold = holds[0]
    labels = label_drive(hold.infos, hold.frame_count)
    assert all(label.decision == "stop" for label in labels[fork:])
    assert max(info.v for info in hold.infos[fork:]) < STANDING_MPS
    assert np.abs(hold.future(fork)[:, :2]).max() < 0.5


def test_the_natural_wait_stands_at_red_then_a_reaction_time_at_its_own_green(drive, branches):
    wait = red_waits(drive)[0]
    fork = HISTORY_STEPS - 1
    natural = [b for b in branches if b.scenes[fork].light_states[0] == "red"
               and b.scenes[-1].light_states[0] == "green"]
    assert len(natural) == 1
    log = natural[0]
    labels = label_drive(log.infos, log.frame_count)
    green = fork + wait.last + 1 - wait.first
    assert log.scenes[green].light_states[0] == "green"
    assert all(label.decision == "stop" for label in labels[fork:green])
    assert all(np.abs(log.future(k)[:, :2]).max() < 1.0 for k in range(fork, green - 1))
    held = int(SPEC.reaction_s[0] * FRAME_HZ)
    assert max(info.v for info in log.infos[green:green + held]) < STANDING_MPS
    assert all(label.decision == "keep_lane" for label in labels[green:green + held])
    assert all(log.future(k)[-1, 0] > 5.0 for k in range(green, green + held))


def test_the_other_traffic_keeps_the_light_cycle_in_every_fork(drive, branches):
    def traffic(scene):
        return sorted((b.kind, round(b.x, 3), round(b.y, 3)) for b in scene.boxes
                      if b.kind in ("oncoming", "cross"))

    moved = 0
    for log in branches:
        first = int(round(log.infos[0].t * FRAME_HZ))
        for k, scene in enumerate(log.scenes):
            assert traffic(scene) == traffic(drive.scenes[first + k])
        moved += traffic(log.scenes[-1]) != traffic(log.scenes[HISTORY_STEPS - 1])
    assert moved > 0


def test_branches_are_deterministic_for_a_seed(drive):
    spec = LightBranches(early_greens=1)
    first, again = (branch_logs(SEED, SECONDS, spec, drive) for _ in range(2))
    assert len(first) == 1 and first[0].infos[0].t == again[0].infos[0].t
    assert np.array_equal(first[0].ego, again[0].ego)


def test_training_drives_of_the_forks_are_rendered_and_labelled():
    cfg = tiny(512)
    spec = LightBranches(early_greens=1, held_red=False, after_s=1.0)
    drives = light_branch_drives([SEED], SECONDS, cfg, spec, workers=1)
    assert len(drives) == 1
    made = drives[0]
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    assert made.frames.shape == (HISTORY_STEPS + 10, len(cfg.prompt.camera_names), *size, 3)
    fork = HISTORY_STEPS - 1
    assert made.window_steps(cfg.prompt.num_frames, cfg.action.num_history)[0] == fork
    assert DECISIONS[made.decision[fork]] == "keep_lane"
    assert DECISIONS[made.decision[fork - 1]] == "stop"
    assert made.speed[fork] < STANDING_MPS
    assert light_branch_drives([SEED], SECONDS, cfg, dataclasses.replace(
        spec, early_greens=0), workers=1) == []


@pytest.fixture(scope="module")
def long_drive():
    return simulate(SEED, 20.0)


def stand_back_fork(drive, spec):
    """-> (wait, fork, gap, fork log, its labels) of the drive's first red wait."""
    wait = red_waits(drive)[0]
    light = drive.world.lights()[wait.light]
    forks = drive_forks(drive, spec, np.random.default_rng([SEED, 23]))
    assert len(forks) == 1 and forks[0].edit is None
    fork = forks[0]
    gap = light.stop_s - (EGO_LENGTH - REAR_OVERHANG) - fork.rest_s
    assert spec.stand_back_m[0] <= gap <= spec.stand_back_m[1]
    (log,) = branch_logs(SEED, drive.seconds, spec, drive)
    return wait, fork, gap, log, label_drive(log.infos, log.frame_count)


def assert_stands_back_under_red(log, labels, gap, end):
    for k in range(HISTORY_STEPS - 1, end):
        info = log.infos[k]
        assert info.v < STANDING_MPS and info.light_state == "red"
        assert abs(info.light_gap - gap) < 0.3
        assert labels[k].decision == "stop"
        assert gap - 4.5 - 0.3 < log.future(k)[-1, 0] < gap + 0.3


def test_a_stand_back_holds_the_ego_short_of_the_line_then_it_moves_up_or_starts(long_drive):
    spec = LightBranches(stand_back=True)
    wait, fork, gap, log, labels = stand_back_fork(long_drive, spec)
    assert wait.first <= fork.frame <= wait.last
    assert fork.hold_at == (wait.last + 1) / FRAME_HZ
    first = HISTORY_STEPS - 1
    green = first + wait.last + 1 - fork.frame
    assert log.infos[0].t == (fork.frame - first) / FRAME_HZ
    assert_stands_back_under_red(log, labels, gap, green)
    held = int(spec.reaction_s[0] * FRAME_HZ)
    for k in range(green, green + held):
        assert log.infos[k].v < STANDING_MPS and log.infos[k].light_state == "green"
        assert labels[k].decision == "keep_lane" and log.future(k)[-1, 0] > 10.0
    assert log.infos[log.frame_count - 1].v > 1.0


def test_a_stand_back_released_under_red_moves_up_before_the_green(long_drive):
    spec = LightBranches(stand_back=True, stand_back_release="red", reaction_s=(0.5, 0.5))
    wait, fork, gap, log, labels = stand_back_fork(long_drive, spec)
    assert fork.hold_s == 0.0 and fork.hold_at == pytest.approx(fork.frame / FRAME_HZ + 0.5)
    assert fork.hold_at < (wait.last + 1) / FRAME_HZ
    first = HISTORY_STEPS - 1
    release = first + int(round(fork.hold_at * FRAME_HZ)) - fork.frame
    green = first + wait.last + 1 - fork.frame
    assert_stands_back_under_red(log, labels, gap, release)
    assert all(labels[k].decision == "stop" for k in range(release, green))
    assert log.infos[green].light_state == "green"
    assert log.infos[green].light_gap < gap - 2.0
    for info in log.infos[green:log.frame_count]:
        assert not (info.light_state == "green" and info.v < STANDING_MPS
                    and info.light_gap > RED_WAIT_GAP)
