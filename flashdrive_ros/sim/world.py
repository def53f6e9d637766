"""The synthetic world's state and the motion of everything except the ego."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from flashdrive_ros.sim.driver import (
    IdmParams,
    Obstacle,
    curve_speed_limit,
    idm_accel,
    pedestrian_blocks,
    stop_line_obstacle,
)
from flashdrive_ros.sim.entities import (
    BRAKE_LIGHT_STANDING_MPS,
    Crosswalk,
    Intersection,
    Pedestrian,
    StaticBox,
    Vehicle,
)
from flashdrive_ros.sim.path import Path
from flashdrive_ros.sim.vehicle import EGO_LENGTH, EGO_WIDTH, EgoState

LANE_WIDTH = 3.5
EGO_LANE_D = -LANE_WIDTH / 2
ONCOMING_LANE_D = LANE_WIDTH / 2
ROAD_HALF_WIDTH = 6.0
SIDEWALK_WIDTH = 3.0
SENSE_RANGE = 70.0
SIDE_ROAD_SPEED = 4.0
ACTIVE_RANGE = 250.0


@dataclass
class Style:
    """Per-drive look: sky, ground and asphalt colours (RGB), sun direction, exposure."""

    sky_top: tuple[int, int, int]
    sky_horizon: tuple[int, int, int]
    ground: tuple[int, int, int]
    asphalt: tuple[int, int, int]
    sidewalk: tuple[int, int, int]
    sun: tuple[float, float, float]
    ambient: float
    exposure: float
    center_line: str


@dataclass
class ScenarioSpan:
    """A scripted scenario occupying route arc lengths [s_start, s_end]."""

    kind: str
    s_start: float
    s_end: float


@dataclass
class World:
    seed: int
    route: Path
    style: Style
    ego_start_s: float
    ego_start_v: float
    v_cruise: float
    intersections: list[Intersection] = field(default_factory=list)
    crosswalks: list[Crosswalk] = field(default_factory=list)
    vehicles: list[Vehicle] = field(default_factory=list)
    pedestrians: list[Pedestrian] = field(default_factory=list)
    statics: list[StaticBox] = field(default_factory=list)
    spans: list[ScenarioSpan] = field(default_factory=list)
    idm: IdmParams = field(default_factory=IdmParams)

    def lights(self):
        return [i.light for i in self.intersections if i.light is not None]

    def step(self, t: float, dt: float, ego: EgoState, ego_front_s: float) -> None:
        """Advance lights, pedestrians and vehicles from t to t + dt.

        Vehicles farther than ACTIVE_RANGE from the ego stand still (nobody sees them), which
        keeps long drives cheap.
        """
        for light in self.lights():
            light.update(t, ego_front_s)
        for ped in self.pedestrians:
            if ped.t_start is None and ego_front_s >= ped.trigger_s:
                ped.t_start = t
            if ped.walking and not ped.held:
                ped.walked = min(ped.walked + ped.speed * dt, ped.route_length)
        for veh in self.vehicles:
            if not veh.active:
                self._maybe_activate(veh, t, ego, ego_front_s)
        boxes = self.agent_boxes(ego)
        centers = np.array([b[:2] for b in boxes])
        near = self.distances_to(ego.x, ego.y) < ACTIVE_RANGE
        moving = [self._moving(veh) and bool(n) for veh, n in zip(self.vehicles, near)]
        accels = [self._vehicle_accel(veh, t, boxes, centers) if m else 0.0
                  for veh, m in zip(self.vehicles, moving)]
        for veh, a, m in zip(self.vehicles, accels, moving):
            if m:
                v_new = max(veh.v + a * dt, 0.0)
                if veh.held:
                    v_new = min(v_new, veh.v) if v_new >= BRAKE_LIGHT_STANDING_MPS else 0.0
                veh.accel = (v_new - veh.v) / dt
                veh.s += 0.5 * (veh.v + v_new) * dt
                veh.v = v_new
                veh.sync_pose()
                if veh.finished:
                    veh.active = False

    def distances_to(self, x: float, y: float) -> np.ndarray:
        """[N_vehicles] distance of every vehicle's centre from (x, y)."""
        xy = np.array([(v.x, v.y) for v in self.vehicles]).reshape(-1, 2)
        return np.hypot(xy[:, 0] - x, xy[:, 1] - y)

    @staticmethod
    def _moving(veh: Vehicle) -> bool:
        return veh.active and veh.kind != "parked"

    def _maybe_activate(self, veh: Vehicle, t: float, ego: EgoState, ego_front_s: float):
        if veh.finished:
            return
        if veh.kind == "cross" and veh.cross_light is not None:
            light = veh.cross_light
            if light.t_trigger is not None and light.mode == "stop":
                red_at = light.t_trigger + light.yellow_time
                if red_at + veh.cross_delay <= t < red_at + light.red_time - 2.0:
                    veh.active = True
            return
        if veh.kind == "lead" and veh.activate_s is not None and ego_front_s >= veh.activate_s:
            junction_s = self.route.project((veh.path.pose_at(veh.merge_s)[:2]))[0]
            eta = (junction_s - ego_front_s) / max(ego.v, 4.0)
            lead_eta = 4.5
            if eta - lead_eta >= veh.merge_s / SIDE_ROAD_SPEED:
                veh.s, veh.v = 0.0, SIDE_ROAD_SPEED
            elif eta >= lead_eta:
                veh.s, veh.v = veh.merge_s - SIDE_ROAD_SPEED * (eta - lead_eta), SIDE_ROAD_SPEED
            else:
                veh.s, veh.v = veh.merge_s + (lead_eta - eta) * max(ego.v, 4.0), veh.v_cruise
            veh.sync_pose()
            veh.active = True

    def agent_boxes(self, ego: EgoState):
        """(x, y, yaw, length, width, v) of every active vehicle and the ego."""
        boxes = [(v.x, v.y, v.yaw, v.length, v.width, v.v) for v in self.vehicles if v.active]
        cx, cy = ego.center
        boxes.append((cx, cy, ego.yaw, EGO_LENGTH, EGO_WIDTH, ego.v))
        return boxes

    def _vehicle_accel(self, veh: Vehicle, t: float, boxes: list, centers: np.ndarray) -> float:
        p, path = self.idm, veh.path
        v_des = curve_speed_limit(path, veh.s, veh.v_cruise, p)
        if veh.kind == "lead" and veh.s < veh.merge_s:
            v_des = min(v_des, max(SIDE_ROAD_SPEED, 0.5 * veh.v_cruise))
        if veh.brake is not None:
            brake_s, v_target, hold = veh.brake
            if veh.brake_until is None and veh.s >= brake_s:
                veh.brake_until = t + max(veh.v - v_target, 0.0) / 2.5 + hold
            if veh.brake_until is not None and t < veh.brake_until:
                v_des = min(v_des, v_target)
        obstacles: list[Obstacle] = []
        rel = centers - (veh.x, veh.y)
        fwd = rel @ (np.cos(veh.yaw), np.sin(veh.yaw))
        near = np.flatnonzero((np.hypot(rel[:, 0], rel[:, 1]) < SENSE_RANGE) & (fwd > -6.0))
        for k in near:
            x, y, _, length, width, speed = boxes[k]
            if (x, y) == (veh.x, veh.y):
                continue
            s_o, d_o = path.project((x, y), hint=veh.s, window=SENSE_RANGE + 10)
            gap = s_o - veh.s - (length + veh.length) / 2
            if s_o > veh.s and abs(d_o) < (width + veh.width) / 2 + 0.3 and gap > -1.0:
                obstacles.append(Obstacle(gap, speed, "vehicle"))
        for ped in self.pedestrians:
            if not ped.walking:
                continue
            pos = ped.position()
            if np.hypot(pos[0] - veh.x, pos[1] - veh.y) > SENSE_RANGE:
                continue
            s_p, d_p = path.project(pos, hint=veh.s, window=SENSE_RANGE + 10)
            _, _, yaw = path.pose_at(s_p)
            vd = float(np.dot(ped.velocity(), [-np.sin(yaw), np.cos(yaw)]))
            if s_p > veh.s and pedestrian_blocks(d_p, vd, 0.0, veh.width / 2):
                obstacles.append(Obstacle(s_p - veh.s - veh.length / 2 - 0.5, 0.0,
                                          "pedestrian"))
        for line_s, light in veh.stop_lines:
            state = light.state(t)
            key = id(light)
            if state == "green":
                veh.committed = veh.committed - {key}
            ob = stop_line_obstacle(line_s - veh.s - veh.length / 2, veh.v, state, p,
                                    key in veh.committed)
            if ob is not None:
                veh.committed = veh.committed | {key}
                obstacles.append(ob)
        accel, _, _ = idm_accel(veh.v, v_des, obstacles, p)
        return accel
