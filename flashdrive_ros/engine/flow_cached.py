"""Cached-velocity Euler sampling for flow matching (FlashDrive adaptive-step flow).

The velocity field is sharp near t = 0 and t = 1 and nearly constant in between, so on the
middle steps the velocity of the previous step is reused instead of calling the network.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flashdrive_ros.model.flow import VelocityFn, time_grid


@dataclass(frozen=True)
class FlowSchedule:
    """Euler on t in [0, 1] with `num_steps` equal steps; steps in `reuse_steps` (1-based)
    take the previous step's velocity instead of evaluating the network."""

    num_steps: int = 8
    reuse_steps: tuple[int, ...] = (3, 4, 5, 6)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reuse_steps", tuple(sorted(set(self.reuse_steps))))
        if self.num_steps < 1:
            raise ValueError(f"flow num_steps must be >= 1, got {self.num_steps}")
        bad = [s for s in self.reuse_steps if not 2 <= s <= self.num_steps]
        if bad:
            raise ValueError(f"reuse_steps {bad} outside [2, {self.num_steps}]: step 1 has no "
                             f"previous velocity to reuse")

    @classmethod
    def plain(cls, num_steps: int) -> FlowSchedule:
        return cls(num_steps=num_steps, reuse_steps=())

    @property
    def fresh_steps(self) -> tuple[int, ...]:
        return tuple(s for s in range(1, self.num_steps + 1) if s not in self.reuse_steps)

    @property
    def num_velocity_calls(self) -> int:
        return self.num_steps - len(self.reuse_steps)

    def times(self) -> list[float]:
        """num_steps + 1 uniform times from 0 to 1 (model/flow.py's grid); step i (1-based)
        runs from times[i - 1] to times[i]."""
        return time_grid(self.num_steps).tolist()


def euler_cached(velocity_fn: VelocityFn, x0: torch.Tensor,
                 schedule: FlowSchedule) -> torch.Tensor:
    """Integrate dx/dt = v(x, t) from t = 0 to 1.

    x0: [K, ...] noise, K samples integrated together; velocity_fn(x [K, ...], t [K]) ->
    [K, ...]. Returns x at t = 1, same shape as x0.
    """
    reuse_steps = set(schedule.reuse_steps)
    times = schedule.times()
    x = x0
    velocity = None
    for step in range(1, schedule.num_steps + 1):
        t0, t1 = times[step - 1], times[step]
        if step not in reuse_steps:
            t_batch = torch.full((x.shape[0],), t0, dtype=x.dtype, device=x.device)  # [K]
            velocity = velocity_fn(x, t_batch)
            if velocity.shape != x.shape:
                raise ValueError(f"velocity_fn returned {tuple(velocity.shape)} for x of "
                                 f"shape {tuple(x.shape)}")
        x = x + (t1 - t0) * velocity
    return x
