"""Flow-matching loss of the action expert over cached backbone prefixes: x0 ~ N(0, I),
x1 = the normalized actions, t ~ U(0, 1), x_t = t x1 + (1 - t) x0, target v = x1 - x0."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.flow import interpolate
from flashdrive_ros.train.batched_expert import batched_velocity


def check_expert_blind(expert_blind: float) -> None:
    """The share of windows whose expert does not read the image slots: in [0, 1)."""
    if not 0.0 <= expert_blind < 1.0:
        raise ValueError(f"expert_blind must be in [0, 1), got {expert_blind}")


def flow_matching_loss(model: AlpamayoModel, cache, actions: torch.Tensor,
                       prefix_lens: torch.Tensor, generator: torch.Generator, draws: int = 1,
                       bounds: tuple[int, int] | None = None,
                       trained: torch.Tensor | None = None,
                       hidden_slots: torch.Tensor | None = None) -> torch.Tensor:
    """actions: [B, N_wp, 2] normalized targets; row b's expert reads cache row b's first
    prefix_lens[b] slots ([B] long) but its `hidden_slots` ([B, S] bool); `draws` (noise,
    time) pairs per row, all noise drawn before all times (draws = 1: one [B, N_wp, 2] noise
    and one [B] time draw); trained: [B] bool, the rows the loss averages over (None: all)."""
    x0 = torch.randn((draws, *actions.shape), generator=generator, device=actions.device,
                     dtype=actions.dtype)  # x0: [K, B, N_wp, 2]
    t = torch.rand((draws, actions.shape[0]), generator=generator, device=actions.device,
                   dtype=actions.dtype)  # t: [K, B]
    return flow_matching_loss_at(model, cache, actions, prefix_lens, x0, t, bounds, trained,
                                 hidden_slots)


def flow_matching_loss_at(model: AlpamayoModel, cache, actions: torch.Tensor,
                          prefix_lens: torch.Tensor, x0: torch.Tensor, t: torch.Tensor,
                          bounds: tuple[int, int] | None = None,
                          trained: torch.Tensor | None = None,
                          hidden_slots: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared velocity error over the K given draws (and the `trained` rows, [B] bool):
    x0: [K, B, N_wp, 2]; t: [K, B]; the expert runs once over the K * B rows, each reading
    its window's cached prefix but the window's `hidden_slots`."""
    draws = x0.shape[0]
    x1 = actions.expand(draws, *actions.shape).reshape(-1, *actions.shape[1:])
    x_t, target = interpolate(x1, x0.reshape(x1.shape), t.reshape(-1))  # x_t: [K*B, N_wp, 2]
    v = batched_velocity(model.expert, model.action_in_proj, model.action_out_proj, x_t,
                         t.reshape(-1), cache, prefix_lens, draws, bounds, hidden_slots)
    if trained is None:
        return F.mse_loss(v.float(), target.float())
    err = (v.float() - target.float()).square().mean(dim=(1, 2))  # err: [K*B]
    w = trained.float().repeat(draws)  # w: [K*B], row k * B + b
    return (err * w).sum() / w.sum().clamp_min(1.0)
