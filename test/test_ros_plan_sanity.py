"""Plan sanity: NaN/inf and kinematically impossible plans are refused with the reason, the
PlannerLoop never makes them its latest plan, and the fallback follows the parameter."""

import math

import numpy as np
import pytest
import torch
from helpers.planner_inputs import CAMERAS, feed
from helpers.tiny_model import make_tiny_model_dir

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.types import Plan
from flashdrive_ros.engine.window import WindowBuilder
from flashdrive_ros.ros.outputs import fallback_state
from flashdrive_ros.ros.params import DriveParams, ParameterError
from flashdrive_ros.ros.plan_sanity import PlanLimits, check_plan, stop_plan, trajectory_kinematics
from flashdrive_ros.ros.planner_loop import PlannerLoop

DT = 0.1
LIMITS = PlanLimits(max_accel_mps2=4.0, max_jerk_mps3=20.0, max_curvature_1pm=0.3)


def plan_of(x, y, yaw) -> Plan:
    trajectory = np.stack([x, y, yaw], axis=1)[None]
    return Plan(t0=1.0, trajectories=trajectory, dt=DT, coc_text="")


def times(n=64):
    return DT * np.arange(1, n + 1)


def test_kinematics_of_constant_acceleration_and_a_circle():
    t = times()
    kinematics = trajectory_kinematics(np.stack([5 * t + t ** 2, 0 * t, 0 * t], 1), DT)
    assert np.allclose(kinematics["accel"], 2.0, atol=1e-6)
    assert np.allclose(kinematics["jerk"], 0.0, atol=1e-6)
    radius, speed = 20.0, 5.0
    angle = speed * t / radius
    circle = np.stack([radius * np.sin(angle), radius * (1 - np.cos(angle)), angle], 1)
    assert np.allclose(trajectory_kinematics(circle, DT)["curvature"], 1 / radius, rtol=1e-3)


def test_plausible_plans_and_the_stop_plan_pass():
    t = times()
    assert check_plan(plan_of(8 * t, 0.02 * t ** 2, 0.004 * t), LIMITS) == ""
    assert check_plan(stop_plan(3.0, 64, DT, "test"), LIMITS) == ""
    assert check_plan(plan_of(8 * t, 0 * t, 0 * t), None) == ""


@pytest.mark.parametrize("quantity, trajectory", [
    ("accel", lambda t: (3 * t ** 2, 0 * t, 0 * t)),
    ("jerk", lambda t: (5 * t + np.where(np.arange(t.size) % 2, 0.01, 0.0), 0 * t, 0 * t)),
    ("curvature", lambda t: (2 * t, 0 * t, 1.0 * t)),
])
def test_impossible_plans_name_the_quantity(quantity, trajectory):
    reason = check_plan(plan_of(*trajectory(times())), LIMITS)
    assert reason.startswith("sample 0: |" + quantity + "|"), reason


def test_nonfinite_and_malformed_plans_are_refused():
    t = times()
    x = 5 * t
    x[10] = math.nan
    assert "NaN or inf" in check_plan(plan_of(x, 0 * t, 0 * t), LIMITS)
    assert "NaN or inf" in check_plan(plan_of(5 * t, 0 * t + math.inf, 0 * t), None)
    assert "shape" in check_plan(Plan(t0=1.0, trajectories=np.zeros((64, 3)), dt=DT,
                                      coc_text=""), LIMITS)
    bad_dt = plan_of(5 * t, 0 * t, 0 * t)
    bad_dt.dt = 0.0
    assert "dt" in check_plan(bad_dt, LIMITS)


def test_limits_and_parameters_are_validated():
    with pytest.raises(ValueError):
        PlanLimits(max_accel_mps2=0.0)
    with pytest.raises(ValueError):
        PlanLimits(max_jerk_mps3=math.inf)
    assert DriveParams().plan_limits == PlanLimits(12.0, 60.0, 1.0)
    with pytest.raises(ParameterError, match="max_plan_curvature_1pm"):
        DriveParams(max_plan_curvature_1pm=0.0)
    with pytest.raises(ParameterError, match="max_plan_accel_mps2"):
        DriveParams(max_plan_accel_mps2=math.nan)
    with pytest.raises(ParameterError, match="invalid_plan_fallback"):
        DriveParams(invalid_plan_fallback="ignore")


def test_fallback_holds_a_fresh_plan_then_stops():
    assert fallback_state(None, True, "hold") == ""
    assert fallback_state((2.0, "accel"), True, "hold").startswith("hold:")
    assert fallback_state((2.0, "accel"), False, "hold").startswith("stop:")
    assert fallback_state((2.0, "accel"), True, "stop").startswith("stop:")


def test_planner_loop_never_keeps_a_plan_that_fails_the_checks(tmp_path):
    torch.set_num_threads(1)
    engine = Engine.load(make_tiny_model_dir(tmp_path), EngineConfig(speculative=False))
    strict = PlanLimits(max_accel_mps2=1e-6, max_jerk_mps3=1e-6, max_curvature_1pm=1e-6)
    loop = PlannerLoop(engine, WindowBuilder(len(CAMERAS)), CAMERAS, limits=strict)
    feed(loop, 10.0, 11.6)
    assert loop.run_once()
    planner, _ = loop.health()
    assert loop.latest() is None
    assert planner.plans_rejected == 1 and planner.engine_error == ""
    t0, reason = loop.rejected_plan()
    assert t0 == pytest.approx(11.6) and reason.startswith("sample 0: |")
    assert planner.last_plan_rejection == reason
    loop.limits = None
    feed(loop, 11.62, 11.7)
    assert loop.run_once()
    planner, _ = loop.health()
    assert loop.rejected_plan() is None and loop.latest().plan.t0 == pytest.approx(11.7)
    assert loop.latest().plan.prefill_reason == "first window"
    assert planner.full_prefills_by_reason == {"first window": 1}
