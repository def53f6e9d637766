"""Disturbed drives: without pulses the drive and its futures are the plain drive's; a fork
of the world with its expert continues the drive exactly; with pulses the ego leaves its
course, and each frame's future is the expert's undisturbed way back; with the lights held,
each frame's future is the expert's plan with the lights as that frame shows them."""

import numpy as np
import pytest

from flashdrive_ros.sim.disturbance import (
    ApproachPulse,
    Disturbance,
    StopShortPulse,
    approach_pulses,
    drift_offsets,
    pulse_schedule,
    start_hold_steps,
)
from flashdrive_ros.sim.disturbed_drive import (
    HORIZON_STEPS,
    RestHold,
    expert_poses,
    held_road_user_poses,
    simulate_disturbed,
)
from flashdrive_ros.sim.drive import SUBSTEPS, simulate
from flashdrive_ros.sim.ego_world import EgoWorld
from flashdrive_ros.sim.entities import TrafficLight
from flashdrive_ros.sim.labels import label_drive
from flashdrive_ros.sim.vehicle import EGO_LENGTH, REAR_OVERHANG, EgoState, step_bicycle
from flashdrive_ros.sim.world import EGO_LANE_D, ScenarioSpan
from flashdrive_ros.train.generate import generate_drives, is_disturbed

SEED = 4242


def test_without_pulses_the_drive_and_its_futures_are_the_plain_drive():
    plain = simulate(SEED, 3.0)
    log = simulate_disturbed(SEED, 3.0, Disturbance(first_s=100.0, drift_first_s=100.0,
                                                    approach_kinds=(), start_hold_share=0.0),
                             hold_lights=False)
    assert np.array_equal(log.ego, plain.ego)
    assert np.array_equal(np.stack([log.future(k) for k in range(log.frame_count)]),
                          np.stack([plain.future(k) for k in range(plain.frame_count)]))


@pytest.mark.parametrize("seed", [3, SEED])
def test_with_the_lights_held_a_car_waiting_at_red_plans_to_stay_until_it_sees_green(seed):
    plain = simulate(seed, 30.0, blocks=("red_light",))
    log = simulate_disturbed(seed, 30.0, None, blocks=("red_light",))
    assert np.array_equal(log.ego, plain.ego)
    light = log.world.lights()[0]
    green_at = light.turned_green_at()
    assert green_at is not None
    moved = {name: np.array([np.hypot(*drive.future(k)[-1, :2])
                             for k in range(log.frame_count)])
             for name, drive in (("held", log), ("plain", plain))}
    waiting = [k for k in range(log.frame_count)
               if log.ego[k * SUBSTEPS, 4] < 0.05 and light.state(k / 10) == "red"
               and green_at - 6.4 < k / 10 < green_at - 0.5]
    assert len(waiting) >= 10, "the expert never waited at the red light"
    for k in waiting:
        assert moved["plain"][k] > 3.0, f"frame {k}: the drive did not go on after green"
        assert moved["held"][k] < 0.3, f"frame {k}: the plan leaves the line while it is red"
    untouched = [k for k in range(log.frame_count)
                 if not any(k / 10 < t <= k / 10 + 6.4
                            for t in (light.t_trigger, light.t_trigger + light.yellow_time,
                                      green_at))]
    assert len(untouched) >= 50
    for k in untouched:
        assert np.array_equal(log.future(k), plain.future(k)), k
    seen_green = [k for k in range(log.frame_count)
                  if light.state(k / 10) == "green" and green_at <= k / 10]
    assert all(moved["held"][k] > 3.0 for k in seen_green if k / 10 < green_at + 3.0)


def test_a_fork_holds_the_light_states_it_is_given_and_the_world_keeps_its_own():
    sim = EgoWorld(SEED, 12.0, ("red_light",))
    states = sim.light_states()
    fork = sim.fork(tuple("red" for _ in states))
    assert fork.light_states() == tuple("red" for _ in states)
    assert sim.light_states() == states
    assert all(light.turned_green_at() is None for light in fork.world.lights())
    with pytest.raises(ValueError, match="held states"):
        sim.fork(("red",) * (len(states) + 1))
    with pytest.raises(ValueError, match="held light state"):
        TrafficLight(10.0, 30.0, "stop", held="blue")


def test_with_a_pedestrian_in_the_way_the_future_waits_until_the_frame_shows_the_way_clear():
    plain = simulate(5, 15.0, blocks=("pedestrian",))
    log = simulate_disturbed(5, 15.0, None, blocks=("pedestrian",))
    assert np.array_equal(log.ego, plain.ego)
    moved = {name: np.array([np.hypot(*drive.future(k)[-1, :2])
                             for k in range(log.frame_count)])
             for name, drive in (("held", log), ("plain", plain))}
    blocked = [k for k in range(log.frame_count) if log.infos[k].ped_gap is not None]
    waiting = [k for k in blocked if log.infos[k].v < 0.05]
    assert len(waiting) >= 3, "the expert never waited for the pedestrian"
    for k in waiting:
        assert moved["plain"][k] > 3.0, f"frame {k}: the drive did not go on"
        assert moved["held"][k] < 0.3, f"frame {k}: the plan leaves with the pedestrian in the way"
    released = [k for k in range(1, log.frame_count)
                if log.infos[k].ped_gap is None and k - 1 in blocked]
    assert released
    for k in range(log.frame_count):
        if k not in blocked:
            assert np.array_equal(log.future(k), plain.future(k)), k
    assert all(moved["held"][k] > 3.0 for k in released)


def test_behind_a_car_that_stands_the_future_stays_behind_it_until_the_frame_shows_it_go():
    plain = simulate(3, 20.0, blocks=("lead",))
    log = simulate_disturbed(3, 20.0, None, blocks=("lead",))
    assert np.array_equal(log.ego, plain.ego)

    def travel(drive, k):
        steps = np.diff(np.vstack([[0.0, 0.0], drive.future(k)[:, :2]]), axis=0)
        return float(np.hypot(steps[:, 0], steps[:, 1]).sum())

    infos = log.infos[:log.frame_count]
    standing = [k for k, info in enumerate(infos) if info.vehicle_gap is not None
                and info.vehicle_speed < 0.3 and info.vehicle_gap < 25.0]
    assert len(standing) >= 10, "the lead never stood ahead of the ego"
    for k in standing:
        gap = infos[k].vehicle_gap
        assert travel(plain, k) > gap + 0.5, f"frame {k}: the lead did not drive off"
        assert travel(log, k) < gap, f"frame {k}: the plan drives through the standing car"
    unheld = [k for k, info in enumerate(infos)
              if info.ped_gap is None and not info.vehicle_brake_lights]
    assert len(unheld) >= 50
    for k in unheld:
        assert np.array_equal(log.future(k), plain.future(k)), k
    gone = [k for k in range(standing[-1] + 1, log.frame_count) if k in unheld]
    assert gone and travel(log, gone[0]) > 5.0


def test_a_fork_holds_its_pedestrians_where_they_stand_and_the_world_walks_on():
    sim = EgoWorld(5, 15.0, ("pedestrian",))
    while sim.expert_control()[2].ped_gap is None:
        sim.step(*sim.expert_control()[:2])
    fork = sim.fork(hold_road_users=True)
    before = [ped.position() for ped in fork.world.pedestrians]
    while sim.ego.v > 0.05:
        for world in (sim, fork):
            world.step(*world.expert_control()[:2])
    assert np.array_equal([ped.position() for ped in fork.world.pedestrians], before)
    assert not np.array_equal([ped.position() for ped in sim.world.pedestrians], before)
    rest = held_road_user_poses(fork.fork())
    assert np.abs(rest - expert_poses(fork)).max() < 0.005
    assert np.hypot(*(rest[-1, :2] - rest[0, :2])) < 0.3


def test_a_fork_continues_the_drive_through_a_red_light_exactly():
    sim = EgoWorld(SEED, 12.0, ("red_light",))
    rows, forks = [], {}
    for i in range(12 * 50):
        if i in (100, 350):
            forks[i] = sim.fork()
        accel, steer, _ = sim.expert_control()
        sim.step(accel, steer)
        rows.append((sim.ego.x, sim.ego.y, sim.ego.yaw, sim.ego.v))
    assert min(r[3] for r in rows) < 0.5
    for start, fork in forks.items():
        for i in range(start, len(rows)):
            accel, steer, _ = fork.expert_control()
            fork.step(accel, steer)
            assert (fork.ego.x, fork.ego.y, fork.ego.yaw, fork.ego.v) == rows[i]


def test_the_expert_of_a_fork_finds_the_ego_where_it_drove_without_the_expert():
    """A closed loop drives the ego by the plans, not by the expert: a fork taken 6 s on
    must give its expert the ego's route position now, not where the expert last saw it."""
    sim = EgoWorld(SEED, 12.0, ("cruise",))
    sim.expert_control()
    start_s = sim.route_position()[0]
    for _ in range(6 * 50):
        sim.step(0.5, 0.0)
    now_s = sim.route_position()[0]
    assert now_s - start_s > 40.0
    _, _, info = sim.fork().expert_control()
    assert info.route_s == pytest.approx(now_s, abs=0.05)


def test_pulses_push_the_ego_off_its_course_and_the_futures_lead_back():
    log = simulate_disturbed(SEED, 20.0, Disturbance(start_hold_share=0.0, drift_first_s=100.0))
    plain = simulate(SEED, 20.0)
    offset = np.array([info.route_d for info in log.infos[:log.frame_count]]) - EGO_LANE_D
    assert np.abs(log.ego[:, 1:3] - plain.ego[:, 1:3]).max() > 1.0
    assert np.abs(offset).max() > 0.4
    futures = np.stack([log.future(k) for k in range(log.frame_count)])
    logged = np.stack([_logged_future(log, k) for k in range(log.frame_count)])
    changed = np.abs(futures - logged).max(axis=(1, 2)) > 1e-9
    assert 0.2 < changed.mean() < 1.0
    off = np.flatnonzero(np.abs(offset) > 0.4)
    route = log.world.route
    for k in off:
        pose = log.ego[k * SUBSTEPS, 1:4]
        c, s = np.cos(pose[2]), np.sin(pose[2])
        end = futures[k, -1]
        _, d_end = route.project((pose[0] + c * end[0] - s * end[1],
                                  pose[1] + s * end[0] + c * end[1]))
        assert abs(d_end - EGO_LANE_D) < abs(offset[k]), f"frame {k} does not lead back"


DRIFTS_ONLY = dict(first_s=100.0, approach_kinds=(), start_hold_share=0.0, drift_first_s=1.0,
                   drift_gap_s=(8.0, 10.0))


def test_drifts_ramp_to_an_offset_on_either_side_and_hold_it_apart():
    d = Disturbance(**DRIFTS_ONLY)
    profile = drift_offsets(d, 50 * 600, np.random.default_rng(7))
    runs = np.flatnonzero(np.diff(np.concatenate([[0.0], (profile != 0).astype(float), [0.0]])))
    starts, stops = runs[::2], runs[1::2]
    assert len(starts) >= 20
    sizes = np.array([profile[b - 1] for b in stops])
    assert (sizes > 0).any() and (sizes < 0).any()
    assert np.all((np.abs(sizes) >= 0.4) & (np.abs(sizes) <= 1.6))
    assert starts[0] >= d.drift_first_s * 50
    assert np.all(np.diff(starts) >= d.drift_gap_s[0] * 50 - 1)
    for a, b in zip(starts, stops):
        ramp = np.abs(profile[a:b])
        assert np.all(np.diff(ramp) >= -1e-12)
        assert 1.5 * 50 - 1 <= np.argmax(ramp >= ramp[-1] - 1e-12) + 1 <= 3.0 * 50 + 1
    with pytest.raises(ValueError, match="drifts must not overlap"):
        Disturbance(drift_gap_s=(5.0, 9.0))


def test_a_drift_holds_the_ego_parallel_beside_its_lane_and_the_futures_lead_back():
    log = simulate_disturbed(SEED, 24.0, Disturbance(**DRIFTS_ONLY))
    route = log.world.route
    held = []
    for k in range(log.frame_count):
        x, y, yaw, v = log.ego[k * SUBSTEPS, 1:5]
        s, d = route.project((x, y))
        heading = (yaw - route.pose_at(s)[2] + np.pi) % (2 * np.pi) - np.pi
        if abs(d - EGO_LANE_D) > 0.4 and abs(heading) < 0.03 and v > 2.0:
            end = log.future(k)[-1]
            c, sn = np.cos(yaw), np.sin(yaw)
            _, d_end = route.project((x + c * end[0] - sn * end[1],
                                      y + sn * end[0] + c * end[1]))
            held.append((abs(d - EGO_LANE_D), abs(d_end - EGO_LANE_D)))
    assert len(held) >= 10, "no frame holds the ego parallel beside its lane centre"
    assert all(back < 0.25 for _, back in held), held


def _logged_future(log, k):
    from flashdrive_ros.sim.drive import to_frame

    i0 = k * SUBSTEPS
    return to_frame(log.ego[i0, 1:4], log.ego[i0 + SUBSTEPS * np.arange(1, 65), 1:4])


def test_an_approach_pulse_makes_the_ego_reach_the_red_light_faster_and_the_futures_stop():
    late = Disturbance(first_s=100.0, drift_first_s=100.0, stop_short_share=0.0,
                       approach_before_m=(20.0, 30.0), approach_accel_mps2=(2.0, 2.0),
                       approach_duration_s=(2.0, 2.5))
    log = simulate_disturbed(SEED, 16.0, late, blocks=("red_light",))
    plain = simulate(SEED, 16.0, blocks=("red_light",))
    light = log.world.lights()[0]
    front = log.world.route.project
    gaps, plain_gaps = [], []
    for rows, out in ((log.ego, gaps), (plain.ego, plain_gaps)):
        for k in range(16 * 10):
            x, y = rows[k * SUBSTEPS, 1:3]
            out.append(light.stop_s - front((x, y))[0])
    speeds = log.ego[::SUBSTEPS, 4][:len(gaps)]
    plain_speeds = plain.ego[::SUBSTEPS, 4][:len(plain_gaps)]
    near = [k for k, g in enumerate(gaps) if 5.0 < g < 15.0]
    plain_near = [k for k, g in enumerate(plain_gaps) if 5.0 < g < 15.0]
    assert near and plain_near
    assert speeds[near].max() > plain_speeds[plain_near].max() + 0.5
    for k in near:
        future = log.future(k)
        crossing = np.flatnonzero(future[:, 0] >= gaps[k] - EGO_LENGTH + REAR_OVERHANG)
        if crossing.size:
            assert light.state(k / 10 + 0.1 * (crossing[0] + 1)) != "red", \
                f"the expert future of frame {k} runs the red light"


def _lead_gaps(log) -> np.ndarray:
    """[frames] route arc length from base_link to the lead car while it is in the ego lane."""
    gaps = []
    for scene in log.scenes[:log.frame_count]:
        ahead = [log.world.route.project((b.x, b.y)) for b in scene.boxes if b.kind == "lead"]
        gaps.append(min((s - scene.route_s for s, d, *_ in ahead if abs(d - EGO_LANE_D) < 1.0),
                        default=np.nan))
    return np.array(gaps)


@pytest.mark.parametrize("seed", [3, SEED])
def test_a_lead_approach_pulse_closes_in_on_the_lead_and_the_futures_back_off(seed):
    pushy = Disturbance(first_s=100.0, drift_first_s=100.0, stop_short_share=1.0,
                        approach_kinds=("follow_lead",), approach_accel_mps2=(2.0, 2.0),
                        approach_duration_s=(2.0, 2.5), start_hold_share=0.0)
    log = simulate_disturbed(seed, 24.0, pushy, blocks=("lead",))
    plain = simulate(seed, 24.0, blocks=("lead",))
    gaps, plain_gaps = _lead_gaps(log), _lead_gaps(plain)
    assert np.nanmin(gaps) < np.nanmin(plain_gaps) - 0.5, "the ego never closed in on the lead"
    speeds = log.ego[::SUBSTEPS, 4][:log.frame_count]
    closing = np.flatnonzero(gaps < plain_gaps - 0.5)
    assert closing.size >= 5
    for k in closing[speeds[closing] > 2.0]:
        assert np.hypot(*log.future(k)[19, :2]) / 2.0 < speeds[k], \
            f"frame {k}: the expert future does not back off from the lead"


@pytest.mark.parametrize("seed", [3, 11])
def test_a_late_reaction_to_a_braking_lead_closes_in_fast_and_the_futures_brake_hard(seed):
    late = Disturbance(first_s=100.0, drift_first_s=100.0, approach_kinds=(),
                       start_hold_share=0.0, lead_lag_share=1.0, lead_lag_s=(6.0, 6.0))
    log = simulate_disturbed(seed, 14.0, late, blocks=("lead",))
    plain = simulate(seed, 14.0, blocks=("lead",))
    gaps, plain_gaps = _lead_gaps(log), _lead_gaps(plain)
    speeds = log.ego[::SUBSTEPS, 4][:log.frame_count]
    plain_speeds = plain.ego[::SUBSTEPS, 4][:plain.frame_count]
    assert np.nanmin(gaps) < np.nanmin(plain_gaps) - 0.5, "the ego never closed in on the lead"
    assert np.nanmin(gaps) > EGO_LENGTH, "the ego ran into the lead"
    near = np.flatnonzero(gaps < 22.0)
    plain_near = np.flatnonzero(plain_gaps < 22.0)
    assert speeds[near].max() > plain_speeds[plain_near].max() + 1.5
    future_speed = np.array([np.hypot(*(log.future(k)[29, :2] - log.future(k)[28, :2]))
                             for k in range(log.frame_count)]) / 0.1
    assert np.any(speeds[near] - future_speed[near] > 6.0), "no hard brake in the futures"
    assert (log.ego[:, 6].min() < -5.0) and plain.ego[:, 6].min() > -4.0


def test_without_late_reactions_the_lead_drive_is_the_plain_one():
    calm = Disturbance(first_s=100.0, drift_first_s=100.0, approach_kinds=(),
                       start_hold_share=0.0, lead_lag_share=0.0)
    log = simulate_disturbed(3, 8.0, calm, blocks=("lead",), hold_lights=False)
    assert np.array_equal(log.ego, simulate(3, 8.0, blocks=("lead",)).ego)


def test_lead_spans_get_late_braking_and_never_an_early_stop():
    spans = [ScenarioSpan("follow_lead", 0.0, 115.0), ScenarioSpan("red_light_stop", 150.0, 220.0)]
    d = Disturbance(stop_short_share=1.0)
    for seed in range(20):
        lead, light = approach_pulses(d, spans, np.random.default_rng(seed))
        assert isinstance(lead, ApproachPulse) and isinstance(light, StopShortPulse)
        low, high = d.lead_approach_before_m
        assert 115.0 - high <= lead.start_s <= 115.0 - low


def test_an_early_stop_holds_the_ego_short_of_the_red_light_and_the_futures_go_on():
    seed = SEED
    log = simulate_disturbed(seed, 24.0, Disturbance(first_s=100.0, drift_first_s=100.0,
                                                      stop_short_share=1.0),
                             blocks=("red_light",))
    plain = simulate(seed, 24.0, blocks=("red_light",))
    light = log.world.lights()[0]
    labels = label_drive(log.infos, log.frame_count)
    route = log.world.route

    def line_gaps(rows):
        return np.array([light.stop_s - route.project(tuple(rows[k * SUBSTEPS, 1:3]))[0]
                         for k in range(24 * 10)])

    gaps, plain_gaps = line_gaps(log.ego), line_gaps(plain.ego)
    speeds = log.ego[::SUBSTEPS, 4][:len(gaps)]
    plain_rest = plain_gaps[plain.ego[::SUBSTEPS, 4][:len(plain_gaps)] < 0.05]
    held = np.flatnonzero((speeds < 0.05) & (gaps > plain_rest.min() + 3.0))
    assert held.size >= 3, "the ego never stood short of the expert's stop"
    for k in held:
        future = log.future(k)
        assert future[-1, 0] > 1.0, f"frame {k}: the expert future stays where it stands"
        crossing = np.flatnonzero(future[:, 0] >= gaps[k] - EGO_LENGTH + REAR_OVERHANG)
        if crossing.size:
            assert light.state(k / 10 + 0.1 * (crossing[0] + 1)) != "red", \
                f"the expert future of frame {k} runs the red light"
        red = light.state(k / 10) == "red"
        assert labels[k].decision == ("stop" if red else "keep_lane"), (k, labels[k])
    assert gaps.min() < -5.0, "the ego never went on through the intersection"


def test_pulse_schedule_keeps_pulses_apart_and_inside_the_drive():
    d = Disturbance()
    pulses = pulse_schedule(d, 40 * 50 + HORIZON_STEPS, np.random.default_rng(0))
    assert len(pulses) >= 3
    assert pulses[0].start >= d.first_s * 50
    for a, b in zip(pulses, pulses[1:]):
        assert a.stop < b.start and (b.start - a.start) >= d.gap_s[0] * 50 - 1
    assert all(abs(p.steer) <= d.steer_rad and abs(p.accel) <= d.accel_mps2 for p in pulses)


@pytest.mark.parametrize("kwargs", [{"gap_s": (0.0, 1.0)}, {"duration_s": (2.0, 1.0)},
                                    {"duration_s": (1.0, 6.0)}, {"steer_rad": -0.1},
                                    {"approach_kinds": ("red_light",)},
                                    {"stop_short_kinds": ("lead",)},
                                    {"lead_approach_before_m": (75.0, 45.0)},
                                    {"approach_accel_mps2": (2.0, 1.0)},
                                    {"stop_short_share": 1.5},
                                    {"stop_short_hold_s": (0.0, 1.0)},
                                    {"stop_short_decel_mps2": 0.0},
                                    {"start_hold_share": -0.1},
                                    {"start_hold_s": (2.0, 1.0)},
                                    {"lead_lag_share": 1.5},
                                    {"lead_lag_s": (3.0, 2.0)},
                                    {"lead_lag_decel_mps2": 0.0},
                                    {"lead_lag_margin_m": -1.0}])
def test_bad_disturbances_are_refused(kwargs):
    with pytest.raises(ValueError):
        Disturbance(**kwargs)


def test_the_disturbed_share_of_training_drives_is_drawn_per_seed():
    seeds = range(200)
    share = np.mean([is_disturbed(s, 0.35) for s in seeds])
    assert 0.25 < share < 0.45
    assert [is_disturbed(s, 0.35) for s in seeds] == [is_disturbed(s, 0.35) for s in seeds]
    assert not any(is_disturbed(s, 0.0) for s in seeds)
    with pytest.raises(ValueError, match="needs a disturbance"):
        generate_drives([1], 1.0, None, disturbed_share=0.5)


@pytest.mark.parametrize("seed", [3, SEED])
def test_a_held_start_stands_at_the_green_light_and_the_futures_go_at_once(seed):
    hold = Disturbance(first_s=100.0, drift_first_s=100.0, approach_kinds=(),
                       start_hold_share=1.0, start_hold_s=(3.0, 3.0))
    log = simulate_disturbed(seed, 30.0, hold, blocks=("red_light",))
    plain = simulate(seed, 30.0, blocks=("red_light",))
    light = log.world.lights()[0]
    labels = label_drive(log.infos, log.frame_count)

    def standing_at_green(drive):
        return [k for k in range(15, drive.frame_count)
                if np.hypot(*drive.history(k)[0, :2]) < 0.05 and light.state(k / 10) == "green"]

    held = standing_at_green(log)
    assert len(standing_at_green(plain)) <= 5
    assert len(held) >= 25, "the start was not held back"
    for k in held:
        future = log.future(k)
        assert future[9, 0] > 0.5, f"frame {k}: the expert future does not start at once"
        assert labels[k].decision == "keep_lane", (k, labels[k])
        assert labels[k].coc.startswith("Keep going"), (k, labels[k])


def test_start_holds_are_drawn_by_their_share():
    rng = np.random.default_rng(0)
    steps = [start_hold_steps(Disturbance(start_hold_share=0.5), rng) for _ in range(400)]
    held = [s for s in steps if s]
    assert 0.4 < len(held) / len(steps) < 0.6
    assert min(held) >= 0.5 * 50 and max(held) <= 4.0 * 50
    assert not any(start_hold_steps(Disturbance(start_hold_share=0.0), rng) for _ in range(50))


@pytest.mark.parametrize("v0, start_s", [(12.0, 0.0), (8.0, 20.0), (3.0, 35.0)])
def test_a_rest_hold_stops_the_ego_at_its_point_and_keeps_it_there_until_its_time(v0, start_s):
    hold = RestHold(rest_s=40.0, until=20.0)
    ego, s, dt, first = EgoState(0.0, 0.0, 0.0, v0), start_s, 0.02, None
    for i in range(1500):
        accel = hold.accel(i * dt, s, ego.v)
        if accel is None:
            assert first is None or i * dt >= 20.0
            accel = 1.0
        elif first is None:
            first = s
            assert ego.v * ego.v / (2.0 * (40.0 - s)) >= 3.0 - 0.2
        moved = step_bicycle(ego, accel, 0.0, dt)
        s += moved.x - ego.x
        ego = moved
        if i * dt < 20.0 and ego.v == 0.0:
            assert abs(s - 40.0) < 0.3
    assert first is not None and s > 45.0



def test_futures_from_a_frame_are_those_of_the_whole_drive_and_none_before():
    whole = simulate_disturbed(SEED, 20.0, None, blocks=("red_light",),
                               brake_holds=((9.0, 3.0),))
    late = simulate_disturbed(SEED, 20.0, None, blocks=("red_light",),
                              brake_holds=((9.0, 3.0),), futures_from=80)
    assert np.array_equal(late.ego, whole.ego)
    assert np.isnan(late.planned[:80]).all()
    assert np.array_equal(late.planned[80:], whole.planned[80:])
    with pytest.raises(ValueError, match="futures_from"):
        simulate_disturbed(SEED, 2.0, None, futures_from=21)
