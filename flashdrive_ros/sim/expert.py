"""Rule-based ego driver: IDM longitudinal control, pure-pursuit steering, nudging around
parked cars, stopping for red lights and crossing pedestrians, following slower leads."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.driver import (
    Obstacle,
    curve_speed_limit,
    idm_accel,
    pedestrian_blocks,
    stop_line_obstacle,
)
from flashdrive_ros.sim.path import interp_scalar
from flashdrive_ros.sim.vehicle import EGO_LENGTH, EGO_WIDTH, MAX_STEER, WHEELBASE, EgoState
from flashdrive_ros.sim.world import EGO_LANE_D, SENSE_RANGE, World

NUDGE_CLEARANCE = 0.7
NUDGE_MAX = 1.3
NUDGE_RAMP_IN = 18.0
NUDGE_RAMP_OUT = 10.0
LIGHT_RANGE = 90.0
HOLDS_BACK = 0.3  # m/s^2 an obstacle takes off the free-road acceleration to be the reason


@dataclass(frozen=True)
class ExpertInfo:
    """What the expert saw and why it chose its acceleration at one step.

    reason: free | curve | lead | vehicle | red_light | yellow_light | pedestrian.
    light_state / light_gap: nearest light ahead of the front bumper (None when none in range).
    lead_speed / lead_brake_lights: the binding lead vehicle's speed and whether its brake
    lights are lit (None / False when no lead binds).
    vehicle_gap / vehicle_speed / vehicle_brake_lights: bumper gap to the nearest vehicle in
    the ego's path ahead (within the sensing range, binding or not), its speed and whether its
    brake lights are lit; None / None / False when there is none.
    """

    t: float
    route_s: float
    route_d: float
    front_s: float
    v: float
    v_des: float
    accel: float
    reason: str
    nudge_now: float
    nudge_ahead: float
    light_state: str | None
    light_gap: float | None
    light_green_at: float | None
    lead_speed: float | None
    ped_gap: float | None
    heading_change_ahead: float
    curvature_ahead: float
    oncoming_near: bool
    vehicle_gap: float | None = None
    vehicle_speed: float | None = None
    lead_brake_lights: bool = False
    vehicle_brake_lights: bool = False


def lane_gap(s: float, s_o: float, d_o: float, veh, d_self: float) -> float | None:
    """Bumper gap (m) from an ego with base_link at route arc length s, driving at lateral
    offset d_self, to a vehicle at route (s_o, d_o) ahead in its path; None when the vehicle
    is not in its path ahead."""
    center_s = s + EGO_LENGTH / 2 - 1.0
    gap = s_o - center_s - (veh.length + EGO_LENGTH) / 2
    if s_o > center_s and abs(d_o - d_self) < (veh.width + EGO_WIDTH) / 2 + 0.3 and gap > -1.0:
        return gap
    return None


class Expert:
    def __init__(self, world: World) -> None:
        self.world = world
        route = world.route
        self._grid = np.arange(0.0, route.length + 1.0, 0.5)
        self._nudge = np.zeros_like(self._grid)
        for veh in world.vehicles:
            if veh.kind != "parked":
                continue
            s_c, d_c = route.project((veh.x, veh.y))
            need = d_c + veh.width / 2 + NUDGE_CLEARANCE + EGO_WIDTH / 2 - EGO_LANE_D
            if need <= 0 or d_c > 0:
                continue
            need = min(need, NUDGE_MAX)
            start, end = s_c - veh.length / 2 - 6.0, s_c + veh.length / 2 + 3.0
            ramp = np.clip(np.minimum((self._grid - (start - NUDGE_RAMP_IN)) / NUDGE_RAMP_IN,
                                      ((end + NUDGE_RAMP_OUT) - self._grid) / NUDGE_RAMP_OUT),
                           0.0, 1.0)
            self._nudge = np.maximum(self._nudge, need * ramp)
        self._grid_list, self._nudge_list = self._grid.tolist(), self._nudge.tolist()
        self._committed: set[int] = set()
        self._s = None

    def fork(self, world: World, route_s: float) -> Expert:
        """This expert, with its commitments to lights, for `world`, a copy of its own world
        (lights in the same order), finding the ego on the route from arc length route_s (where
        its base_link is now: the ego may have driven on without this expert)."""
        other = copy.copy(self)
        other.world = world
        other._s = route_s
        lights = {id(old): new for old, new in zip(self.world.lights(), world.lights())}
        other._committed = {id(lights[k]) for k in self._committed if k in lights}
        return other

    def nudge_at(self, s):
        """Nudge (m, left of the lane centre) at route arc length s (scalar or array)."""
        if isinstance(s, (float, int)):
            return interp_scalar(float(s), self._grid_list, self._nudge_list)
        return np.interp(s, self._grid, self._nudge)

    def control(self, t: float, ego: EgoState, lateral_offset: float = 0.0
                ) -> tuple[float, float, ExpertInfo]:
        """(acceleration, steering command, info) for the ego at time t; lateral_offset (m,
        left positive): the steering aims that far beside the lane (and nudge) centre."""
        world, route, p = self.world, self.world.route, self.world.idm
        s, d = route.project((ego.x, ego.y), hint=self._s, window=30.0)
        self._s = s
        front_s = s + ego.front_offset
        v_des = curve_speed_limit(route, s, world.v_cruise, p)
        obstacles: list[Obstacle] = []
        lead_speed, lead_brake_lights, oncoming_near = None, False, False
        near = world.distances_to(ego.x, ego.y) <= SENSE_RANGE
        for k in np.flatnonzero(near):
            veh = world.vehicles[k]
            if not veh.active:
                continue
            s_o, d_o = route.project((veh.x, veh.y), hint=s, window=SENSE_RANGE + 10)
            if veh.kind == "oncoming" and s_o > s - 5 and s_o - s < 40:
                oncoming_near = True
            gap = lane_gap(s, s_o, d_o, veh, EGO_LANE_D + float(self.nudge_at(s_o)))
            if gap is not None:
                obstacles.append(Obstacle(gap, veh.v, "lead" if veh.kind == "lead"
                                          else "vehicle", veh))
        ped_gap = None
        for ped in world.pedestrians:
            if not ped.walking:
                continue
            pos = ped.position()
            if np.hypot(pos[0] - ego.x, pos[1] - ego.y) > SENSE_RANGE:
                continue
            s_p, d_p = route.project(pos, hint=s, window=SENSE_RANGE + 10)
            _, _, yaw = route.pose_at(s_p)
            vd = float(np.dot(ped.velocity(), [-np.sin(yaw), np.cos(yaw)]))
            d_self = EGO_LANE_D + float(self.nudge_at(s_p))
            if s_p > front_s - 0.5 and pedestrian_blocks(d_p, vd, d_self, EGO_WIDTH / 2):
                gap = s_p - front_s - 1.5
                obstacles.append(Obstacle(gap, 0.0, "pedestrian", ped))
                ped_gap = gap if ped_gap is None else min(ped_gap, gap)
        light_state = light_gap = light_green_at = None
        for light in world.lights():
            gap = light.stop_s - front_s
            state = light.ego_state(t)
            if -2.0 <= gap <= LIGHT_RANGE and (light_gap is None or gap < light_gap):
                light_state, light_gap, light_green_at = state, gap, light.ego_green_at()
            if state == "green":
                self._committed.discard(id(light))
            ob = stop_line_obstacle(gap, ego.v, state, p, id(light) in self._committed,
                                    light.ego_stop_margin)
            if ob is not None:
                self._committed.add(id(light))
                obstacles.append(ob)
        vehicles = [ob for ob in obstacles if ob.reason in ("lead", "vehicle")]
        nearest = min(vehicles, key=lambda ob: ob.gap) if vehicles else None
        accel, binding, free = idm_accel(ego.v, v_des, obstacles, p)
        if binding is not None and free - accel > HOLDS_BACK:
            reason = binding.reason
            if reason == "lead":
                lead_speed, lead_brake_lights = binding.ref.v, binding.ref.brake_lights
        elif v_des < world.v_cruise - 0.5 and ego.v > v_des - 1.0:
            reason = "curve"
        else:
            reason = "free"
        steer = self._pure_pursuit(ego, s, lateral_offset)
        _, _, yaw_now = route.pose_at(s)
        _, _, yaw_ahead = route.pose_at(s + max(25.0, 3.0 * ego.v))
        ahead = np.linspace(s, s + 30.0, 16)  # ahead: [16] route arc lengths
        kappa = route.curvature_at(ahead)
        kappa_ahead = float(kappa[np.argmax(np.abs(kappa))])
        info = ExpertInfo(
            t=t, route_s=s, route_d=d, front_s=front_s, v=ego.v, v_des=v_des, accel=accel,
            reason=reason, nudge_now=float(self.nudge_at(s)),
            nudge_ahead=float(self.nudge_at(ahead).max()),
            light_state=light_state, light_gap=light_gap, light_green_at=light_green_at,
            lead_speed=lead_speed, ped_gap=ped_gap,
            heading_change_ahead=float(yaw_ahead - yaw_now), curvature_ahead=kappa_ahead,
            oncoming_near=oncoming_near,
            vehicle_gap=None if nearest is None else float(nearest.gap),
            vehicle_speed=None if nearest is None else float(nearest.speed),
            lead_brake_lights=lead_brake_lights,
            vehicle_brake_lights=nearest is not None and nearest.ref.brake_lights)
        return accel, steer, info

    def _pure_pursuit(self, ego: EgoState, s: float, lateral_offset: float) -> float:
        lookahead = float(min(max(4.0 + 0.6 * ego.v, 5.0), 18.0))
        s_t = s + lookahead
        tx, ty = self.world.route.offset_point(
            s_t, EGO_LANE_D + float(self.nudge_at(s_t)) + lateral_offset)
        dx, dy = tx - ego.x, ty - ego.y
        c, sn = np.cos(ego.yaw), np.sin(ego.yaw)
        lx, ly = c * dx + sn * dy, -sn * dx + c * dy
        dist = max(np.hypot(lx, ly), 1e-3)
        alpha = np.arctan2(ly, lx)
        return float(min(max(np.arctan2(2.0 * WHEELBASE * np.sin(alpha), dist), -MAX_STEER),
                         MAX_STEER))
