"""The box gap and the plan in force at a contact: where the plan meant the car to be, its
clearance from what the car hit and the car's distance from it."""

import math

import numpy as np
import pytest

from flashdrive_ros.closed_loop.collision_context import at_contact, plan_pose
from flashdrive_ros.closed_loop.controller import WorldPlan
from flashdrive_ros.sim.rectangles import gap, rectangle
from flashdrive_ros.sim.vehicle import CENTER_OFFSET, EGO_LENGTH, EGO_WIDTH


def test_the_gap_of_two_boxes_is_their_distance_apart_or_minus_their_overlap():
    a = rectangle(0.0, 0.0, 0.0, 4.0, 2.0)
    assert gap(a, rectangle(5.5, 0.0, 0.0, 2.0, 2.0)) == pytest.approx(2.5)
    assert gap(a, rectangle(0.0, 2.7, 0.0, 4.0, 2.0)) == pytest.approx(0.7)
    assert gap(a, rectangle(0.0, 1.7, 0.0, 4.0, 2.0)) == pytest.approx(-0.3)
    assert gap(a, rectangle(0.5, 0.0, 0.0, 1.0, 1.0)) == pytest.approx(-1.5)
    diamond = rectangle(4.0, 3.0, math.pi / 4, math.sqrt(2), math.sqrt(2))
    assert gap(a, diamond) == pytest.approx(1.5 * math.sqrt(2))
    assert gap(a, diamond) == pytest.approx(gap(diamond, a))


def straight_plan(y: float, speed: float = 10.0, ready_at: float = 0.1) -> WorldPlan:
    times = np.arange(0.0, 6.5, 0.1)
    xy = np.stack([speed * times, np.full_like(times, y)], axis=1)
    return WorldPlan(0.0, times, xy, ready_at)


def event(base_x: float, base_y: float, other: np.ndarray, t: float = 2.0) -> dict:
    return {"t": t, "x": base_x + CENTER_OFFSET, "y": base_y, "yaw": 0.0,
            "other_box": other.tolist()}


def test_a_plan_that_runs_into_the_object_has_a_negative_clearance_and_no_tracking_error():
    parked = rectangle(20.0 + CENTER_OFFSET + 2.0, 1.5, 0.0, 4.5, 1.9)
    hit = at_contact(event(20.0, 0.0, parked), [straight_plan(0.0)])
    assert hit["plan_clearance_m"] == pytest.approx(-(EGO_WIDTH + 1.9) / 2 + 1.5, abs=1e-3)
    assert hit["tracking_error_m"] == pytest.approx(0.0, abs=0.01)


def test_a_plan_that_clears_the_object_the_car_hit_puts_the_fault_on_the_tracking():
    parked = rectangle(20.0 + CENTER_OFFSET, 1.5, 0.0, 4.5, 1.9)
    plans = [straight_plan(0.0, ready_at=0.1), straight_plan(-1.0, ready_at=1.0),
             straight_plan(3.0, ready_at=2.5)]
    hit = at_contact(event(20.0, 0.0, parked), plans)
    assert hit["plan_clearance_m"] == pytest.approx(1.0 + 1.5 - (EGO_WIDTH + 1.9) / 2, abs=1e-3)
    assert hit["tracking_error_m"] == pytest.approx(1.0, abs=0.01)
    assert at_contact(event(20.0, 0.0, parked, t=0.05), plans) is None


def test_a_plan_standing_still_keeps_the_heading_it_last_moved_in():
    times = np.arange(0.0, 3.0, 0.1)
    xy = np.stack([np.minimum(times, 1.0), np.minimum(times, 1.0)], axis=1)
    plan = WorldPlan(0.0, times, xy, 0.1)
    assert plan_pose(plan, 2.0, 0.3) == pytest.approx((1.0, 1.0, math.pi / 4))
    still = WorldPlan(0.0, times, np.zeros((len(times), 2)), 0.1)
    assert plan_pose(still, 2.0, 0.3) == pytest.approx((0.0, 0.0, 0.3))
    box = rectangle(CENTER_OFFSET, 0.0, 0.0, EGO_LENGTH, EGO_WIDTH)
    assert gap(box, box) == pytest.approx(-EGO_WIDTH)


def test_the_gap_of_two_boxes_is_their_distance_apart_or_minus_the_overlap():
    car = rectangle(0.0, 0.0, 0.0, 4.0, 2.0)
    assert gap(car, rectangle(0.0, 2.4, 0.0, 4.0, 2.0)) == pytest.approx(0.4)
    assert gap(car, rectangle(0.0, 1.7, 0.0, 4.0, 2.0)) == pytest.approx(-0.3)
    assert gap(car, rectangle(5.0, 3.0, 0.0, 4.0, 2.0)) == pytest.approx(np.hypot(1.0, 1.0))
    assert gap(car, rectangle(0.0, 0.0, np.pi / 2, 6.0, 1.0)) < -0.4
    assert gap(car, rectangle(3.5, 0.0, np.pi / 4, 1.0, 1.0)) == pytest.approx(
        1.5 - np.sqrt(0.5))
