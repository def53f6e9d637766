"""A world whose ego is driven from outside: the same world, start and 50 Hz stepping as
`drive.simulate`, but each step takes an (acceleration, steering) command for the ego. The
other road users react to the ego where they do in an open-loop drive (lights and pedestrians
trigger on its front bumper, leads merge by its speed, every vehicle's IDM sees its box)."""

from __future__ import annotations

import copy

from flashdrive_ros.sim.drive import SIM_HZ, SceneSnapshot, _snapshot
from flashdrive_ros.sim.expert import Expert, ExpertInfo
from flashdrive_ros.sim.scenarios import build_world
from flashdrive_ros.sim.vehicle import EgoState, step_bicycle
from flashdrive_ros.sim.world import EGO_LANE_D

ROUTE_SEARCH_WINDOW = 30.0


class EgoWorld:
    """`step(accel, steer)` advances the world and the ego by 1 / SIM_HZ from time `t`."""

    def __init__(self, seed: int, seconds: float, blocks: tuple[str, ...] | None = None) -> None:
        self.world = build_world(seed, seconds, blocks)
        self.expert = Expert(self.world)
        route = self.world.route
        _, _, yaw = route.pose_at(self.world.ego_start_s)
        x, y = route.offset_point(self.world.ego_start_s, EGO_LANE_D)
        self.ego = EgoState(float(x), float(y), float(yaw), self.world.ego_start_v)
        self.dt = 1.0 / SIM_HZ
        self.steps = 0
        self._route_s = self.world.ego_start_s

    @property
    def t(self) -> float:
        return self.steps * self.dt

    def route_position(self) -> tuple[float, float]:
        """(s, d) of base_link on the route (d: left of the route centre line positive)."""
        s, d = self.world.route.project((self.ego.x, self.ego.y), hint=self._route_s,
                                        window=ROUTE_SEARCH_WINDOW)
        self._route_s = s
        return s, d

    def front_s(self) -> float:
        return self.route_position()[0] + self.ego.front_offset

    def expert_control(self, lateral_offset: float = 0.0) -> tuple[float, float, ExpertInfo]:
        """The rule-based expert's command for the ego now (steering aimed `lateral_offset`
        m beside its lane centre, left positive)."""
        return self.expert.control(self.t, self.ego, lateral_offset)

    def snapshot(self) -> SceneSnapshot:
        return _snapshot(self.world, self.t, self.ego, self.route_position()[0])

    def light_states(self) -> tuple[str, ...]:
        """What each of the world's lights shows the ego now."""
        return tuple(light.ego_state(self.t) for light in self.world.lights())

    def fork(self, held_lights: tuple[str, ...] | None = None,
             hold_road_users: bool = False) -> EgoWorld:
        """An independent copy of the world and the ego now (route, scenery and vehicle paths
        shared, being read-only) with a copy of the expert; held_lights: the copy's lights
        show these states (one per light) from now on; hold_road_users: from now on the
        copy's pedestrians stand where they are and its driving cars with brake lights lit
        never speed up."""
        world = self.world
        shared = [world.route, world.statics, world.style,
                  *(v.path for v in world.vehicles if v.path is not None)]
        memo = {id(obj): obj for obj in shared}
        other = copy.copy(self)
        other.world = copy.deepcopy(world, memo)
        other.expert = self.expert.fork(other.world, self.route_position()[0])
        if held_lights is not None:
            lights = other.world.lights()
            if len(held_lights) != len(lights):
                raise ValueError(f"{len(held_lights)} held states for {len(lights)} lights")
            for light, state in zip(lights, held_lights):
                light.held = state
        if hold_road_users:
            for ped in other.world.pedestrians:
                ped.held = True
            for veh in other.world.vehicles:
                veh.held = veh.active and veh.brake_lights
        return other

    def step(self, accel: float, steer: float) -> None:
        self.world.step(self.t, self.dt, self.ego, self.front_s())
        self.ego = step_bicycle(self.ego, accel, steer, self.dt)
        self.steps += 1
