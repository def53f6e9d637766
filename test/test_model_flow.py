import dataclasses

import torch

from flashdrive_ros.model.action import ActionInProj, velocity
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.expert import ActionExpert
from flashdrive_ros.model.flow import (
    euler_integrate,
    euler_sample,
    initial_noise,
    interpolate,
    time_grid,
)
from flashdrive_ros.model.kv_cache import KVCache


def test_time_grid_and_straight_path_reaches_target():
    assert torch.equal(time_grid(4), torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0],
                                                  dtype=torch.float64))
    target = torch.tensor([[1.0, -2.0], [0.5, 3.0]])
    calls = []

    def to_target(x, t):
        calls.append(t.clone())
        return (target - x) / (1 - t[:, None, None])

    gen = torch.Generator().manual_seed(3)
    x1 = euler_sample(to_target, 3, (2, 2), steps=5, generator=gen)
    torch.testing.assert_close(x1, target.expand(3, 2, 2))
    assert len(calls) == 5 and all(c.shape == (3,) for c in calls)


def test_seed_determinism():
    def field(x, t):
        return torch.sin(x) * (1 + t[:, None, None])

    a = euler_sample(field, 4, (64, 2), 8, torch.Generator().manual_seed(11))
    b = euler_sample(field, 4, (64, 2), 8, torch.Generator().manual_seed(11))
    c = euler_sample(field, 4, (64, 2), 8, torch.Generator().manual_seed(12))
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def _parts(seed: int = 0):
    torch.manual_seed(seed)
    cfg = tiny()
    cfg = dataclasses.replace(cfg, action=dataclasses.replace(cfg.action, fourier_max_freq=2.0))
    expert = ActionExpert(cfg.expert, cfg.text).eval()
    in_proj = ActionInProj(cfg.action, cfg.expert.hidden_size).eval()
    out_proj = torch.nn.Linear(cfg.expert.hidden_size, 2)
    t = cfg.text
    cache = KVCache(t.num_hidden_layers, 1, t.num_key_value_heads, 40, t.head_dim)
    cache.k.normal_()
    cache.v.normal_()
    cache.positions[:] = torch.arange(40)
    cache.advance_to(30)
    return cfg, expert, in_proj, out_proj, cache


def test_batched_samples_equal_separate_calls_with_real_expert():
    cfg, expert, in_proj, out_proj, cache = _parts()

    def field(x, t):
        return velocity(expert, in_proj, out_proj, x, t, cache, prefix_len=25)

    noise = initial_noise(3, (64, 2), torch.Generator().manual_seed(5))
    with torch.no_grad():
        t = torch.tensor([0.0, 0.4, 0.9])
        v = field(noise, t)
        v_single = torch.cat([field(noise[i:i + 1], t[i:i + 1]) for i in range(3)])
        torch.testing.assert_close(v, v_single, atol=1e-5, rtol=1e-5)
        batched = euler_integrate(field, noise, 4)
        separate = torch.cat([euler_integrate(field, noise[i:i + 1], 4)
                              for i in range(3)])
    torch.testing.assert_close(batched, separate, atol=1e-5, rtol=1e-5)
    assert batched.shape == (3, 64, 2) and torch.isfinite(batched).all()


def test_interpolation_target_is_integrated_exactly_by_euler():
    gen = torch.Generator().manual_seed(2)
    x1 = torch.randn(3, 64, 2, generator=gen)
    x0 = torch.randn(3, 64, 2, generator=gen)
    x_t, v = interpolate(x1, x0, torch.tensor([0.0, 0.5, 1.0]))
    torch.testing.assert_close(x_t[0], x0[0])
    torch.testing.assert_close(x_t[2], x1[2])
    torch.testing.assert_close(x_t[1], 0.5 * (x0[1] + x1[1]))
    out = euler_integrate(lambda x, t: interpolate(x1, x0, t)[1], x0, steps=4)
    torch.testing.assert_close(out, x1)


def test_model_sampler_is_seeded_and_batches_samples_in_one_expert_call_per_step():
    torch.manual_seed(0)
    model = AlpamayoModel(tiny()).eval()
    t = model.cfg.text
    cache = KVCache(t.num_hidden_layers, 1, t.num_key_value_heads, 40, t.head_dim)
    cache.k.normal_(generator=torch.Generator().manual_seed(1))
    cache.v.normal_(generator=torch.Generator().manual_seed(2))
    cache.positions[:] = torch.arange(40)
    cache.advance_to(30)
    batches = []
    model.expert.register_forward_hook(lambda _, args, out: batches.append(args[0].shape[0]))

    def sample(seed):
        return model.sample_actions(cache, 30, 3, torch.Generator().manual_seed(seed), steps=4)

    a, b, c = sample(7), sample(7), sample(8)
    assert batches == [3] * 12
    assert a.shape == (3, 64, 2) and torch.isfinite(a).all()
    assert torch.equal(a, b)
    assert (a - c).abs().min() > 0
    assert not torch.allclose(a[0], a[1])
