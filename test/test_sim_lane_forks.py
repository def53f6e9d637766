"""Lane forks: the ego drifted towards the inside of a tight bend or towards a parked car being
passed. The drift's shape; the episodes found on a route and the side of their inside; forks
drawn deterministically, towards the inside, within the room beside the path; a fork that is
the seed's drive until the drift starts, then holds the ego off the expert's line towards the
parked car without touching it, every future heading back to the line; the training drives of
the forks rendered and labelled."""

import dataclasses

import numpy as np
import pytest

from flashdrive_ros.sim.rectangles import overlap, rectangle
from flashdrive_ros.model.config import tiny
from flashdrive_ros.sim.disturbance import AimedDrift
from flashdrive_ros.sim.disturbed_drive import simulate_disturbed
from flashdrive_ros.sim.drive import FRAME_HZ, HISTORY_STEPS, SUBSTEPS
from flashdrive_ros.sim.expert import Expert
from flashdrive_ros.sim.lane_forks import (
    BEND,
    MIN_OFFSET_M,
    NUDGE,
    LaneForks,
    episodes,
    lane_fork_log,
    lateral_room,
    seed_lane_forks,
)
from flashdrive_ros.sim.vehicle import EGO_LENGTH, EGO_WIDTH, EgoState
from flashdrive_ros.train.generate import lane_fork_drives

SEED = 836
SPEC = LaneForks(per_drive=2, drive_s=20.0, ramp_s=(1.0, 1.0), hold_s=(1.5, 1.5),
                 lead_s=(0.0, 0.0), after_s=1.0)


@pytest.fixture(scope="module")
def drive():
    return simulate_disturbed(SEED, SPEC.drive_s, None)


@pytest.fixture(scope="module")
def fork(drive):
    (fork,) = seed_lane_forks(SEED, SPEC, drive)
    return fork


@pytest.fixture(scope="module")
def fork_log(fork):
    return lane_fork_log(SEED, fork, SPEC)


def test_lane_fork_settings_and_the_drift_shape_are_validated():
    for bad in ({"per_drive": -1}, {"bend_offset_m": (0.0, 1.0)}, {"hold_s": (2.0, 1.0)},
                {"lead_s": (-1.0, 1.0)}, {"outside_share": 1.5}, {"drive_s": 0.0},
                {"after_s": float("inf")}):
        with pytest.raises(ValueError, match="LaneForks"):
            LaneForks(**bad)
    assert not LaneForks().enabled and SPEC.enabled
    drift = AimedDrift(3, 4, 2, -0.8)
    assert np.allclose(drift.offsets(12), [0, 0, 0, -0.2, -0.4, -0.6, -0.8, -0.8, -0.8, 0, 0,
                                           0])
    assert drift.stop == 9 and np.allclose(drift.offsets(5), [0, 0, 0, -0.2, -0.4])
    with pytest.raises(ValueError, match="AimedDrift"):
        AimedDrift(0, 0, 2, 0.5)


def test_episodes_are_the_routes_tight_bends_and_nudges_with_their_inside(drive):
    world = drive.world
    expert = Expert(world)
    found = episodes(world, expert, SPEC)
    assert {e.kind for e in found} == {BEND, NUDGE}
    assert [e.s_start for e in found] == sorted(e.s_start for e in found)
    for e in found:
        s = np.arange(e.s_start, e.s_end + 0.5, 1.0)
        if e.kind == NUDGE:
            assert e.inside == -1 and expert.nudge_at(s).max() >= SPEC.nudge_m
        else:
            kappa = world.route.curvature_at(s)
            assert np.abs(kappa).max() >= SPEC.bend_curvature
            assert e.inside == np.sign(kappa[np.argmax(np.abs(kappa))])
    tighter = episodes(world, expert, dataclasses.replace(SPEC, bend_curvature=1.0))
    assert [e for e in tighter if e.kind == BEND] == []


def test_forks_are_drawn_towards_the_inside_within_the_room_and_deterministic(drive, fork):
    assert fork.episode.kind == NUDGE
    size = -fork.drift.offset_m
    assert MIN_OFFSET_M <= size <= SPEC.nudge_offset_m[1]
    route_s = [info.route_s for info in drive.infos]
    room = lateral_room(drive.world, drive, route_s[fork.frame],
                        route_s[fork.last_frame] + 15.0, -1)
    assert size <= room + 1e-9
    entry = next(k for k, s in enumerate(route_s) if s >= fork.episode.s_start)
    assert fork.frame == entry - int(round(1.0 * FRAME_HZ))
    assert fork.frame >= HISTORY_STEPS - 1
    assert seed_lane_forks(SEED, SPEC, drive) == [fork]
    assert seed_lane_forks(SEED, LaneForks(), drive) == []


def test_the_fork_is_the_drive_until_the_drift_then_holds_the_ego_towards_the_parked_car(
        drive, fork, fork_log):
    start = fork.drift.start
    first = fork.frame - (HISTORY_STEPS - 1)
    assert np.array_equal(fork_log.ego[:start - first * SUBSTEPS, 1:],
                          drive.ego[first * SUBSTEPS:start, 1:])
    route = drive.world.route
    plain = {round(info.route_s): info.route_d for info in drive.infos}
    held = range(fork.frame + fork.drift.ramp_steps // SUBSTEPS + 3, fork.last_frame + 1)
    shifts = []
    for k in held:
        info = fork_log.infos[k - first]
        near = [plain[s] for s in range(round(info.route_s) - 1, round(info.route_s) + 2)
                if s in plain]
        shifts.append(info.route_d - np.mean(near))
    assert 0.5 < np.median(shifts) / fork.drift.offset_m < 1.15
    assert max(fork_log.infos[k - first].nudge_now for k in held) > 0.3
    for k in held:
        k_log = k - first
        info = fork_log.infos[k_log]
        x, y, yaw = fork_log.ego[k_log * SUBSTEPS, 1:4]
        fx, fy = fork_log.future(k_log)[29, :2]
        c, s = np.cos(yaw), np.sin(yaw)
        s3, d3 = route.project((x + c * fx - s * fy, y + s * fx + c * fy), hint=info.route_s)
        line = np.mean([plain[s] for s in range(round(s3) - 1, round(s3) + 2) if s in plain])
        assert abs(d3 - line) < 0.5 * abs(info.route_d - plain.get(round(info.route_s),
                                                                     line)) + 0.1


def test_the_drifted_ego_keeps_clear_of_parked_cars_and_roadside_objects(fork_log):
    world = fork_log.world
    others = [rectangle(v.x, v.y, v.yaw, v.length, v.width) for v in world.vehicles
              if v.kind == "parked"]
    others += [rectangle(b.x, b.y, b.yaw, b.length, b.width) for b in world.statics]
    for row in fork_log.ego:
        cx, cy = EgoState(row[1], row[2], row[3], row[4]).center
        box = rectangle(cx, cy, row[3], EGO_LENGTH, EGO_WIDTH)
        assert not any(overlap(box, other) for other in others)


def test_training_drives_of_the_forks_are_rendered_and_labelled(fork, fork_log):
    cfg = tiny(512)
    (made,) = lane_fork_drives([SEED], cfg, SPEC, workers=1)
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    assert made.frames.shape == (fork_log.frame_count, len(cfg.prompt.camera_names), *size, 3)
    assert made.seed == SEED
    assert lane_fork_drives([SEED], cfg, LaneForks(), workers=1) == []
