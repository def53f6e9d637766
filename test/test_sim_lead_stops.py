"""Lead stops: a car placed standing in the ego lane ahead of an ego that keeps its speed a
while; the fork starts from the seed's own drive, its first windows hold the ego at a steady
speed closing in on the standing car with futures that stop short of it, the expert then
stops behind it without touching it, the car pulls away once the ego has stood behind it and
the ego follows; the training drives of the forks are rendered and labelled, the standing car
a stop with standing-lead labels. A fork's moving twin places a slow car at the same frame and
gap; the ego closes in on it the same way and the expert follows it."""

import dataclasses

import numpy as np
import pytest

from flashdrive_ros.model.config import tiny
from flashdrive_ros.sim.disturbed_drive import simulate_disturbed
from flashdrive_ros.sim.drive import FRAME_HZ, HISTORY_STEPS, SUBSTEPS
from flashdrive_ros.sim.lead_stops import (
    APPROACH_S,
    GAP_M,
    LeadStop,
    LeadStopRun,
    LeadStops,
    lead_stop_log,
    seed_lead_stops,
)
from flashdrive_ros.sim.lead_stop_frames import SETTLE_FRAMES, placing_frames
from flashdrive_ros.sim.labels import DECISIONS, STANDING_MPS, label_drive
from flashdrive_ros.sim.seeds import train_seeds
from flashdrive_ros.sim.vehicle import FRONT_OFFSET
from flashdrive_ros.train.generate import lead_stop_drives
from flashdrive_ros.train.pipeline_args import parse_args
from flashdrive_ros.train.run_data import lead_stop_seeds

SEED, SECONDS = 3, 60.0
SPEC = LeadStops(per_drive=1)


@pytest.fixture(scope="module")
def drive():
    return simulate_disturbed(SEED, SECONDS, None)


@pytest.fixture(scope="module")
def stop(drive):
    (stop,) = seed_lead_stops(SEED, SECONDS, SPEC, drive)
    return stop


@pytest.fixture(scope="module")
def fork(stop):
    log, contrasts = lead_stop_log(SEED, SECONDS, stop, SPEC)
    assert contrasts == {}
    return log


def car_gaps(log):
    """[frame_count] bumper gap from the ego to the placed car (inf where not ahead)."""
    car = log.world.vehicles[-1]
    gaps = []
    for scene in log.scenes[:log.frame_count]:
        boxes = [b for b in scene.boxes if b.kind == "lead" and b.color == car.color
                 and b.length == car.length]
        ego = scene.ego
        ahead = [np.hypot(b.x - ego.x, b.y - ego.y) - b.length / 2 - FRONT_OFFSET
                 for b in boxes]
        gaps.append(min(ahead) if ahead else np.inf)
    return np.array(gaps)


def test_lead_stop_settings_are_validated():
    for bad in ({"per_drive": -1}, {"reach_s": (0.0, 2.0)}, {"lag_s": (5.0, 2.0)},
                {"after_s": 0.0}, {"max_s": float("inf")}):
        with pytest.raises(ValueError, match="LeadStops"):
            LeadStops(**bad)
    assert not LeadStops().enabled and SPEC.enabled
    stop = LeadStop(0, 4.0, 8.0, 5.0, 3.0, 2.0, 7.0, (4.5, 1.8, 1.5), (10, 20, 30))
    assert (stop.gap_m(2.0), stop.gap_m(8.0), stop.gap_m(30.0)) == (GAP_M[0], 32.0, GAP_M[1])


def test_stops_are_drawn_at_clear_straight_frames_and_are_deterministic(drive, stop):
    assert stop.frame in placing_frames(drive, stop)
    info = drive.infos[stop.frame]
    assert info.v >= 4.0 and info.reason == "free" and info.light_gap is None
    assert seed_lead_stops(SEED, SECONDS, SPEC, drive) == [stop]
    assert seed_lead_stops(SEED, SECONDS, LeadStops(), drive) == []
    assert seed_lead_stops(SEED, 10.0, SPEC) == []


def test_the_fork_is_the_seed_drive_until_the_ego_is_held_to_the_stop_speed(drive, stop, fork):
    whole = simulate_disturbed(SEED, SECONDS, None, lead_stop=LeadStopRun(stop),
                               end_s=stop.frame / FRAME_HZ + 1.0)
    held = (stop.frame - int(round(APPROACH_S * FRAME_HZ))) * SUBSTEPS
    assert np.array_equal(whole.ego[:held], drive.ego[:held])
    first = stop.frame + SETTLE_FRAMES - (HISTORY_STEPS - 1)
    assert np.array_equal(fork.ego[:SUBSTEPS, 1:], whole.ego[first * SUBSTEPS:
                                                             (first + 1) * SUBSTEPS, 1:])
    assert len(fork.world.vehicles) == len(drive.world.vehicles) + 1


def test_the_ego_closes_in_at_speed_on_the_standing_car_with_futures_that_stop_short(stop,
                                                                                   fork):
    gaps = car_gaps(fork)
    speeds = np.array([info.v for info in fork.infos[:fork.frame_count]])
    window = HISTORY_STEPS - 1
    assert GAP_M[0] - 2.0 < gaps[window] < GAP_M[1]
    steady = [k for k in range(window, fork.frame_count)
              if abs(speeds[k] - speeds[window]) < 0.05 and speeds[k] > 3.0]
    assert len(steady) >= 10 and steady == list(range(window, window + len(steady)))
    labels = label_drive(fork.infos, fork.frame_count)
    for k in steady:
        travel = fork.future(k)[-1, 0]
        assert travel < gaps[k] - 0.5, (k, travel, gaps[k])
        assert fork.infos[k].reason in ("lead", "free")
    assert {labels[k].decision for k in steady[-5:]} == {"slow"}
    assert gaps[steady[-1]] < 0.6 * gaps[window]


def test_the_expert_stops_behind_the_car_which_pulls_away_after_the_ego_stood(stop, fork):
    gaps = car_gaps(fork)
    speeds = np.array([info.v for info in fork.infos[:fork.frame_count]])
    assert gaps.min() > 1.0
    standing = np.flatnonzero(speeds < STANDING_MPS)
    assert standing.size >= stop.stand_s * FRAME_HZ
    assert speeds[-1] > 1.0 and gaps[-1] > gaps[standing[0]] + 1.0
    stood = standing[0]
    assert fork.future(stood)[-1, 0] < gaps[stood] + 0.5


def test_the_expert_sees_the_placed_car_as_a_standing_lead(fork):
    gaps = car_gaps(fork)
    near = [k for k in range(HISTORY_STEPS - 1, fork.frame_count) if gaps[k] < 30.0]
    assert near and all(fork.infos[k].reason == "lead" and fork.infos[k].lead_speed < 0.2
                        for k in near[:10])


def test_training_drives_of_the_forks_are_rendered_and_labelled(stop):
    cfg = tiny(512)
    spec = dataclasses.replace(SPEC, max_s=4.0)
    (made,) = lead_stop_drives([SEED], SECONDS, cfg, spec, workers=1)
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    count = int(round(spec.max_s * FRAME_HZ)) - SETTLE_FRAMES + HISTORY_STEPS
    assert made.frames.shape == (count, len(cfg.prompt.camera_names), *size, 3)
    assert made.seed == SEED
    assert {DECISIONS[d] for d in made.decision[HISTORY_STEPS - 1:]} <= {"slow", "follow",
                                                                        "keep_lane"}
    assert lead_stop_drives([SEED], SECONDS, cfg, LeadStops(), workers=1) == []
    (relabelled,) = lead_stop_drives([SEED], SECONDS, cfg, spec, workers=1, standing_lead=True)
    assert np.array_equal(relabelled.frames, made.frames)
    changed = np.flatnonzero(relabelled.decision != made.decision)
    assert changed.size > 0
    assert {DECISIONS[d] for d in relabelled.decision[changed]} == {"stop"}
    assert all(" behind the " in relabelled.coc[k] for k in changed)


@pytest.fixture(scope="module")
def twin(drive, stop):
    spec = dataclasses.replace(SPEC, moving_twin=True, contrast=True)
    standing, moving = seed_lead_stops(SEED, SECONDS, spec, drive)
    assert standing == stop
    log, contrasts = lead_stop_log(SEED, SECONDS, moving, spec)
    return moving, log, contrasts


def test_moving_twin_settings_are_validated():
    for bad in ({"per_drive": 0, "moving_twin": True}, {"per_drive": 1, "twin_mps": (0.5, 3.0)},
                {"per_drive": 1, "twin_mps": (2.0, 6.5)}):
        with pytest.raises(ValueError, match="LeadStops"):
            LeadStops(**bad)
    _, recipe = parse_args(["--out", "x", "--lead-stops", "2", "--lead-stop-moving-twin", "on"])
    assert recipe.lead_stops == LeadStops(per_drive=2, moving_twin=True)
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--lead-stop-moving-twin", "on"])
    for bad in ({"per_drive": 0, "matched_twin": True},
                {"per_drive": 1, "matched_share": (0.8, 1.2)},
                {"per_drive": 1, "matched_share": (0.0, 0.9)}):
        with pytest.raises(ValueError, match="LeadStops"):
            LeadStops(**bad)
    _, matched = parse_args(["--out", "x", "--lead-stops", "2",
                             "--lead-stop-matched-twin", "on"])
    assert matched.lead_stops == LeadStops(per_drive=2, matched_twin=True)


def test_the_forked_seeds_are_the_training_drives_or_as_many_as_asked():
    for bad in ({"per_drive": 1, "seeds": -1}, {"per_drive": 0, "seeds": 4}):
        with pytest.raises(ValueError, match="LeadStops"):
            LeadStops(**bad)
    _, plain = parse_args(["--out", "x", "--train-drives", "3", "--train-seed-offset", "40",
                           "--lead-stops", "2"])
    assert lead_stop_seeds(plain) == train_seeds(3, 40)
    _, many = parse_args(["--out", "x", "--train-drives", "3", "--train-seed-offset", "40",
                          "--lead-stops", "2", "--lead-stop-seeds", "9"])
    assert many.lead_stops == LeadStops(per_drive=2, seeds=9)
    assert lead_stop_seeds(many) == train_seeds(9, 40)
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--lead-stop-seeds", "9"])


def test_the_moving_twin_is_the_stop_with_a_slow_car_drawn_apart(twin, stop):
    moving, _, _ = twin
    spec = dataclasses.replace(SPEC, moving_twin=True)
    assert dataclasses.replace(moving, lead_mps=0.0) == stop
    assert spec.twin_mps[0] <= moving.lead_mps <= spec.twin_mps[1]
    assert seed_lead_stops(SEED, SECONDS, spec) == [stop, moving]
    assert stop.caught_up_mps(stop.placed_mps(10.0)) == STANDING_MPS
    assert moving.placed_mps(10.0) == moving.lead_mps and moving.moving and not stop.moving


def test_the_ego_closes_in_on_the_slow_car_as_on_the_standing_one_then_follows_it(
        twin, fork, stop):
    moving, log, contrasts = twin
    assert contrasts == {}
    window = HISTORY_STEPS - 1
    gaps, standing_gaps = car_gaps(log), car_gaps(fork)
    settled = moving.lead_mps * SETTLE_FRAMES / FRAME_HZ
    assert abs(gaps[window] - standing_gaps[window] - settled) < 0.2
    assert np.array_equal(log.ego[:SUBSTEPS * window], fork.ego[:SUBSTEPS * window])
    speeds = np.array([info.v for info in log.infos[:log.frame_count]])
    assert speeds[window] > 3.0 and speeds.min() > moving.lead_mps - 0.5
    assert gaps[window:].min() > 1.0
    near = [k for k in range(window, log.frame_count) if gaps[k] < 30.0]
    assert near and all(abs(log.infos[k].lead_speed - moving.lead_mps) < 0.1
                        for k in near[:10])
    labels = label_drive(log.infos, log.frame_count, standing_lead=True)
    decisions = {labels[k].decision for k in range(window, log.frame_count)}
    assert "follow" in decisions and "stop" not in decisions
    slow = [labels[k].coc for k in range(window, log.frame_count)
            if labels[k].decision == "slow"]
    assert slow and all("slower" in coc for coc in slow)
    travel = [log.future(k)[-1, 0] for k in range(window, window + 10)]
    standing_travel = [fork.future(k)[-1, 0] for k in range(window, window + 10)]
    assert all(a > b + 5.0 for a, b in zip(travel, standing_travel))


def test_the_moving_twin_ends_after_its_car_speeds_up(twin):
    moving, log, _ = twin
    speeds = np.array([info.lead_speed or 0.0 for info in log.infos[:log.frame_count]])
    sped_up = np.flatnonzero(speeds > moving.lead_mps + 0.2)
    assert sped_up.size
    first = moving.frame + SETTLE_FRAMES - (HISTORY_STEPS - 1)
    ends = log.frame_count - 1 - sped_up[0]
    assert 0 < ends <= SPEC.after_s * FRAME_HZ + 1
    assert log.frame_count < int(round(SPEC.max_s * FRAME_HZ)) + moving.frame - first


def test_the_matched_twin_follows_a_car_at_nearly_its_speed_from_the_placing(drive, stop, twin):
    moving, slow_log, _ = twin
    spec = dataclasses.replace(SPEC, moving_twin=True, matched_twin=True)
    made = seed_lead_stops(SEED, SECONDS, spec, drive)
    assert made[:2] == [stop, moving]
    matched = made[2]
    assert dataclasses.replace(matched, lead_share=0.0, lag_s=stop.lag_s) == stop
    assert spec.matched_share[0] <= matched.lead_share <= spec.matched_share[1]
    log, contrasts = lead_stop_log(SEED, SECONDS, matched, dataclasses.replace(spec, max_s=6.0))
    assert contrasts == {}
    window = HISTORY_STEPS - 1
    placed_v = log.infos[window - SETTLE_FRAMES].v
    first = log.infos[window]
    assert first.lead_speed == pytest.approx(matched.lead_share * placed_v, abs=0.1)
    accels = np.array([info.accel for info in log.infos[window:window + 30]])
    assert accels.min() > -1.0
    travel = [log.future(k)[-1, 0] for k in range(window, window + 10)]
    slow_travel = [slow_log.future(k)[-1, 0] for k in range(window, window + 10)]
    assert all(a > b + 5.0 for a, b in zip(travel, slow_travel))
