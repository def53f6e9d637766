"""Plain Euler flow-matching sampler: x0 ~ N(0, I), x_{i+1} = x_i + dt v(x_i, t_i), t in [0, 1]."""

from __future__ import annotations

from collections.abc import Callable

import torch

VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def time_grid(steps: int) -> torch.Tensor:
    """[steps + 1] uniformly spaced times from 0 to 1."""
    if steps < 1:
        raise ValueError(f"flow steps must be >= 1, got {steps}")
    return torch.linspace(0.0, 1.0, steps + 1, dtype=torch.float64)


def initial_noise(num_samples: int, shape: tuple[int, ...], generator: torch.Generator,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """x0: [num_samples, *shape] standard normal, drawn on the generator's device."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    return torch.randn(num_samples, *shape, generator=generator, dtype=dtype,
                       device=generator.device)


def euler_sample(velocity_fn: VelocityFn, num_samples: int, shape: tuple[int, ...], steps: int,
                 generator: torch.Generator, dtype: torch.dtype = torch.float32
                 ) -> torch.Tensor:
    """x1: [num_samples, *shape]; velocity_fn(x [K, *shape], t [K]) -> v [K, *shape].

    All samples go through one velocity_fn call per step.
    """
    x = initial_noise(num_samples, shape, generator, dtype)
    return euler_integrate(velocity_fn, x, steps)


def euler_integrate(velocity_fn: VelocityFn, x0: torch.Tensor, steps: int) -> torch.Tensor:
    """Integrate from given noise x0: [K, *shape] over `steps` uniform Euler steps."""
    times = time_grid(steps)
    x = x0
    for i in range(steps):
        t = torch.full((x.shape[0],), float(times[i]), dtype=x.dtype, device=x.device)
        v = velocity_fn(x, t)
        if v.shape != x.shape:
            raise ValueError(f"velocity shape {tuple(v.shape)} != sample shape "
                             f"{tuple(x.shape)}")
        x = x + float(times[i + 1] - times[i]) * v
    return x


def interpolate(x1: torch.Tensor, x0: torch.Tensor, t: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Training pair: x_t = (1 - t) x0 + t x1 and target velocity x1 - x0; t: [K] in [0, 1]."""
    if x1.shape != x0.shape or t.shape != x1.shape[:1]:
        raise ValueError(f"x1 {tuple(x1.shape)}, x0 {tuple(x0.shape)} and t {tuple(t.shape)} "
                         f"do not match")
    tt = t.to(x1.dtype).view(-1, *([1] * (x1.ndim - 1)))
    return (1 - tt) * x0 + tt * x1, x1 - x0
