"""The disturbance of a disturbed drive (sim/disturbed_drive.py): its settings, and the
pulses, drifts, approach pulses and start holds drawn from them per seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.drive import SIM_HZ
from flashdrive_ros.sim.labels import SCENARIO_TAGS


@dataclass(frozen=True)
class Disturbance:
    gap_s: tuple[float, float] = (5.0, 12.0)  # time from one pulse's start to the next's
    duration_s: tuple[float, float] = (0.4, 1.2)  # pulse length
    steer_rad: float = 0.2  # largest |steering offset| of a pulse
    accel_mps2: float = 2.0  # largest |acceleration offset| of a pulse
    first_s: float = 2.0  # earliest start of the first pulse
    approach_kinds: tuple[str, ...] = ("red_light_stop", "pedestrian_yield", "follow_lead")
    stop_short_kinds: tuple[str, ...] = ("red_light_stop", "pedestrian_yield")  # early stops
    approach_before_m: tuple[float, float] = (10.0, 40.0)  # pulse start before the span's end
    lead_approach_before_m: tuple[float, float] = (45.0, 75.0)  # the same for follow_lead
    approach_duration_s: tuple[float, float] = (1.0, 2.5)
    approach_accel_mps2: tuple[float, float] = (0.8, 2.0)
    stop_short_share: float = 0.5  # share of approach pulses that are early stops
    stop_short_before_m: tuple[float, float] = (16.0, 40.0)  # base_link rest before span end
    stop_short_hold_s: tuple[float, float] = (0.5, 4.0)  # standstill held after the stop
    stop_short_decel_mps2: float = 3.0
    start_hold_share: float = 0.7  # share of starts from standstill held back
    start_hold_s: tuple[float, float] = (0.5, 4.0)  # how long a start is held back
    drift_first_s: float = 2.0  # earliest start of the first drift
    drift_gap_s: tuple[float, float] = (12.0, 26.0)  # time from one drift's start to the next's
    drift_offset_m: tuple[float, float] = (0.4, 1.6)  # |offset| from the lane centre
    drift_ramp_s: tuple[float, float] = (1.5, 3.0)  # time to move over to the offset
    drift_hold_s: tuple[float, float] = (1.0, 4.0)  # time the offset is held
    lead_lag_share: float = 0.0  # share of lead brakings the ego reacts to late
    lead_lag_s: tuple[float, float] = (2.0, 6.0)  # longest the ego keeps its speed
    lead_lag_decel_mps2: float = 4.5  # a lag ends where stopping behind the lead needs this
    lead_lag_margin_m: float = 2.0  # bumper gap left when stopping at lead_lag_decel_mps2

    def __post_init__(self) -> None:
        for name in ("gap_s", "duration_s", "approach_before_m", "lead_approach_before_m",
                     "approach_duration_s",
                     "approach_accel_mps2", "stop_short_before_m", "stop_short_hold_s",
                     "start_hold_s", "drift_gap_s", "drift_offset_m", "drift_ramp_s",
                     "drift_hold_s", "lead_lag_s"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"{name} must be (low, high) with 0 < low <= high, got "
                                 f"{getattr(self, name)}")
        if self.duration_s[1] >= self.gap_s[0]:
            raise ValueError(f"pulses must not overlap: duration_s {self.duration_s} against "
                             f"gap_s {self.gap_s}")
        if self.drift_ramp_s[1] + self.drift_hold_s[1] >= self.drift_gap_s[0]:
            raise ValueError(f"drifts must not overlap: drift_ramp_s {self.drift_ramp_s} and "
                             f"drift_hold_s {self.drift_hold_s} against drift_gap_s "
                             f"{self.drift_gap_s}")
        for name in ("approach_kinds", "stop_short_kinds"):
            unknown = set(getattr(self, name)) - set(SCENARIO_TAGS)
            if unknown:
                raise ValueError(f"{name} {sorted(unknown)} are not scenario kinds "
                                 f"{SCENARIO_TAGS}")
        if min(self.steer_rad, self.accel_mps2, self.first_s, self.drift_first_s) < 0:
            raise ValueError("steer_rad, accel_mps2, first_s and drift_first_s must be >= 0")
        for name in ("stop_short_share", "start_hold_share", "lead_lag_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("stop_short_decel_mps2", "lead_lag_decel_mps2"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.lead_lag_margin_m < 0:
            raise ValueError(f"lead_lag_margin_m must be >= 0, got {self.lead_lag_margin_m}")


@dataclass(frozen=True)
class ApproachPulse:
    """A late-braking pulse that starts when base_link passes route arc length `start_s`."""

    start_s: float
    steps: int
    accel: float

    def due(self, s: float, v: float) -> bool:
        return s >= self.start_s

    def run(self, v: float) -> tuple[int, float]:
        """(steps, acceleration offset) of the pulse started at speed v."""
        return self.steps, self.accel


@dataclass(frozen=True)
class StopShortPulse:
    """An early stop: braking by `decel` from where that brings base_link to rest at route arc
    length `rest_s`, then `hold_steps` of standstill."""

    rest_s: float
    hold_steps: int
    decel: float

    def due(self, s: float, v: float) -> bool:
        return s + v * v / (2.0 * self.decel) >= self.rest_s

    def run(self, v: float) -> tuple[int, float]:
        return int(np.ceil(v / self.decel * SIM_HZ)) + self.hold_steps, -self.decel


@dataclass(frozen=True)
class Pulse:
    start: int  # first disturbed 50 Hz step
    stop: int  # first step after the pulse
    steer: float
    accel: float


@dataclass(frozen=True)
class AimedDrift:
    """A drift over to `offset_m` (m, left positive) from 50 Hz step `start`: a linear ramp of
    `ramp_steps`, then `hold_steps` at the offset. Unlike `drift_offsets` drifts it may steer
    towards a parked car being passed (sim/lane_forks.py keeps it clear)."""

    start: int
    ramp_steps: int
    hold_steps: int
    offset_m: float

    def __post_init__(self) -> None:
        if self.start < 0 or self.ramp_steps < 1 or self.hold_steps < 0:
            raise ValueError(f"AimedDrift needs start >= 0, ramp_steps >= 1, hold_steps >= 0, "
                             f"got {self.start}, {self.ramp_steps}, {self.hold_steps}")

    @property
    def stop(self) -> int:
        """The first step after the drift."""
        return self.start + self.ramp_steps + self.hold_steps

    def offsets(self, steps: int) -> np.ndarray:
        """[steps] the drift's lateral offset at each 50 Hz step (0 outside it)."""
        out = np.zeros(steps)
        ramp = self.offset_m * np.arange(1, self.ramp_steps + 1) / self.ramp_steps
        out[self.start:self.start + self.ramp_steps] = ramp[:max(steps - self.start, 0)]
        out[self.start + self.ramp_steps:self.stop] = self.offset_m
        return out


def pulse_schedule(disturbance: Disturbance, steps: int, rng: np.random.Generator
                   ) -> list[Pulse]:
    """Pulses over `steps` 50 Hz steps, each with a random sign and size of steering and
    acceleration offset."""
    pulses = []
    t = disturbance.first_s + rng.uniform(0.0, disturbance.gap_s[0])
    while True:
        start = int(round(t * SIM_HZ))
        stop = start + max(1, int(round(rng.uniform(*disturbance.duration_s) * SIM_HZ)))
        if stop > steps:
            return pulses
        pulses.append(Pulse(start, stop,
                            float(rng.uniform(-1.0, 1.0) * disturbance.steer_rad),
                            float(rng.uniform(-1.0, 1.0) * disturbance.accel_mps2)))
        t += rng.uniform(*disturbance.gap_s)


def drift_offsets(disturbance: Disturbance, steps: int, rng: np.random.Generator
                  ) -> np.ndarray:
    """[steps] lateral offset (m, left positive) the expert steers to at each 50 Hz step:
    drifts of a random side and size, each a linear ramp to its offset and a hold there."""
    offsets = np.zeros(steps)
    t = disturbance.drift_first_s + rng.uniform(0.0, disturbance.drift_gap_s[0])
    while True:
        start = int(round(t * SIM_HZ))
        ramp = max(1, int(round(rng.uniform(*disturbance.drift_ramp_s) * SIM_HZ)))
        hold = int(round(rng.uniform(*disturbance.drift_hold_s) * SIM_HZ))
        if start + ramp + hold > steps:
            return offsets
        size = float(rng.choice((-1.0, 1.0)) * rng.uniform(*disturbance.drift_offset_m))
        offsets[start:start + ramp] = size * np.arange(1, ramp + 1) / ramp
        offsets[start + ramp:start + ramp + hold] = size
        t += rng.uniform(*disturbance.drift_gap_s)


def approach_pulses(disturbance: Disturbance, spans, rng: np.random.Generator
                    ) -> list[ApproachPulse | StopShortPulse]:
    """One pulse per scenario span of an `approach_kinds` kind, in route order: an early stop
    for `stop_short_share` of those of a `stop_short_kinds` kind, late braking for the rest."""
    pulses: list[ApproachPulse | StopShortPulse] = []
    for span in sorted(spans, key=lambda sp: sp.s_end):
        if span.kind not in disturbance.approach_kinds:
            continue
        if span.kind in disturbance.stop_short_kinds and (
                rng.random() < disturbance.stop_short_share):
            pulses.append(StopShortPulse(
                span.s_end - float(rng.uniform(*disturbance.stop_short_before_m)),
                int(round(rng.uniform(*disturbance.stop_short_hold_s) * SIM_HZ)),
                disturbance.stop_short_decel_mps2))
            continue
        before = (disturbance.lead_approach_before_m if span.kind == "follow_lead"
                  else disturbance.approach_before_m)
        pulses.append(ApproachPulse(
            span.s_end - float(rng.uniform(*before)),
            max(1, int(round(rng.uniform(*disturbance.approach_duration_s) * SIM_HZ))),
            float(rng.uniform(*disturbance.approach_accel_mps2))))
    return pulses


def start_hold_steps(disturbance: Disturbance, rng: np.random.Generator) -> int:
    """50 Hz steps by which a start from standstill is held back: 0 for the starts outside
    `start_hold_share`."""
    if rng.random() >= disturbance.start_hold_share:
        return 0
    return int(round(rng.uniform(*disturbance.start_hold_s) * SIM_HZ))
