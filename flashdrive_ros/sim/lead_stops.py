"""Drives forked from a seed's drive with a car standing in the ego lane ahead and an ego that
reacts late: at a frame where the ego drives on a clear straight stretch, a car is placed
standing 12-65 m (GAP_M) ahead of its front bumper; the ego keeps its speed a while, then
the expert brakes and stops behind it; the car pulls away once the ego has stood behind it a while.
Each frame's future is the expert's plan from that frame's state with the car standing
through the horizon (sim/disturbed_drive.py forks the world, and a fork's car never pulls
away), so the fork holds the ego closing in at speed on a car standing 10-60 m ahead, with a
steady history and a braking future: what the lead probe (eval/lead_probe.py) asks and the
expert's own drives never show (it slows with its lead and keeps its headway). A fork is the
seed's drive simulated again with that car (the world is built for the drive's full length,
so it is the same world up to the placing), cut so that its first window's camera frames
already show the car, and ending `after_s` after the ego moves on again. With `contrast`,
every frame in which the car stands ahead of an ego still driving also gets what the expert
would do from the same state were the car not there (`Contrast`): the same pictures and
history with another decision and another future, so that only the words tell them apart.
With `moving_twin`, every fork also has a twin placed at the same frame and gap whose car
drives on slowly (`LeadStop.lead_mps`, brake lights off) instead of standing: the expert
follows it, so that standing and slow leads at the same gap and ego speed differ only in how
the gap closes and in the brake lights. With `matched_twin`, every fork also has a twin whose
car drives at nearly the ego's speed (`LeadStop.lead_share`): the expert follows it gently, so
that the same gap and ego speed also come with a lead that closes slowly."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from flashdrive_ros.sim.disturbed_drive import expert_run, keeps_speed, simulate_disturbed
from flashdrive_ros.sim.drive import (
    FRAME_HZ,
    HISTORY_STEPS,
    SIM_HZ,
    SUBSTEPS,
    DriveLog,
    to_frame,
)
from flashdrive_ros.sim.ego_world import EgoWorld
from flashdrive_ros.sim.entities import Vehicle
from flashdrive_ros.sim.expert import ExpertInfo
from flashdrive_ros.sim.labels import STANDING_MPS
from flashdrive_ros.sim.lead_stop_frames import SETTLE_FRAMES, placing_frames
from flashdrive_ros.sim.scenery import random_car
from flashdrive_ros.sim.vehicle import FRONT_OFFSET
from flashdrive_ros.sim.world import EGO_LANE_D

MOVING_ON_MPS = 1.0  # m/s: the ego moves on again once above it after standing
APPROACH_S = 5.0  # s before the placing in which the ego is held to the stop's speed
SLOW_MPS2 = 3.0  # m/s^2: the most the ego brakes to come down to that speed
SPEED_UP_MPS2 = 1.5  # m/s^2: the most it speeds up to keep a speed
SPEED_GAIN = 2.0  # 1/s: speed tracking gain
PATH_AFTER_M = 150.0  # m of lane the placed car drives on after pulling away
GAP_M = (12.0, 65.0)  # m, the range of a placed car's gap to the ego's front bumper
CONTRAST_MIN_MPS = 1.0  # m/s: frames with the ego slower than this get no contrast
MIN_TWIN_MPS = 1.0  # m/s: a moving twin's car drives at least this fast (a slow lead, not a
# standing one, in every label)
TWIN_SPEED_UP_MPS = 1.5  # m/s: a released twin's car speeds up to at least this above its speed


@dataclass(frozen=True)
class LeadStops:
    """per_drive: forks per drive (0: none), placed at distinct frames drawn among those where
    the ego drives at MIN_SPEED_MPS or more on a clear straight stretch; each draws the time
    the ego would take to reach the placed car at its speed from reach_s (the gap kept within
    GAP_M), the most the ego drives in the APPROACH_S before from speed_mps, the longest the
    ego keeps its speed from lag_s, the deceleration whose need ends that earlier from
    decel_mps2, how long the ego stands behind the car before it pulls away from stand_s, and
    the car's speed after from cruise_mps; after_s: frames kept after the ego moves on again (a
    moving twin: after the car speeds up); max_s: the longest a fork runs from the placing.
    contrast: the forks' `Contrast`s; moving_twin: each fork also comes as a twin whose car
    drives at a speed drawn from twin_mps; matched_twin: each fork also comes as a twin whose
    car drives at a share of the ego's speed at the placing drawn from matched_share, and
    whose ego reacts at once (no lag). seeds: the training seeds whose drives are forked, from
    the run's seed offset on (0: the seeds of the run's training drives); forks are cheap next
    to rendered 60 s drives, and the action expert needs many of them to learn where the car
    stands (docs/MODEL.md, "The fork probe")."""

    per_drive: int = 0
    seeds: int = 0
    reach_s: tuple[float, float] = (3.0, 7.0)
    speed_mps: tuple[float, float] = (4.0, 12.0)
    lag_s: tuple[float, float] = (5.0, 12.0)
    decel_mps2: tuple[float, float] = (2.5, 5.0)
    stand_s: tuple[float, float] = (1.0, 4.0)
    cruise_mps: tuple[float, float] = (6.0, 9.0)
    after_s: float = 2.0
    max_s: float = 25.0
    contrast: bool = False
    moving_twin: bool = False
    twin_mps: tuple[float, float] = (1.5, 4.0)
    matched_twin: bool = False
    matched_share: tuple[float, float] = (0.75, 1.0)

    def __post_init__(self) -> None:
        if self.per_drive < 0 or self.seeds < 0:
            raise ValueError(f"LeadStops.per_drive and LeadStops.seeds must be >= 0, got "
                             f"{self.per_drive} and {self.seeds}")
        for name in ("reach_s", "speed_mps", "lag_s", "decel_mps2", "stand_s", "cruise_mps",
                     "twin_mps", "matched_share"):
            low, high = getattr(self, name)
            if not (np.isfinite(high) and 0 < low <= high):
                raise ValueError(f"LeadStops.{name} must be (low, high) with 0 < low <= high, "
                                 f"got {getattr(self, name)}")
        if ((self.contrast or self.moving_twin or self.matched_twin or self.seeds)
                and not self.enabled):
            raise ValueError("LeadStops.contrast, LeadStops.moving_twin, "
                             "LeadStops.matched_twin and LeadStops.seeds need forks: "
                             "per_drive must be > 0")
        if self.matched_share[1] > 1.0:
            raise ValueError(f"LeadStops.matched_share must lie in (0, 1], got "
                             f"{self.matched_share}")
        if self.twin_mps[0] < MIN_TWIN_MPS or self.twin_mps[1] >= self.cruise_mps[0]:
            raise ValueError(f"LeadStops.twin_mps must lie in [{MIN_TWIN_MPS:g}, "
                             f"cruise_mps low), got {self.twin_mps}")
        for name in ("after_s", "max_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"LeadStops.{name} must be a finite number > 0, got {value}")

    @property
    def enabled(self) -> bool:
        return self.per_drive > 0


@dataclass(frozen=True)
class LeadStop:
    """A car of `size` (length, width, height) and `color` placed standing in the ego lane at
    10 Hz frame `frame`, its rear `gap_m(v)` ahead of the ego's front bumper (v: the ego's
    speed then). For APPROACH_S before it the ego drives at most `speed_mps` (slowing at up to
    SLOW_MPS2); from the placing it keeps its speed for at most `lag_s`, ended earlier where
    stopping behind the car would need more than `decel_mps2` to keep `margin_m`; the car pulls
    away (to `cruise_mps`) once the ego has stood behind it for `stand_s`. A moving twin
    (`lead_mps` > 0) places the car driving at `lead_mps` instead (a matched twin, `lead_share`
    > 0: at that share of the ego's speed then), and it speeds up once the ego has come down to
    its speed for `stand_s`."""

    frame: int
    reach_s: float
    speed_mps: float
    lag_s: float
    decel_mps2: float
    stand_s: float
    cruise_mps: float
    size: tuple[float, float, float]
    color: tuple[int, int, int]
    margin_m: float = 2.0
    lead_mps: float = 0.0
    lead_share: float = 0.0

    @property
    def moving(self) -> bool:
        """Whether the placed car drives (a twin) rather than stands."""
        return self.lead_mps > 0.0 or self.lead_share > 0.0

    def placed_mps(self, v: float) -> float:
        """The placed car's speed for an ego at speed v then."""
        return self.lead_share * v if self.lead_share > 0.0 else self.lead_mps

    def caught_up_mps(self, lead_mps: float) -> float:
        """The ego counts as standing behind the car (or as having come down to its speed
        lead_mps) below this speed."""
        return lead_mps + STANDING_MPS

    @property
    def place_step(self) -> int:
        """The 50 Hz step at which the car is placed."""
        return self.frame * SUBSTEPS

    @property
    def approach_step(self) -> int:
        """The 50 Hz step from which the ego is held to `speed_mps`."""
        return self.place_step - int(round(APPROACH_S * SIM_HZ))

    def gap_m(self, v: float) -> float:
        """Front bumper to the car's rear (m) for an ego at speed v: `reach_s` at v, within
        GAP_M."""
        return float(np.clip(v * self.reach_s, *GAP_M))


@dataclass(frozen=True)
class Contrast:
    """What the expert does at a fork's frame from the same state with the placed car taken
    out of the world: `info`, its reasoning then; `future`, float64 [64, 3] (x, y, yaw) of
    its plan at 0.1 s steps in the frame's ego frame."""

    info: ExpertInfo
    future: np.ndarray


@dataclass
class LeadStopRun:
    """A `LeadStop` in one simulation: the placed car (None before its frame), the speed the
    ego keeps through the lag (None once it has ended), how long the ego has stood behind the
    car (a twin: driven at its speed), the car's speed at the placing, the 50 Hz step the car
    was released at (None before); with `contrast`, the copies of the world without the
    standing car kept per 10 Hz frame (`note_frame`)."""

    stop: LeadStop
    contrast: bool = False
    car: Vehicle | None = None
    keep_mps: float | None = None
    caught_up_steps: int = 0
    lead_mps: float = 0.0
    released_step: int | None = None
    without_car: dict[int, EgoWorld] = field(default_factory=dict)

    def note_frame(self, frame: int, sim: EgoWorld, held_lights: tuple[str, ...] | None
                   ) -> None:
        """At 10 Hz frame `frame` of `sim`: with `contrast`, while the car stands and the ego
        drives CONTRAST_MIN_MPS or more, keeps a fork of the world (lights held as
        `held_lights`) with the car taken out."""
        car = self.car
        if (not self.contrast or self.stop.moving or car is None
                or car.brake_until <= sim.t or sim.ego.v < CONTRAST_MIN_MPS):
            return
        fork = sim.fork(held_lights)
        index = next(i for i, veh in enumerate(sim.world.vehicles) if veh is car)
        del fork.world.vehicles[index]
        self.without_car[frame] = fork

    def contrasts(self) -> dict[int, Contrast]:
        """The `Contrast` of every noted frame (the kept forks are driven on and dropped)."""
        made = {}
        for frame, fork in sorted(self.without_car.items()):
            poses, info = expert_run(fork)  # poses: [HORIZON_STEPS + 1, 3]
            made[frame] = Contrast(info, to_frame(poses[0], poses[SUBSTEPS::SUBSTEPS]))
        self.without_car.clear()
        return made

    def update(self, i: int, sim: EgoWorld, route_s: float) -> bool:
        """Advances the stop to 50 Hz step i, base_link at route arc length route_s (placing
        the car at its frame, ending the lag, releasing the car once the ego has stood);
        whether the stop steers the ego or holds the car at this step (its frames' futures
        are then the expert's plan on a fork)."""
        stop = self.stop
        place = stop.place_step
        if i < place:
            return i >= stop.approach_step
        if self.car is None:
            self.car = place_car(sim, route_s, stop)
            self.keep_mps, self.lead_mps = sim.ego.v, self.car.v
        if self.keep_mps is not None and (
                i >= place + int(round(stop.lag_s * SIM_HZ))
                or not keeps_speed(sim, route_s, self.car, stop.decel_mps2, stop.margin_m)):
            self.keep_mps = None
        held = self.car.brake_until > sim.t
        if held:
            caught_up = sim.ego.v < stop.caught_up_mps(self.lead_mps)
            self.caught_up_steps = self.caught_up_steps + 1 if caught_up else 0
            if self.caught_up_steps >= int(round(stop.stand_s * SIM_HZ)):
                self.car.brake_until = sim.t
                self.released_step = i
        return self.keep_mps is not None or held

    def accel(self, i: int, v: float, expert_accel: float) -> float | None:
        """The ego's acceleration at step i and speed v in place of the expert's
        (expert_accel); None where the expert drives."""
        if self.car is None:
            if i < self.stop.approach_step:
                return None
            return min(expert_accel, _track(self.stop.speed_mps, v))
        if self.keep_mps is None:
            return None
        return _track(self.keep_mps, v)


def _track(target_mps: float, v: float) -> float:
    """Acceleration that brings speed v to target_mps (at most SLOW_MPS2 braking)."""
    return float(np.clip(SPEED_GAIN * (target_mps - v), -SLOW_MPS2, SPEED_UP_MPS2))


def place_car(sim: EgoWorld, route_s: float, stop: LeadStop) -> Vehicle:
    """The stop's car, added to the world of `sim` in the ego lane standing (a twin: driving at
    `stop.placed_mps`), its rear `stop.gap_m` of the ego's speed ahead of the ego's
    front bumper (base_link at route arc length route_s); it keeps that speed until its
    `brake_until` is set."""
    route = sim.world.route
    length, width, height = stop.size
    center_s = route_s + FRONT_OFFSET + stop.gap_m(sim.ego.v) + length / 2
    path = route.offset_path(EGO_LANE_D, center_s - length,
                             min(center_s + PATH_AFTER_M, route.length))
    speed = stop.placed_mps(sim.ego.v)
    car = Vehicle("lead", length, width, height, stop.color, path=path,
                  v_cruise=max(stop.cruise_mps, speed + TWIN_SPEED_UP_MPS) if stop.moving
                  else stop.cruise_mps)
    car.s = path.project(route.offset_point(center_s, EGO_LANE_D))[0]
    car.sync_pose()
    car.v = speed
    car.brake, car.brake_until = (car.s, speed, 0.0), float("inf")
    sim.world.vehicles.append(car)
    return car


def seed_lead_stops(seed: int, seconds: float, spec: LeadStops,
                    log: DriveLog | None = None) -> list[LeadStop]:
    """The lead stops drawn for the seed's `seconds` drive (`log`: that drive with the lights
    held, when already simulated): per_drive at placing frames at least max_s apart, fewer
    where the drive has fewer; each followed by its moving twin (`spec.moving_twin`), then by
    its matched twin (`spec.matched_twin`)."""
    if not spec.enabled:
        return []
    rng = np.random.default_rng([seed, 43])
    if log is None:
        log = simulate_disturbed(seed, seconds, None)
    stops: list[LeadStop] = []
    for _ in range(spec.per_drive):
        color, size = random_car(rng)
        drawn = LeadStop(-1, float(rng.uniform(*spec.reach_s)),
                         float(rng.uniform(*spec.speed_mps)), float(rng.uniform(*spec.lag_s)),
                         float(rng.uniform(*spec.decel_mps2)), float(rng.uniform(*spec.stand_s)),
                         float(rng.uniform(*spec.cruise_mps)), tuple(float(x) for x in size),
                         tuple(int(c) for c in color))
        frames = [k for k in placing_frames(log, drawn)
                  if all(abs(k - other.frame) > spec.max_s * FRAME_HZ for other in stops)]
        if frames:
            stops.append(dataclasses.replace(drawn, frame=int(rng.choice(frames))))
    twin_rng = np.random.default_rng([seed, 44])
    matched_rng = np.random.default_rng([seed, 45])
    made = []
    for stop in stops:
        made.append(stop)
        if spec.moving_twin:
            made.append(dataclasses.replace(stop,
                                            lead_mps=float(twin_rng.uniform(*spec.twin_mps))))
        if spec.matched_twin:
            made.append(dataclasses.replace(
                stop, lead_share=float(matched_rng.uniform(*spec.matched_share)), lag_s=0.0))
    return made


def lead_stop_log(seed: int, seconds: float, stop: LeadStop, spec: LeadStops
                  ) -> tuple[DriveLog, dict[int, Contrast]]:
    """The fork of the seed's `seconds` drive with `stop`, cut to its window frames (ending
    `spec.after_s` after the ego moves on from behind the standing car, or after the moving
    twin's car speeds up), and the `Contrast` of its frames by cut frame index (none without
    `spec.contrast` or on a twin)."""
    first = stop.frame + SETTLE_FRAMES - (HISTORY_STEPS - 1)
    end_frame = stop.frame + int(round(spec.max_s * FRAME_HZ))
    run = LeadStopRun(stop, contrast=spec.contrast)
    log = simulate_disturbed(seed, seconds, None, lead_stop=run,
                             end_s=min(end_frame / FRAME_HZ, seconds), futures_from=first)
    last = log.frame_count - 1
    if stop.moving:
        moved_on = None if run.released_step is None else run.released_step // SUBSTEPS
    else:
        moved_on = _moved_on_frame(log, stop.frame + SETTLE_FRAMES)
    if moved_on is not None:
        last = min(last, moved_on + int(round(spec.after_s * FRAME_HZ)))
    contrasts = {frame - first: contrast for frame, contrast in run.contrasts().items()
                 if frame <= last}
    return log.cut(first, last - first + 1), contrasts


def _moved_on_frame(log: DriveLog, start: int) -> int | None:
    """The first frame of `log` from `start` on at which the ego, having stood, drives faster
    than MOVING_ON_MPS again (None where it does not)."""
    speeds = np.array([info.v for info in log.infos[start:log.frame_count]])
    standing = np.flatnonzero(speeds < STANDING_MPS)
    if not standing.size:
        return None
    moving = np.flatnonzero(speeds[standing[0]:] > MOVING_ON_MPS)
    return start + int(standing[0] + moving[0]) if moving.size else None
