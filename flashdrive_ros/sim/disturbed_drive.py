"""A drive whose ego the expert steers with disturbance pulses added to its steering and
acceleration, so that the ego leaves its lane centre and its speed and the expert brings it
back. Besides pulses at random times, each red light, pedestrian crossing and braking lead car
gets one approach pulse: late braking (acceleration added), so the drive holds the ego arriving
too fast or creeping towards a stop that it has not made yet, or closing in on the car ahead;
or, at lights and crossings, an early stop (braking to rest short of the stop and held there a
while), so it holds the ego standing short of the line, through red and green. A start from
standstill (the light turned green, the pedestrian crossed) is held back a while for
`start_hold_share` of the starts, a driver's reaction time, so the drive holds the ego standing
still with nothing left to wait for. Drifts steer the ego over to a
random offset beside its lane centre and hold it there a while, so the drive holds the ego
parallel to its lane but off its centre (never towards a parked car being passed). Late
reactions to a braking lead (`lead_lag_share` of the leads' brakings, none by default) keep
the ego at its speed for a while after the lead car ahead starts to brake, so the drive holds
the ego closing in fast on a slow or stopped car and the expert's hard braking. Each 10 Hz
frame's future is the expert's undisturbed plan from that frame's state: the drive as logged
up to the first disturbed step of the frame's horizon, then the expert alone on a copy of the
world forked at that step."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flashdrive_ros.sim.drive import (
    FUTURE_DT,
    FUTURE_STEPS,
    SIM_HZ,
    SUBSTEPS,
    DriveLog,
    simulated_seconds,
    to_frame,
)
from flashdrive_ros.sim.ego_world import EgoWorld
from flashdrive_ros.sim.entities import LightEdit, PendingLightEdits, Vehicle
from flashdrive_ros.sim.expert import lane_gap
from flashdrive_ros.sim.labels import SCENARIO_TAGS, STANDING_MPS
from flashdrive_ros.sim.world import EGO_LANE_D, SENSE_RANGE

HORIZON_STEPS = FUTURE_STEPS * SUBSTEPS
START_ACCEL = 0.3  # m/s^2: an expert acceleration above it while the ego stands is a start
MOVING_SPEED = 1.0  # m/s: above it, the next standstill's start is drawn afresh
HOLD_BRAKE = 3.0  # m/s^2 offset that keeps a standing ego at rest against the expert's start
STOPPED_MPS = 0.05  # m/s: below it a rest hold keeps the ego standing
REST_TOLERANCE_M = 0.05  # m: a rest hold past its point brakes as if this far before it


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


@dataclass
class StartHolds:
    """Decides once per standstill whether the ego's start is held back: a standstill that a
    pulse already holds counts as decided; moving on at MOVING_SPEED ends it."""

    disturbance: Disturbance
    rng: np.random.Generator
    decided: bool = False

    def steps(self, v: float, expert_accel: float, disturbed: bool) -> int:
        """Steps to hold from now, given the ego's speed, the expert's last acceleration and
        whether a pulse disturbs this step."""
        if v >= MOVING_SPEED:
            self.decided = False
        elif v < STANDING_MPS and not self.decided and (disturbed
                                                        or expert_accel > START_ACCEL):
            self.decided = True
            if not disturbed:
                return start_hold_steps(self.disturbance, self.rng)
        return 0


def lead_gap(sim: EgoWorld, route_s: float, veh: Vehicle) -> float | None:
    """Bumper gap (m) from the ego of `sim`, base_link at route arc length route_s, to `veh`
    when it is ahead in the ego lane within sensing range, else None."""
    if not veh.active or np.hypot(veh.x - sim.ego.x, veh.y - sim.ego.y) > SENSE_RANGE:
        return None
    s_o, d_o = sim.world.route.project((veh.x, veh.y), hint=route_s, window=SENSE_RANGE + 10)
    return lane_gap(route_s, s_o, d_o, veh, EGO_LANE_D)


@dataclass
class LeadLags:
    """Decides once per lead car's braking (its `brake` span starting) whether the ego reacts
    late: for `lead_lag_share` of those that start ahead in the ego lane, the ego keeps its
    speed for a drawn lag, ended early where stopping behind the lead would need more than
    `lead_lag_decel_mps2` to keep `lead_lag_margin_m`."""

    disturbance: Disturbance
    rng: np.random.Generator
    seen: set[int] = field(default_factory=set)
    lead: Vehicle | None = None
    until: int = -1

    def active(self, i: int, sim: EgoWorld, route_s: float) -> bool:
        """Whether the ego reacts late at 50 Hz step i, base_link at route arc length
        route_s."""
        d = self.disturbance
        for veh in sim.world.vehicles:
            if veh.kind != "lead" or veh.brake_until is None or id(veh) in self.seen:
                continue
            self.seen.add(id(veh))
            if self.rng.random() < d.lead_lag_share and lead_gap(sim, route_s, veh) is not None:
                self.lead = veh
                self.until = i + int(round(self.rng.uniform(*d.lead_lag_s) * SIM_HZ))
        if self.lead is None or i >= self.until:
            return False
        gap = lead_gap(sim, route_s, self.lead)
        v = sim.ego.v
        if gap is None or v * v / (2.0 * d.lead_lag_decel_mps2) + d.lead_lag_margin_m >= gap:
            self.lead, self.until = None, -1
            return False
        return True


@dataclass
class RestHold:
    """The ego brought to rest with base_link at route arc length `rest_s` and held there
    until time `until` (s): from where stopping there takes `decel`, it brakes at the
    deceleration that ends there, then stands."""

    rest_s: float
    until: float
    decel: float = 3.0
    acting: bool = False

    def accel(self, t: float, route_s: float, v: float) -> float | None:
        """The ego's acceleration at time t, base_link at route arc length route_s and speed
        v; None where the hold leaves the ego to the expert."""
        if t >= self.until:
            return None
        left = self.rest_s - route_s
        if not self.acting:
            if left > 0.0 and v * v < 2.0 * self.decel * left:
                return None
            self.acting = True
        if v < STOPPED_MPS:
            return -HOLD_BRAKE
        return -v * v / (2.0 * max(left, REST_TOLERANCE_M))


def simulate_disturbed(seed: int, seconds: float, disturbance: Disturbance | None,
                       blocks: tuple[str, ...] | None = None,
                       hold_lights: bool = True, light_edits: tuple[LightEdit, ...] = (),
                       brake_holds: tuple[tuple[float, float], ...] = (),
                       rest_holds: tuple[tuple[float, float], ...] = (),
                       end_s: float | None = None, futures_from: int = 0) -> DriveLog:
    """Like `drive.simulate`, with the ego disturbed by `pulse_schedule` and
    `approach_pulses` pulses, `drift_offsets` drifts and `StartHolds` (seeded by `seed`; none
    when `disturbance` is None) and `DriveLog.planned` holding each frame's undisturbed
    expert future. With `hold_lights`, that future is the expert's plan from what a frame
    shows: the lights keep the states they have at the frame's time through its horizon (a
    light that turns green 4 s later is red for the whole future of a car waiting at it).
    light_edits and end_s as in `drive.simulate`; brake_holds: (t, seconds) spans in which
    the ego is held at rest against the expert (a driver's reaction time); rest_holds:
    (rest_s, until) of `RestHold`s, each stopping the ego at a route arc length and keeping
    it there until a time; futures_from: the first frame whose future is planned (the
    frames before it, which a caller cuts away, get NaN futures and no expert forks)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    sim = EgoWorld(seed, seconds, blocks)
    seconds = simulated_seconds(seconds, end_s)
    pending = PendingLightEdits(light_edits)
    n_steps = int(round((seconds + FUTURE_STEPS * FUTURE_DT) * SIM_HZ)) + 1
    frame_count = int(round(seconds * SIM_HZ / SUBSTEPS)) + 1
    offsets = np.zeros((n_steps, 2))  # offsets: [n_steps, 2] (accel, steer) added at a step
    drifts = np.zeros(n_steps)  # drifts: [n_steps] lateral offset the expert steers to
    approaches: list[ApproachPulse | StopShortPulse] = []
    holds = lags = None
    if disturbance is not None:
        schedule_steps = (frame_count - 1) * SUBSTEPS + HORIZON_STEPS
        pulses = pulse_schedule(disturbance, schedule_steps, np.random.default_rng([seed, 23]))
        for pulse in pulses:
            offsets[pulse.start:pulse.stop] = (pulse.accel, pulse.steer)
        drifts[:schedule_steps] = drift_offsets(disturbance, schedule_steps,
                                                np.random.default_rng([seed, 37]))
        approaches = approach_pulses(disturbance, sim.world.spans,
                                     np.random.default_rng([seed, 29]))
        holds = StartHolds(disturbance, np.random.default_rng([seed, 31]))
        if disturbance.lead_lag_share > 0.0:
            lags = LeadLags(disturbance, np.random.default_rng([seed, 41]))
    for t, hold_s in brake_holds:
        start = int(round(t * SIM_HZ))
        offsets[start:start + int(round(hold_s * SIM_HZ)), 0] = -HOLD_BRAKE
    if not 0 <= futures_from < frame_count:
        raise ValueError(f"futures_from must be a frame in [0, {frame_count}), got "
                         f"{futures_from}")
    first_step = futures_from * SUBSTEPS
    rests = [RestHold(rest_s, until) for rest_s, until in rest_holds]
    marked = np.zeros(n_steps, dtype=bool)  # marked: [n_steps] the step is disturbed
    rows, scenes, infos, forks, light_changes = [], [], [], {}, {}
    expert_accel = 0.0
    lights_now = sim.light_states() if hold_lights else None
    for i in range(n_steps):
        if pending.apply_due(sim.t, sim.world.lights()) and hold_lights:
            lights_before, lights_now = lights_now, sim.light_states()
            if i > first_step and lights_now != lights_before:
                light_changes[i] = sim.fork(lights_before)
        route_s = sim.route_position()[0]
        while approaches and approaches[0].due(route_s, sim.ego.v):
            steps, accel = approaches.pop(0).run(sim.ego.v)
            offsets[i:i + steps, 0] = accel
        if holds is not None:
            hold = holds.steps(sim.ego.v, expert_accel, bool(offsets[i].any()))
            offsets[i:i + hold, 0] = -HOLD_BRAKE
        if drifts[i] < 0.0 and sim.expert.nudge_at(route_s) > 0.0:
            drifts[i] = 0.0
        lagging = lags is not None and lags.active(i, sim, route_s)
        rest_accel = None
        for rest in rests:
            rest_accel = rest.accel(sim.t, route_s, sim.ego.v)
            if rest_accel is not None:
                break
        marked[i] = offsets[i].any() or drifts[i] != 0.0 or lagging or rest_accel is not None
        run_starts = i == 0 or not marked[i - 1]
        on_frame = i % SUBSTEPS == 0 and i < frame_count * SUBSTEPS
        if marked[i] and (run_starts or on_frame) and i >= first_step:
            forks[i] = sim.fork(lights_now)
        accel, steer, info = sim.expert_control(float(drifts[i]))
        expert_accel = accel
        if lagging:
            offsets[i, 0] = max(offsets[i, 0], -accel)
        if rest_accel is not None:
            offsets[i, 0] = rest_accel - accel
        if i % SUBSTEPS == 0:
            scenes.append(sim.snapshot())
            infos.append(info)
        ego = sim.ego
        rows.append((sim.t, ego.x, ego.y, ego.yaw, ego.v, ego.yaw_rate, ego.accel))
        sim.step(accel + offsets[i, 0], steer + offsets[i, 1])
        if hold_lights:
            lights_before, lights_now = lights_now, sim.light_states()
            if first_step < i + 1 < n_steps and lights_now != lights_before:
                light_changes[i + 1] = sim.fork(lights_before)
    disturbed = np.flatnonzero(marked)
    ego_rows = np.asarray(rows, dtype=np.float64)
    branches = {i: expert_poses(fork) for i, fork in forks.items()}
    held = {i: expert_poses(fork) for i, fork in light_changes.items()}
    changes = np.array(sorted(held), dtype=np.int64)
    unplanned = np.full((FUTURE_STEPS, 3), np.nan)
    planned = np.stack([_planned_future(k * SUBSTEPS, ego_rows, disturbed, branches,
                                        changes, held) if k >= futures_from else unplanned
                        for k in range(frame_count)])
    return DriveLog(sim.world, float(seconds), ego_rows, scenes, infos, planned=planned)


def expert_poses(sim: EgoWorld, steps: int = HORIZON_STEPS) -> np.ndarray:
    """float64 [steps + 1, 3] (x, y, yaw) of the expert driving `sim` (a fork) on alone."""
    poses = [(sim.ego.x, sim.ego.y, sim.ego.yaw)]
    for _ in range(steps):
        accel, steer, _ = sim.expert_control()
        sim.step(accel, steer)
        poses.append((sim.ego.x, sim.ego.y, sim.ego.yaw))
    return np.asarray(poses, dtype=np.float64)


def _planned_future(i0: int, ego_rows: np.ndarray, disturbed: np.ndarray,
                    branches: dict[int, np.ndarray], changes: np.ndarray,
                    held: dict[int, np.ndarray]) -> np.ndarray:
    """float64 [FUTURE_STEPS, 3] of the frame at step i0: logged poses up to the first
    disturbed step or light change of its horizon, from there the fork's (the expert on
    undisturbed, with the lights as they were before the change)."""
    poses = ego_rows[i0:i0 + HORIZON_STEPS + 1, 1:4].copy()  # poses: [HORIZON_STEPS + 1, 3]
    ahead = disturbed[(disturbed >= i0) & (disturbed < i0 + HORIZON_STEPS)]
    change = changes[(changes > i0) & (changes <= i0 + HORIZON_STEPS)]
    if change.size and (not ahead.size or change[0] <= ahead[0]):
        first, fork_poses = int(change[0]), held[int(change[0])]
    elif ahead.size:
        first, fork_poses = int(ahead[0]), branches[int(ahead[0])]
    else:
        return to_frame(poses[0], poses[SUBSTEPS::SUBSTEPS])
    poses[first - i0:] = fork_poses[:HORIZON_STEPS + 1 - (first - i0)]
    return to_frame(poses[0], poses[SUBSTEPS::SUBSTEPS])
