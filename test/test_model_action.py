"""Action input projection (Fourier features), output projection, action normalization."""

import math

import pytest
import torch

from flashdrive_ros.model.action import ActionInProj, ActionSpace, FourierEncoder
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ActionConfig, tiny


def test_fourier_features_match_the_closed_form():
    encoder = FourierEncoder(8, max_freq=100.0)
    freqs = torch.tensor([1.0, 10 ** (2 / 3), 10 ** (4 / 3), 100.0])
    torch.testing.assert_close(encoder.freqs, freqs[None])
    x = torch.tensor([[0.0, 0.013], [-0.5, 1.7]])  # x: [2, 2]
    arg = 2 * math.pi * x[..., None].double() * freqs.double()  # arg: [2, 2, 4]
    expected = math.sqrt(2) * torch.cat([arg.sin(), arg.cos()], dim=-1)
    out = encoder(x)
    assert out.shape == (2, 2, 8)
    torch.testing.assert_close(out.double(), expected, atol=5e-4, rtol=0)


@pytest.fixture(scope="module")
def in_proj():
    torch.manual_seed(0)
    cfg = tiny().action
    return cfg, ActionInProj(cfg, out_dim=64).eval()


def test_in_proj_concatenates_action_dims_then_time(in_proj):
    cfg, proj = in_proj
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, cfg.num_waypoints, 2, generator=gen)  # x: [K, N, 2]
    t = torch.tensor([0.0, 0.3, 0.9])
    with torch.no_grad():
        out = proj(x, t)
        t_feats = proj.timestep_fourier_encoder(t)[:, None].expand(3, cfg.num_waypoints, -1)
        feats = torch.cat([proj.sinus[0](x[..., 0]), proj.sinus[1](x[..., 1]), t_feats], -1)
        expected = proj.norm(proj.encoder(feats))
    assert out.shape == (3, cfg.num_waypoints, 64)
    assert feats.shape[-1] == 3 * cfg.num_fourier_features
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def test_in_proj_tokens_are_independent_and_time_matters(in_proj):
    cfg, proj = in_proj
    x = torch.zeros(1, cfg.num_waypoints, 2)
    moved = x.clone()
    moved[0, 5] = torch.tensor([0.7, -0.2])
    with torch.no_grad():
        base, changed = proj(x, torch.tensor([0.5])), proj(moved, torch.tensor([0.5]))
        later = proj(x, torch.tensor([0.6]))
    differs = (base - changed).abs().amax(dim=-1)[0] > 1e-6  # differs: [N]
    assert differs.nonzero().flatten().tolist() == [5]
    assert (base - later).abs().amax(dim=-1).min() > 1e-4


def test_action_space_normalization_is_invertible_and_named_as_released():
    cfg = ActionConfig(accel_mean=0.3, accel_std=1.5, curvature_mean=-0.01, curvature_std=0.04)
    space = ActionSpace(cfg)
    assert set(space.state_dict()) == {"accel_mean", "accel_std", "curvature_mean",
                                       "curvature_std"}
    actions = torch.randn(2, 64, 2, generator=torch.Generator().manual_seed(2))
    accel, curvature = space.denormalize(actions)
    torch.testing.assert_close(accel, actions[..., 0] * 1.5 + 0.3)
    torch.testing.assert_close(curvature, actions[..., 1] * 0.04 - 0.01)
    torch.testing.assert_close(space.normalize(accel, curvature), actions)


def test_out_proj_maps_expert_tokens_to_two_action_dims():
    model = AlpamayoModel(tiny())
    assert model.action_out_proj.in_features == model.cfg.expert.hidden_size
    assert model.action_out_proj.out_features == 2 and model.action_out_proj.bias is not None
