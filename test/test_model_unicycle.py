import math

import pytest
import torch

from flashdrive_ros.model.action import ActionSpace
from flashdrive_ros.model.config import ActionConfig
from flashdrive_ros.model.unicycle import (
    actions_to_trajectory,
    fit_v0,
    integrate,
    trajectory_to_actions,
)

DT = 0.1


def test_straight_line_constant_speed_and_acceleration():
    t = torch.arange(1, 65, dtype=torch.float64) * DT
    zeros = torch.zeros(64, dtype=torch.float64)
    poses = integrate(zeros, zeros, torch.tensor(5.0, dtype=torch.float64), DT)
    torch.testing.assert_close(poses[:, 0], 5.0 * t)
    assert poses[:, 1:].abs().max() == 0
    accel = torch.full((64,), 1.5, dtype=torch.float64)
    poses = integrate(accel, zeros, torch.tensor(2.0, dtype=torch.float64), DT)
    torch.testing.assert_close(poses[:, 0], 2.0 * t + 0.75 * t * t)


def test_constant_curvature_circle():
    v, kappa = 8.0, 0.05
    t = torch.arange(1, 65, dtype=torch.float64) * DT
    poses = integrate(torch.zeros(64, dtype=torch.float64),
                      torch.full((64,), kappa, dtype=torch.float64),
                      torch.tensor(v, dtype=torch.float64), DT)
    yaw = kappa * v * t
    torch.testing.assert_close(poses[:, 2], yaw)
    x, y = torch.sin(yaw) / kappa, (1 - torch.cos(yaw)) / kappa
    assert (poses[:, 0] - x).abs().max() < 0.02
    assert (poses[:, 1] - y).abs().max() < 0.02
    radius = torch.hypot(poses[:, 0], poses[:, 1] - 1 / kappa)
    assert (radius - 1 / kappa).abs().max() < 0.02


def test_fit_v0_recovers_speed_of_history():
    t = torch.arange(-15, 1, dtype=torch.float64) * DT
    speed0, accel = 6.0, 0.8
    x = speed0 * t + 0.5 * accel * t * t
    xyz = torch.stack([x, torch.zeros_like(x), torch.zeros_like(x)], dim=-1)
    v0 = fit_v0(xyz, torch.zeros_like(t), DT)
    assert abs(float(v0) - speed0) < 0.05
    yaw_rate = 0.3
    yaw = yaw_rate * t
    r = speed0 / yaw_rate
    arc = torch.stack([r * torch.sin(yaw), r * (1 - torch.cos(yaw)), torch.zeros_like(t)], -1)
    assert abs(float(fit_v0(arc, yaw, DT)) - speed0) < 0.05


def test_actions_round_trip_through_normalization():
    cfg = ActionConfig(accel_mean=0.1, accel_std=2.0, curvature_mean=0.0, curvature_std=0.05)
    space = ActionSpace(cfg).double()
    gen = torch.Generator().manual_seed(0)
    t = torch.linspace(0, 1, 64, dtype=torch.float64)
    smooth = torch.stack([torch.sin(2 * math.pi * t * f) for f in (0.5, 1.0)], dim=-1)
    actions = 0.5 * smooth[None] * torch.rand(3, 1, 2, generator=gen, dtype=torch.float64)
    v0 = torch.tensor([3.0, 8.0, 12.0], dtype=torch.float64)
    poses = actions_to_trajectory(actions, space, v0, DT)
    assert poses.shape == (3, 64, 3)
    back = trajectory_to_actions(poses, space, v0, DT)
    assert (back - actions).abs().max() < 0.05
    again = actions_to_trajectory(back, space, v0, DT)
    assert (again[..., :2] - poses[..., :2]).abs().max() < 0.1


def test_forward_only_stands_where_the_speed_would_turn_negative_and_restarts_on_gas():
    dt = 0.1
    accel = torch.tensor([-2.0] * 20 + [-0.5] * 10 + [1.0] * 10, dtype=torch.float64)
    curvature = torch.full_like(accel, 0.01)
    v0 = torch.tensor(2.0, dtype=torch.float64)
    plain = integrate(accel, curvature, v0, dt)
    held = integrate(accel, curvature, v0, dt, forward_only=True)
    torch.testing.assert_close(held[:10], plain[:10])
    assert plain[29, 0] < plain[9, 0] - 0.5  # the reference reverses
    step = torch.linalg.vector_norm(torch.diff(held[:, :2], dim=0), dim=1)
    heading = torch.stack([torch.cos(held[:-1, 2]), torch.sin(held[:-1, 2])], dim=1)
    forward = (torch.diff(held[:, :2], dim=0) * heading).sum(1)
    assert (forward >= -1e-12).all()
    assert step[10:29].abs().max() < 1e-12  # stands from the stop to the first gas
    assert held[-1, 0] - held[29, 0] == pytest.approx(0.5 * 1.0 * 1.0 ** 2, abs=0.06)
    assert held[29, 0] == pytest.approx(1.0, abs=1e-3)  # v0^2 / (2 * 2), a slight bend
    moving = torch.full((40,), -0.05, dtype=torch.float64)
    torch.testing.assert_close(integrate(moving, curvature, v0, dt, forward_only=True),
                               integrate(moving, curvature, v0, dt))
