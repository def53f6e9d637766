"""Action input/output projections, action-space normalization, and the expert velocity.

Names mirror the release checkpoint: `action_in_proj.sinus.{i}.freqs`,
`action_in_proj.timestep_fourier_encoder.freqs`, `action_in_proj.encoder.trunk.{j}.*`,
`action_in_proj.norm.*`, `action_out_proj.{weight,bias}`, `action_space.{accel,curvature}_
{mean,std}`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from flashdrive_ros.model.config import ActionConfig
from flashdrive_ros.model.expert import ActionExpert, expert_positions
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.layers import RMSNorm


class FourierEncoder(nn.Module):
    """x: [...] -> [..., dim]: sqrt(2) (sin, cos) of 2 pi x f, f log-spaced in [1, max_freq]."""

    def __init__(self, dim: int, max_freq: float) -> None:
        super().__init__()
        self.out_dim = dim
        freqs = torch.logspace(0.0, math.log10(max_freq), steps=dim // 2, dtype=torch.float32)
        self.register_buffer("freqs", freqs[None, :])  # freqs: [1, dim / 2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        arg = x.float()[..., None] * self.freqs.float() * (2 * math.pi)
        return (torch.cat([arg.sin(), arg.cos()], dim=-1) * math.sqrt(2.0)).to(x.dtype)


class MLPEncoder(nn.Module):
    """Linear, SiLU, then (RMSNorm, Linear, SiLU) x (layers - 1) with a plain last Linear."""

    def __init__(self, in_features: int, num_layers: int, hidden: int, out_features: int
                 ) -> None:
        super().__init__()
        trunk: list[nn.Module] = [nn.Linear(in_features, hidden), nn.SiLU()]
        for i in range(num_layers):
            last = i == num_layers - 1
            trunk.append(RMSNorm(hidden, eps=1e-5, fused=False))
            trunk.append(nn.Linear(hidden, out_features if last else hidden))
            if not last:
                trunk.append(nn.SiLU())
        self.trunk = nn.Sequential(*trunk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk(x)


class ActionInProj(nn.Module):
    """(x [K, N, 2], t [K]) -> [K, N, H_exp]: Fourier features per action dim and of t."""

    def __init__(self, cfg: ActionConfig, out_dim: int) -> None:
        super().__init__()
        nf = cfg.num_fourier_features
        self.sinus = nn.ModuleList(FourierEncoder(nf, cfg.fourier_max_freq)
                                   for _ in range(cfg.action_dim))
        self.timestep_fourier_encoder = FourierEncoder(nf, cfg.fourier_max_freq)
        self.encoder = MLPEncoder(nf * (cfg.action_dim + 1), cfg.in_proj_num_layers,
                                  cfg.in_proj_hidden_size, out_dim)
        self.norm = nn.LayerNorm(out_dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Features are computed in float32 and enter the MLP in its parameter dtype."""
        k_samples, n, _ = x.shape
        x, t = x.float(), t.float()
        feats = torch.cat([enc(x[..., i]) for i, enc in enumerate(self.sinus)], dim=-1)
        t_feats = self.timestep_fourier_encoder(t)  # t_feats: [K, F]
        feats = torch.cat([feats, t_feats[:, None, :].expand(k_samples, n, -1)], dim=-1)
        return self.norm(self.encoder(feats.to(self.norm.weight.dtype)))


class ActionSpace(nn.Module):
    """Normalization of (acceleration m/s^2, curvature 1/m); buffers are checkpoint state."""

    def __init__(self, cfg: ActionConfig) -> None:
        super().__init__()
        for name in ("accel_mean", "accel_std", "curvature_mean", "curvature_std"):
            self.register_buffer(name, torch.tensor(getattr(cfg, name), dtype=torch.float32))

    def denormalize(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """actions: [..., T, 2] normalized -> (accel [..., T], curvature [..., T])."""
        accel = actions[..., 0] * self.accel_std.to(actions) + self.accel_mean.to(actions)
        curv = actions[..., 1] * self.curvature_std.to(actions) + self.curvature_mean.to(actions)
        return accel, curv

    def normalize(self, accel: torch.Tensor, curvature: torch.Tensor) -> torch.Tensor:
        """(accel [..., T], curvature [..., T]) -> actions [..., T, 2] normalized."""
        a = (accel - self.accel_mean.to(accel)) / self.accel_std.to(accel)
        c = (curvature - self.curvature_mean.to(curvature)) / self.curvature_std.to(curvature)
        return torch.stack([a, c], dim=-1)


def sample_times(x_t: torch.Tensor, t: torch.Tensor | float) -> torch.Tensor:
    """The flow time of each sample, [K] in x_t's dtype, for x_t: [K, N, 2] and t a scalar
    or [K]."""
    if x_t.ndim != 3 or x_t.shape[-1] != 2:
        raise ValueError(f"x_t must be [K, N, 2], got {tuple(x_t.shape)}")
    t = torch.as_tensor(t, dtype=x_t.dtype, device=x_t.device)
    t = t.expand(x_t.shape[0]) if t.ndim == 0 else t
    if t.shape != (x_t.shape[0],):
        raise ValueError(f"t must be a scalar or [K={x_t.shape[0]}], got {tuple(t.shape)}")
    return t


def velocity(expert: ActionExpert, in_proj: ActionInProj, out_proj: nn.Linear,
             x_t: torch.Tensor, t: torch.Tensor | float, cache: KVCache, prefix_len: int,
             positions: torch.Tensor | None = None,
             prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
    """Flow velocity v: [K, N, 2] in x_t's dtype at x_t: [K, N, 2], time t ([K] or scalar).

    positions: [3, 1, N] rotary positions of the action tokens; by default the positions
    right after cache slot prefix_len - 1 (expert_positions). prefix: optional
    `expert.rotated_prefix(...)` computed once for all flow steps.
    """
    t = sample_times(x_t, t)
    if positions is None:
        positions = expert_positions(cache, prefix_len, x_t.shape[1])
    tokens = in_proj(x_t, t)  # tokens: [K, N, H_exp]
    return out_proj(expert(tokens, positions, cache, prefix_len, prefix)).to(x_t.dtype)
