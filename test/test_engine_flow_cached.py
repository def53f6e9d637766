import pytest
import torch

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.flow_cached import FlowSchedule, euler_cached
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ConfigError, tiny
from flashdrive_ros.model.flow import euler_integrate
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions


class CountingVelocity:
    """A fixed nonlinear field v(x, t) per sample, counting network calls."""

    def __init__(self, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.w1 = torch.randn(2, 16, generator=gen, dtype=torch.float64)
        self.w2 = torch.randn(16, 2, generator=gen, dtype=torch.float64)
        self.calls: list[torch.Tensor] = []

    def __call__(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        self.calls.append(t.clone())
        h = torch.tanh(x @ self.w1 + t[:, None, None])
        return h @ self.w2 - x * (1.0 + t[:, None, None])


def reference_euler(fn, x0, steps):
    times = torch.linspace(0.0, 1.0, steps + 1, dtype=torch.float64).tolist()
    x = x0
    for i in range(steps):
        t = torch.full((x.shape[0],), times[i], dtype=x.dtype)
        x = x + (times[i + 1] - times[i]) * fn(x, t)
    return x


def test_default_schedule_reuses_steps_three_to_six():
    schedule = FlowSchedule()
    assert schedule.num_steps == 8
    assert schedule.fresh_steps == (1, 2, 7, 8)
    assert schedule.num_velocity_calls == 4


def test_empty_reuse_is_plain_euler_exactly():
    x0 = torch.randn(3, 64, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    fn = CountingVelocity()
    out = euler_cached(fn, x0, FlowSchedule.plain(10))
    assert torch.equal(out, reference_euler(CountingVelocity(), x0, 10))
    assert len(fn.calls) == 10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_empty_reuse_matches_model_flow_euler(dtype):
    x0 = torch.randn(2, 64, 2, generator=torch.Generator().manual_seed(2), dtype=dtype)
    fn = CountingVelocity()
    fn.w1, fn.w2 = fn.w1.to(dtype), fn.w2.to(dtype)
    for steps in (1, 7, 10):
        ours = euler_cached(fn, x0, FlowSchedule.plain(steps))
        assert torch.equal(ours, euler_integrate(fn, x0, steps))


def test_reused_steps_skip_the_velocity_call():
    x0 = torch.randn(2, 64, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    fn = CountingVelocity()
    out = euler_cached(fn, x0, FlowSchedule(8, (3, 4, 5, 6)))
    called_at = [float(t[0]) for t in fn.calls]
    assert called_at == [0.0, 1 / 8, 6 / 8, 7 / 8]
    times = torch.linspace(0.0, 1.0, 9, dtype=torch.float64).tolist()
    manual = x0
    for step in range(8):
        if step + 1 not in (3, 4, 5, 6):
            v = CountingVelocity()(manual, torch.full((2,), times[step], dtype=torch.float64))
        manual = manual + (times[step + 1] - times[step]) * v
    assert torch.equal(out, manual)
    assert not torch.allclose(out, reference_euler(CountingVelocity(), x0, 8))


def test_batched_samples_equal_separate_calls():
    x0 = torch.randn(5, 64, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    schedule = FlowSchedule()
    batched = euler_cached(CountingVelocity(), x0, schedule)
    for k in range(5):
        single = euler_cached(CountingVelocity(), x0[k:k + 1], schedule)
        torch.testing.assert_close(batched[k:k + 1], single, rtol=0, atol=1e-12)


def test_batched_samples_equal_separate_calls_through_the_model_expert():
    """In float64: the random tiny expert turns a rounding difference of 1e-7 in its input
    into 1e-1 in the sample (Fourier features up to 100 cycles), so in float32 the result
    would hang on how the CPU's GEMM kernels block a batch of 4 rows against 1."""
    torch.manual_seed(0)
    model = AlpamayoModel(tiny()).eval().double()
    text, action = model.cfg.text, model.cfg.action
    cache = KVCache(text.num_hidden_layers, 1, text.num_key_value_heads, 40, text.head_dim,
                    torch.float64)
    cache.k.normal_()
    cache.v.normal_()
    cache.positions.copy_(text_positions(0, 40))
    cache.advance_to(31)
    x0 = torch.randn(4, action.num_waypoints, action.action_dim, dtype=torch.float64,
                     generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        field = model.velocity_fn(cache, 31)
        batched = euler_cached(field, x0, FlowSchedule())
        separate = torch.cat([euler_cached(field, x0[k:k + 1], FlowSchedule())
                              for k in range(4)])
    torch.testing.assert_close(batched, separate, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(batched[0], batched[1], atol=1e-3)


def test_bad_velocity_shape_is_reported():
    with pytest.raises(ValueError, match="velocity_fn returned"):
        euler_cached(lambda x, t: x[:, :3], torch.zeros(1, 64, 2), FlowSchedule())


@pytest.mark.parametrize("steps,reuse", [(0, ()), (8, (1,)), (8, (9,))])
def test_bad_schedule_is_rejected(steps, reuse):
    with pytest.raises(ValueError):
        FlowSchedule(steps, reuse)


def test_engine_config_selects_schedule():
    assert EngineConfig().flow_schedule == FlowSchedule(8, (3, 4, 5, 6))
    assert EngineConfig(cached_velocity=False).flow_schedule == FlowSchedule.plain(10)
    base = EngineConfig.baseline()
    assert base.flow_schedule == FlowSchedule.plain(10)
    assert not (base.streaming or base.speculative or base.cached_velocity or base.cuda_graphs)
    with pytest.raises(ConfigError, match="baseline"):
        EngineConfig(mode="baseline", streaming=True)
    with pytest.raises(ConfigError, match="reuse_steps"):
        EngineConfig(reuse_steps=(1,))
    with pytest.raises(ConfigError, match="unknown"):
        EngineConfig.from_dict({"stream": True})
