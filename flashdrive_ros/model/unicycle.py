"""Unicycle kinematics with (acceleration, curvature) controls, trapezoidal integration.

Forward: v_{i+1} = v_i + a_i dt; yaw_{i+1} = yaw_i + k_i v_i dt + k_i a_i dt^2 / 2;
position uses the trapezoid of v cos(yaw), v sin(yaw) over each step; the start is the t0
ego pose (origin, yaw 0) with speed v0 fitted to the ego history.
Inverse (training targets): speeds from a smoothed least-squares fit of the trapezoid
relation, then acceleration and curvature from smoothed least squares.
All fits run in float64 and return the input dtype.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from flashdrive_ros.model.action import ActionSpace


def _difference_matrix(n: int, order: int, dtype: torch.dtype,
                       device: torch.device) -> torch.Tensor:
    """D: [n - order, n], the finite-difference operator of the given order."""
    d = torch.eye(n, dtype=dtype, device=device)
    for _ in range(order):
        d = d[1:] - d[:-1]
    return d


def _regularized_normal(a: torch.Tensor, b: torch.Tensor, order: int, lam: float,
                        ridge: float, dt: float) -> tuple[torch.Tensor, torch.Tensor]:
    """min ||a x - b||^2 + lam / dt^(2 order) ||D x||^2 + ridge ||x||^2 as (M, r) of M x = r.

    a: [..., R, n], b: [..., R] -> M: [..., n, n], r: [..., n].
    """
    n = a.shape[-1]
    d = _difference_matrix(n, order, a.dtype, a.device)
    m = a.transpose(-1, -2) @ a + (lam / dt ** (2 * order)) * (d.T @ d)
    m = m + ridge * torch.eye(n, dtype=a.dtype, device=a.device)
    r = (a.transpose(-1, -2) @ b.unsqueeze(-1)).squeeze(-1)
    return m, r


def unwrap(angle: torch.Tensor) -> torch.Tensor:
    """angle: [..., N] -> the same with every step wrapped into (-pi, pi]."""
    step = torch.diff(angle, dim=-1)
    step = torch.remainder(step + math.pi, 2 * math.pi) - math.pi
    return torch.cat([angle[..., :1], angle[..., :1] + torch.cumsum(step, dim=-1)], dim=-1)


def _trapezoid_system(dxy: torch.Tensor, yaw: torch.Tensor, dt: float
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """dxy: [..., N, 2], yaw: [..., N+1] -> a: [..., 2N, N+1], b: [..., 2N] for speeds."""
    *lead, n, _ = dxy.shape
    a = torch.zeros(*lead, 2 * n, n + 1, dtype=dxy.dtype, device=dxy.device)
    rows = torch.arange(n, device=dxy.device)
    cos, sin = torch.cos(yaw), torch.sin(yaw)
    a[..., 2 * rows, rows] = cos[..., :-1]
    a[..., 2 * rows, rows + 1] = cos[..., 1:]
    a[..., 2 * rows + 1, rows] = sin[..., :-1]
    a[..., 2 * rows + 1, rows + 1] = sin[..., 1:]
    return a, (2.0 / dt * dxy).flatten(-2)


def fit_speeds(dxy: torch.Tensor, yaw: torch.Tensor, dt: float, v0: torch.Tensor | None = None,
               lam: float = 1e-6, ridge: float = 1e-4) -> torch.Tensor:
    """Speeds v: [..., N+1] with v_i u_i + v_{i+1} u_{i+1} ~ 2 dxy_i / dt, third-order smooth.

    dxy: [..., N, 2]; yaw: [..., N+1]; v0: [...] fixes v_0 when given.
    """
    a, b = _trapezoid_system(dxy.double(), yaw.double(), dt)
    m, r = _regularized_normal(a, b, order=3, lam=lam, ridge=ridge, dt=dt)
    if v0 is None:
        return torch.linalg.solve(m, r).to(dxy.dtype)
    v0 = v0.double()
    rest = torch.linalg.solve(m[..., 1:, 1:], r[..., 1:] - m[..., 1:, 0] * v0[..., None])
    return torch.cat([v0[..., None], rest], dim=-1).to(dxy.dtype)


def fit_v0(history_xyz: torch.Tensor, history_yaw: torch.Tensor, dt: float) -> torch.Tensor:
    """Speed at t0 from the ego history. history_xyz: [..., N, 3], yaw: [..., N] -> [...]."""
    if history_xyz.shape[-2] < 2 or history_xyz.shape[-2] != history_yaw.shape[-1]:
        raise ValueError(f"history needs >= 2 poses with one yaw each, got xyz "
                         f"{tuple(history_xyz.shape)} and yaw {tuple(history_yaw.shape)}")
    dxy = torch.diff(history_xyz[..., :2], dim=-2)
    return fit_speeds(dxy, unwrap(history_yaw), dt)[..., -1]


def integrate(accel: torch.Tensor, curvature: torch.Tensor, v0: torch.Tensor,
              dt: float, forward_only: bool = False) -> torch.Tensor:
    """accel, curvature: [..., T] physical units; v0: [...] -> poses: [..., T, 3] (x, y, yaw).

    forward_only: the speed is held at zero where the accelerations would take it below (a
    car that brakes to a stop stands instead of reversing) and grows again with the first
    positive acceleration after: speed_k = max(speed_{k-1} + accel_k * dt, 0)."""
    v0 = v0[..., None].to(accel.dtype)
    speed = torch.cat([v0, v0 + torch.cumsum(accel * dt, dim=-1)], dim=-1)  # speed: [..., T+1]
    if forward_only:
        speed = speed - torch.cummin(speed, dim=-1).values.clamp(max=0.0)
        accel = torch.diff(speed, dim=-1) / dt  # accel: [..., T] as the clamped speed moves
    dyaw = curvature * speed[..., :-1] * dt + curvature * accel * (0.5 * dt * dt)
    yaw = torch.cat([torch.zeros_like(v0), torch.cumsum(dyaw, dim=-1)], dim=-1)
    vx, vy = speed * torch.cos(yaw), speed * torch.sin(yaw)  # vx, vy: [..., T+1]
    x = torch.cumsum(0.5 * dt * (vx[..., :-1] + vx[..., 1:]), dim=-1)
    y = torch.cumsum(0.5 * dt * (vy[..., :-1] + vy[..., 1:]), dim=-1)
    return torch.stack([x, y, yaw[..., 1:]], dim=-1)


def poses_to_controls(future_xy: torch.Tensor, future_yaw: torch.Tensor, v0: torch.Tensor,
                      dt: float, lam: float = 1e-4, ridge: float = 1e-4
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """future_xy: [..., T, 2], future_yaw: [..., T] after t0 (start at origin, yaw 0), v0: [...]
    -> (accel [..., T], curvature [..., T]) in physical units."""
    dtype = future_xy.dtype
    xy = torch.cat([torch.zeros_like(future_xy[..., :1, :]), future_xy], dim=-2).double()
    yaw = unwrap(torch.cat([torch.zeros_like(future_yaw[..., :1]), future_yaw],
                           dim=-1).double())  # yaw: [..., T+1]
    speed = fit_speeds(torch.diff(xy, dim=-2), yaw, dt, v0=v0.double())  # speed: [..., T+1]
    n = future_yaw.shape[-1]
    eye = torch.eye(n, dtype=torch.float64, device=xy.device).expand(*speed.shape[:-1], n, n)
    m, r = _regularized_normal(eye, torch.diff(speed, dim=-1) / dt, 2, lam, ridge, dt)
    accel = torch.linalg.solve(m, r)
    arc = dt * speed[..., :-1] + 0.5 * dt * dt * accel  # arc: [..., T]
    m, r = _regularized_normal(torch.diag_embed(arc), torch.diff(yaw, dim=-1), 2, lam, ridge, dt)
    curvature = torch.linalg.solve(m, r)
    return accel.to(dtype), curvature.to(dtype)


def actions_to_trajectory(actions: torch.Tensor, space: ActionSpace, v0: torch.Tensor,
                          dt: float, forward_only: bool = False) -> torch.Tensor:
    """actions: [..., T, 2] normalized (accel, curvature); v0: [...] -> [..., T, 3]
    (forward_only as in `integrate`)."""
    if actions.shape[-1] != 2:
        raise ValueError(f"actions must be [..., T, 2], got {tuple(actions.shape)}")
    accel, curvature = space.denormalize(actions)
    return integrate(accel, curvature, v0.expand(actions.shape[:-2]), dt, forward_only)


def trajectory_to_actions(future: torch.Tensor, space: ActionSpace, v0: torch.Tensor,
                          dt: float) -> torch.Tensor:
    """future: [..., T, 3] (x, y, yaw) after t0; v0: [...] -> normalized actions [..., T, 2]."""
    if future.shape[-1] != 3:
        raise ValueError(f"future poses must be [..., T, 3], got {tuple(future.shape)}")
    accel, curvature = poses_to_controls(future[..., :2], future[..., 2],
                                         v0.expand(future.shape[:-2]), dt)
    return space.normalize(accel, curvature)
