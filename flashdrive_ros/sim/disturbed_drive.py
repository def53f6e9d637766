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
parallel to its lane but off its centre (never towards a parked car being passed; an aimed
drift, sim/lane_forks.py, takes their place over its steps and may). Late
reactions to a braking lead (`lead_lag_share` of the leads' brakings, none by default) keep
the ego at its speed for a while after the lead car ahead starts to brake, so the drive holds
the ego closing in fast on a slow or stopped car and the expert's hard braking. Each 10 Hz
frame's future is the expert's undisturbed plan from that frame's state: the drive as logged
up to the first disturbed step of the frame's horizon, then the expert alone on a copy of the
world forked at that step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

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
from flashdrive_ros.sim.disturbance import (
    AimedDrift,
    ApproachPulse,
    Disturbance,
    StopShortPulse,
    approach_pulses,
    drift_offsets,
    pulse_schedule,
    start_hold_steps,
)
from flashdrive_ros.sim.entities import LightEdit, PendingLightEdits, Vehicle
from flashdrive_ros.sim.expert import ExpertInfo, lane_gap
from flashdrive_ros.sim.labels import STANDING_MPS
from flashdrive_ros.sim.world import EGO_LANE_D, SENSE_RANGE

if TYPE_CHECKING:
    from flashdrive_ros.sim.lead_stops import LeadStopRun

HORIZON_STEPS = FUTURE_STEPS * SUBSTEPS
START_ACCEL = 0.3  # m/s^2: an expert acceleration above it while the ego stands is a start
MOVING_SPEED = 1.0  # m/s: above it, the next standstill's start is drawn afresh
HOLD_BRAKE = 3.0  # m/s^2 offset that keeps a standing ego at rest against the expert's start
STOPPED_MPS = 0.05  # m/s: below it a rest hold keeps the ego standing
HELD_REST_MPS = 0.01  # m/s: below it, braking behind held road users, the ego stands
REST_TOLERANCE_M = 0.05  # m: a rest hold past its point brakes as if this far before it



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


def keeps_speed(sim: EgoWorld, route_s: float, veh: Vehicle, decel_mps2: float,
                margin_m: float) -> bool:
    """Whether the ego of `sim`, base_link at route arc length route_s, may keep its speed
    behind `veh`: it is ahead in the ego lane and stopping behind it at decel_mps2 leaves more
    than margin_m."""
    gap = lead_gap(sim, route_s, veh)
    return gap is not None and sim.ego.v ** 2 / (2.0 * decel_mps2) + margin_m < gap


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
        if not keeps_speed(sim, route_s, self.lead, d.lead_lag_decel_mps2, d.lead_lag_margin_m):
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
                       end_s: float | None = None, futures_from: int = 0,
                       lead_stop: LeadStopRun | None = None,
                       aimed_drift: AimedDrift | None = None) -> DriveLog:
    """Like `drive.simulate`, with the ego disturbed by `pulse_schedule` and
    `approach_pulses` pulses, `drift_offsets` drifts and `StartHolds` (seeded by `seed`; none
    when `disturbance` is None) and `DriveLog.planned` holding each frame's undisturbed
    expert future. With `hold_lights`, that future is the expert's plan from what a frame
    shows: the lights keep the states they have at the frame's time through its horizon (a
    light that turns green 4 s later is red for the whole future of a car waiting at it),
    and at a frame where a pedestrian blocks the ego or the car ahead in its path shows its
    brake lights, the pedestrians stand where they are and the cars with brake lights lit
    never speed up through its horizon (a car waiting for a pedestrian who clears its path
    1 s later, or behind a car that drives off 1 s later, waits through the whole future).
    light_edits and end_s as in `drive.simulate`; brake_holds: (t, seconds) spans in which
    the ego is held at rest against the expert (a driver's reaction time); rest_holds:
    (rest_s, until) of `RestHold`s, each stopping the ego at a route arc length and keeping
    it there until a time; futures_from: the first frame whose future is planned (the
    frames before it, which a caller cuts away, get NaN futures and no expert forks);
    lead_stop: a car placed standing in the ego lane ahead, the ego reacting late
    (sim/lead_stops.py; its `note_frame` sees every frame from `futures_from` on at which
    it steers the ego or holds the car); aimed_drift: a drift that takes the place of
    `drift_offsets` drifts over its steps, towards a parked car being passed too
    (sim/lane_forks.py)."""
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    sim = EgoWorld(seed, seconds, blocks)
    seconds = simulated_seconds(seconds, end_s)
    pending = PendingLightEdits(light_edits)
    n_steps = int(round((seconds + FUTURE_STEPS * FUTURE_DT) * SIM_HZ)) + 1
    frame_count = int(round(seconds * SIM_HZ / SUBSTEPS)) + 1
    offsets = np.zeros((n_steps, 2))  # offsets: [n_steps, 2] (accel, steer) added at a step
    drifts = np.zeros(n_steps)  # drifts: [n_steps] lateral offset the expert steers to
    aimed = np.zeros(n_steps) if aimed_drift is None else aimed_drift.offsets(n_steps)
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
    held = np.zeros(n_steps, dtype=bool)  # held: [n_steps] a frame there holds road users
    rows, scenes, infos, forks, light_changes, road_holds = [], [], [], {}, {}, {}
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
        if aimed[i] != 0.0:
            drifts[i] = aimed[i]
        lagging = lags is not None and lags.active(i, sim, route_s)
        placed = lead_stop is not None and lead_stop.update(i, sim, route_s)
        rest_accel = None
        for rest in rests:
            rest_accel = rest.accel(sim.t, route_s, sim.ego.v)
            if rest_accel is not None:
                break
        marked[i] = (offsets[i].any() or drifts[i] != 0.0 or lagging or placed
                     or rest_accel is not None)
        run_starts = i == 0 or not marked[i - 1]
        on_frame = i % SUBSTEPS == 0 and i < frame_count * SUBSTEPS
        if marked[i] and (run_starts or on_frame) and i >= first_step:
            forks[i] = sim.fork(lights_now)
        if placed and on_frame and i >= first_step:
            lead_stop.note_frame(i // SUBSTEPS, sim, lights_now)
        accel, steer, info = sim.expert_control(float(drifts[i]))
        expert_accel = accel
        held[i] = holds_road_users(info)
        if hold_lights and held[i] and on_frame and i >= first_step:
            road_holds[i] = sim.fork(lights_now, hold_road_users=True)
        if lagging:
            offsets[i, 0] = max(offsets[i, 0], -accel)
        if rest_accel is not None:
            offsets[i, 0] = rest_accel - accel
        if placed:
            stop_accel = lead_stop.accel(i, sim.ego.v, accel)
            if stop_accel is not None:
                offsets[i, 0] = stop_accel - accel
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
    lights_held = {i: expert_poses(fork) for i, fork in light_changes.items()}
    changes = np.array(sorted(lights_held), dtype=np.int64)
    unplanned = np.full((FUTURE_STEPS, 3), np.nan)
    planned = np.stack([_planned_future(k * SUBSTEPS, ego_rows, disturbed, branches,
                                        changes, lights_held) if k >= futures_from
                        else unplanned for k in range(frame_count)])
    for i, fork in road_holds.items():
        if not held[i + 1:i + HORIZON_STEPS + 1].all():
            poses = held_road_user_poses(fork)  # poses: [HORIZON_STEPS + 1, 3]
            planned[i // SUBSTEPS] = to_frame(poses[0], poses[SUBSTEPS::SUBSTEPS])
    return DriveLog(sim.world, float(seconds), ego_rows, scenes, infos, planned=planned)


def expert_poses(sim: EgoWorld, steps: int = HORIZON_STEPS) -> np.ndarray:
    """float64 [steps + 1, 3] (x, y, yaw) of the expert driving `sim` (a fork) on alone."""
    return expert_run(sim, steps)[0]


def holds_road_users(info: ExpertInfo) -> bool:
    """Whether the future of a frame with the expert's reasoning `info` holds the road users
    (`EgoWorld.fork(hold_road_users=True)`): a pedestrian blocks the ego, or the car ahead in
    its path shows its brake lights."""
    return info.ped_gap is not None or info.vehicle_brake_lights


def held_road_user_poses(sim: EgoWorld) -> np.ndarray:
    """`expert_poses` of a fork whose road users are held, to within HELD_REST_MPS * 0.5 m:
    once the ego is below HELD_REST_MPS and braking with every held car standing, what
    stands in its way stays there and keeps it braking through the horizon (close behind a
    standing obstacle the expert brakes at its speed / 0.5 s), so the poses from then on
    are the ego's pose now."""
    held_cars = [veh for veh in sim.world.vehicles if veh.held]
    poses = [(sim.ego.x, sim.ego.y, sim.ego.yaw)]
    while len(poses) <= HORIZON_STEPS:
        accel, steer, _ = sim.expert_control()
        if (sim.ego.v < HELD_REST_MPS and accel <= 0.0
                and all(veh.v == 0.0 for veh in held_cars)):
            poses.extend(poses[-1:] * (HORIZON_STEPS + 1 - len(poses)))
            break
        sim.step(accel, steer)
        poses.append((sim.ego.x, sim.ego.y, sim.ego.yaw))
    return np.asarray(poses, dtype=np.float64)


def expert_run(sim: EgoWorld, steps: int = HORIZON_STEPS) -> tuple[np.ndarray, ExpertInfo]:
    """(`expert_poses`, the expert's reasoning at the first step)."""
    poses = [(sim.ego.x, sim.ego.y, sim.ego.yaw)]
    first = None
    for _ in range(steps):
        accel, steer, info = sim.expert_control()
        if first is None:
            first = info
        sim.step(accel, steer)
        poses.append((sim.ego.x, sim.ego.y, sim.ego.yaw))
    return np.asarray(poses, dtype=np.float64), first


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
