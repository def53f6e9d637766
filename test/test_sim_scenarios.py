"""Scenario-level checks of the synthetic world: the expert obeys lights, yields to
pedestrians, nudges around parked cars, follows leads; labels match what happens."""

import numpy as np
import pytest

from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.labels import DECISIONS, RED_WAIT_GAP, SCENARIO_TAGS, label_drive
from flashdrive_ros.sim.scenarios import EGO_STOP_MARGIN, build_world
from flashdrive_ros.sim.vehicle import EGO_LENGTH, EGO_WIDTH, REAR_OVERHANG
from flashdrive_ros.sim.world import EGO_LANE_D


def _footprint_gap(ego, box) -> float:
    """Distance between the ego's rectangle and a small box centre (conservative)."""
    c, s = np.cos(ego.yaw), np.sin(ego.yaw)
    dx, dy = box.x - ego.x, box.y - ego.y
    lon, lat = c * dx + s * dy, -s * dx + c * dy
    ox = max(-REAR_OVERHANG - lon, lon - (EGO_LENGTH - REAR_OVERHANG), 0.0)
    oy = max(abs(lat) - EGO_WIDTH / 2, 0.0)
    return float(np.hypot(ox, oy)) - max(box.length, box.width) / 2


@pytest.fixture(scope="module")
def red_drive():
    log = simulate(11, 17.0, blocks=("red_light",))
    return log, label_drive(log.infos)


def test_the_expert_waits_at_its_lights_own_distance_from_the_line():
    waits, margins = [], []
    for seed in (21, 4242, 1000100):
        log = simulate(seed, 30.0, blocks=("red_light",))
        margin = log.world.lights()[0].ego_stop_margin
        gaps = [i.light_gap for i in log.infos if i.v < 0.05 and i.light_state == "red"]
        assert gaps, f"seed {seed}: no wait at the red light"
        assert margin <= min(gaps) and max(gaps) <= margin + 0.6, (seed, margin, gaps[:3])
        waits.append(float(np.median(gaps)))
        margins.append(margin)
    assert all(EGO_STOP_MARGIN[0] <= m <= EGO_STOP_MARGIN[1] for m in margins)
    assert EGO_STOP_MARGIN[1] + 0.5 <= RED_WAIT_GAP, "the farthest wait is still a red wait"
    assert max(waits) - min(waits) > 0.5, waits
    assert build_world(21, 30.0, ("red_light",)).lights()[0].ego_stop_margin == margins[0]


def test_expert_stops_at_red_light_and_goes_on_green(red_drive):
    log, labels = red_drive
    light = log.world.lights()[0]
    red = [i for i in log.infos if i.light_state == "red"]
    assert red, "the light never turned red"
    assert min(i.light_gap for i in red) >= -0.05, "ego crossed the stop line on red"
    assert min(i.v for i in red) < 0.05, "ego did not come to a stop at the red light"
    assert log.infos[-1].front_s > light.stop_s + 15.0, "ego did not go on green"
    assert log.infos[-1].v > 3.0
    decisions = {lab.decision for lab, i in zip(labels, log.infos)
                 if i.reason in ("red_light", "yellow_light")}
    assert decisions == {"stop"}
    go = [lab for lab in labels if "green_light_go" in lab.tags]
    assert go and all(lab.t >= light.turned_green_at() for lab in go)
    assert all("red light" in lab.coc or "signal" in lab.coc or "light" in lab.coc
               for lab in labels if "red_light_stop" in lab.tags)


def test_expert_yields_to_crossing_pedestrian():
    log = simulate(5, 15.0, blocks=("pedestrian",))
    labels = label_drive(log.infos)
    ped = log.world.pedestrians[0]
    assert ped.walked == pytest.approx(ped.route_length), "pedestrian did not finish crossing"
    gaps = [min(_footprint_gap(sc.ego, b) for b in sc.boxes if b.kind == "pedestrian")
            for sc in log.scenes]
    assert min(gaps) > 1.0, f"ego came within {min(gaps):.2f} m of the pedestrian"
    stopped = [i for i in log.infos if i.reason == "pedestrian" and i.v < 0.1]
    assert stopped, "ego never stopped for the pedestrian"
    assert log.infos[-1].v > 2.0, "ego did not move on after the pedestrian crossed"
    yield_labels = [lab for lab in labels if "pedestrian_yield" in lab.tags]
    assert yield_labels and all(lab.decision == "stop" for lab in yield_labels)
    assert any("pedestrian" in lab.coc or "person" in lab.coc for lab in yield_labels)


def test_expert_nudges_around_parked_car():
    log = simulate(2, 12.0, blocks=("parked",))
    labels = label_drive(log.infos)
    parked = [v for v in log.world.vehicles if v.kind == "parked"]
    blocker = min(parked, key=lambda v: abs(log.world.route.project((v.x, v.y))[1]))
    s_block, _ = log.world.route.project((blocker.x, blocker.y))
    beside = [i for i in log.infos if abs(i.route_s + 1.4 - s_block) < 1.0]
    assert beside and all(i.route_d > EGO_LANE_D + 0.4 for i in beside)
    assert max(i.route_d for i in log.infos) < 0.0, "ego crossed the centre line"
    assert any(lab.decision == "nudge" and "nudge_parked" in lab.tags for lab in labels)
    gaps = [_box_gap(sc.ego, blocker) for sc in log.scenes]
    assert min(gaps) > 0.3


def _box_gap(ego, veh) -> float:
    """Lateral clearance between the ego and a parked car when they overlap lengthwise."""
    c, s = np.cos(veh.yaw), np.sin(veh.yaw)
    cx = ego.x + (EGO_LENGTH / 2 - REAR_OVERHANG) * np.cos(ego.yaw)
    cy = ego.y + (EGO_LENGTH / 2 - REAR_OVERHANG) * np.sin(ego.yaw)
    dx, dy = cx - veh.x, cy - veh.y
    lon, lat = c * dx + s * dy, -s * dx + c * dy
    if abs(lon) > (veh.length + EGO_LENGTH) / 2:
        return np.inf
    return abs(lat) - (veh.width + EGO_WIDTH) / 2


def test_expert_follows_slower_lead_at_safe_gap():
    log = simulate(4, 14.0, blocks=("lead",))
    labels = label_drive(log.infos)
    following = [i for i in log.infos if i.reason == "lead"]
    assert len(following) > 30, "ego never followed the lead vehicle"
    gaps = [min((_footprint_gap(sc.ego, b) for b in sc.boxes
                 if b.kind == "lead"), default=np.inf) for sc in log.scenes]
    assert min(gaps) > 2.0
    assert {"follow", "slow"} & {lab.decision for lab in labels if "follow_lead" in lab.tags}


@pytest.fixture(scope="module")
def minute_drive():
    return simulate(10, 60.0)


def _corners(x, y, yaw, length, width):
    c, s = np.cos(yaw), np.sin(yaw)
    local = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1]]) * [length / 2, width / 2]
    return np.stack([x + c * local[:, 0] - s * local[:, 1], y + s * local[:, 0] + c * local[:, 1]],
                    axis=1)


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    """Separating-axis test of two convex quads [4, 2]."""
    for poly in (a, b):
        for i in range(4):
            edge = poly[(i + 1) % 4] - poly[i]
            axis = np.array([-edge[1], edge[0]])
            pa, pb = a @ axis, b @ axis
            if pa.max() < pb.min() or pb.max() < pa.min():
                return False
    return True


def test_nobody_collides_during_a_minute(minute_drive):
    probe = _corners(0.0, 0.0, 0.3, 4.5, 1.8)
    assert _overlap(probe, _corners(3.0, 1.0, -0.2, 4.5, 1.8))
    assert not _overlap(probe, _corners(0.0, 2.5, 0.3, 4.5, 1.8))
    for scene in minute_drive.scenes:
        ego = scene.ego
        cx, cy = ego.center
        quads = [("ego", _corners(cx, cy, ego.yaw, EGO_LENGTH, EGO_WIDTH))]
        quads += [(b.kind, _corners(b.x, b.y, b.yaw, b.length, b.width)) for b in scene.boxes
                  if b.z0 == 0.0]
        for i in range(len(quads)):
            for j in range(i + 1, len(quads)):
                (ka, qa), (kb, qb) = quads[i], quads[j]
                if ka == kb == "parked" or np.abs(qa[0] - qb[0]).max() > 15.0:
                    continue
                assert not _overlap(qa, qb), f"{ka} and {kb} overlap at t={scene.t:.1f}"


def test_sixty_second_drive_covers_every_scenario(minute_drive):
    log = minute_drive
    labels = label_drive(log.infos, log.frame_count)
    assert len(labels) == 601
    tags = {t for lab in labels for t in lab.tags}
    assert set(SCENARIO_TAGS) <= tags, f"missing {set(SCENARIO_TAGS) - tags}"
    assert {lab.decision for lab in labels} == set(DECISIONS)
    words = [len(lab.coc.split()) for lab in labels]
    assert 10 <= min(words) and max(words) <= 25
    assert len({lab.coc for lab in labels}) >= 15, "CoC wording does not vary"


def test_drive_is_deterministic_and_seeds_differ():
    a, b, c = simulate(3, 4.0), simulate(3, 4.0), simulate(4, 4.0)
    assert np.array_equal(a.ego, b.ego)
    assert a.scenes == b.scenes
    assert not np.array_equal(a.ego, c.ego)


def test_future_and_history_are_in_the_t0_frame():
    log = simulate(6, 4.0)
    fut, hist = log.future(20), log.history(20)
    assert fut.shape == (64, 3) and hist.shape == (16, 4)
    assert np.allclose(hist[-1], 0.0)
    v = log.infos[20].v
    assert fut[0, 0] == pytest.approx(0.1 * v, abs=0.05)
    assert np.all(np.diff(fut[:, 0]) >= -1e-9) and np.all(np.diff(hist[:, 0]) >= -1e-9)
    with pytest.raises(ValueError):
        log.history(3)


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="seconds"):
        simulate(0, 0.0)
    with pytest.raises(ValueError, match="unknown scenario blocks"):
        build_world(0, 5.0, blocks=("drift",))
