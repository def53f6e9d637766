"""Procedural route construction: scenario blocks laid end to end along one road.

The first minute runs the blocks of FIRST_BLOCKS in an order drawn from the seed (so a 60 s
drive holds every scenario type and any of them can come first); later blocks are drawn at
random. Some drives start from standstill and some lead cars stop and go again. Every block
is straight where it has junctions, so side roads and cross roads meet the route at right
angles.
"""

from __future__ import annotations

import numpy as np

from flashdrive_ros.sim.entities import Crosswalk, Intersection, Pedestrian, TrafficLight, Vehicle
from flashdrive_ros.sim.path import Path, integrate_segments, join_paths
from flashdrive_ros.sim.scenery import add_scenery, make_style, random_car
from flashdrive_ros.sim.world import EGO_LANE_D, ONCOMING_LANE_D, ScenarioSpan, World

BLOCK_KINDS = ("cruise", "curve", "turn", "lead", "parked", "red_light", "green_light",
               "pedestrian")
FIRST_BLOCKS = ("lead", "parked", "turn", "red_light", "pedestrian")
STOP_LINE_BACK = 3.5
EGO_STOP_MARGIN = (0.5, 4.5)  # m, front bumper to the line where the expert ego waits
STOP_MARGIN_STREAM = 41
EGO_START_S = 5.0
STANDSTILL_START_SHARE = 0.2
STOP_AND_GO_SHARE = 0.35


class _Builder:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.segments: list[tuple[float, float]] = []
        self.s = 0.0
        self.pending = []
        self.spans: list[ScenarioSpan] = []
        self.intersections: list[Intersection] = []
        self.crosswalks: list[Crosswalk] = []
        self.pedestrians: list[Pedestrian] = []

    def straight(self, length: float) -> None:
        self.segments.append((length, 0.0))
        self.s += length

    def arc(self, radius: float, angle: float) -> None:
        length = radius * abs(angle)
        self.segments.append((length, np.sign(angle) / radius))
        self.s += length

    def block(self, kind: str) -> None:
        getattr(self, f"_{kind}")()

    def _cruise(self) -> None:
        start = self.s
        self.straight(float(self.rng.uniform(30, 60)))
        self.spans.append(ScenarioSpan("keep_lane", start, self.s))

    def _curve(self) -> None:
        self.straight(15.0)
        start = self.s
        angle = np.deg2rad(self.rng.uniform(20, 45)) * self.rng.choice([-1, 1])
        self.arc(float(self.rng.uniform(80, 180)), angle)
        self.spans.append(ScenarioSpan("curve", start, self.s))
        self.straight(15.0)

    def _turn(self) -> None:
        self.straight(15.0)
        start = self.s
        angle = np.deg2rad(self.rng.uniform(75, 95)) * self.rng.choice([-1, 1])
        self.arc(float(self.rng.uniform(26, 38)), angle)
        self.spans.append(ScenarioSpan("turn", start, self.s))
        self.straight(20.0)

    def _lead(self) -> None:
        start = self.s
        j_in, j_out = start + 30.0, start + 115.0
        self.straight(125.0)
        self.intersections += [Intersection(j_in, 4.5, side_only=True),
                               Intersection(j_out, 4.5, side_only=True)]
        v_cruise = float(self.rng.uniform(6.5, 8.5))
        brake_s = float(self.rng.uniform(start + 60, start + 75))
        if self.rng.random() < STOP_AND_GO_SHARE:
            brake = (0.0, float(self.rng.uniform(2.0, 4.0)))
        else:
            brake = (float(self.rng.uniform(1.5, 3.0)), float(self.rng.uniform(0.8, 1.5)))
        color, size = random_car(self.rng)

        def make(route: Path, world: World) -> None:
            radius = 7.0
            _, _, yaw0 = route.pose_at(j_in)
            sx, sy = route.offset_point(j_in + 1.75, EGO_LANE_D - radius - 22.0)
            merge = integrate_segments(float(sx), float(sy), float(yaw0) + np.pi / 2,
                                       [(22.0, 0.0), (radius * np.pi / 2, -1.0 / radius)])
            lane_from, lane_to = j_in + 1.75 + radius, j_out - 1.75 - radius
            lane = route.offset_path(EGO_LANE_D, lane_from, lane_to)
            ex, ey, eyaw = lane.pose_at(lane.length)
            exit_ = integrate_segments(float(ex), float(ey), float(eyaw),
                                       [(radius * np.pi / 2, -1.0 / radius), (35.0, 0.0)])
            path = join_paths([merge.points, lane.points, exit_.points])
            lead = Vehicle("lead", *size, color, path=path, v_cruise=v_cruise, active=False,
                           activate_s=j_in - 160.0, merge_s=merge.length,
                           brake=(path.project(route.offset_point(brake_s, EGO_LANE_D))[0],
                                  *brake))
            world.vehicles.append(lead)

        self.pending.append(make)
        self.spans.append(ScenarioSpan("follow_lead", start, j_out))

    def _parked(self) -> None:
        start = self.s
        self.straight(70.0)
        s_car = start + float(self.rng.uniform(38, 45))
        d_car = -float(self.rng.uniform(3.4, 3.7))
        color, size = random_car(self.rng)

        def make(route: Path, world: World) -> None:
            _, _, yaw = route.pose_at(s_car)
            px, py = route.offset_point(s_car, d_car)
            world.vehicles.append(Vehicle("parked", *size, color, x=float(px), y=float(py),
                                          yaw=float(yaw) + float(self.rng.normal(0, 0.05))))

        self.pending.append(make)
        self.spans.append(ScenarioSpan("nudge_parked", s_car - 35.0, s_car + 8.0))

    def _signal(self, mode: str) -> tuple[float, TrafficLight]:
        start = self.s
        center = start + 70.0
        self.straight(100.0)
        half = 6.0
        stop_s = center - half - STOP_LINE_BACK
        if mode == "stop":
            light = TrafficLight(stop_s, center + half + STOP_LINE_BACK, "stop",
                                 trigger_distance=float(self.rng.uniform(40, 48)),
                                 red_time=float(self.rng.uniform(6.5, 14.0)))
        else:
            light = TrafficLight(stop_s, center + half + STOP_LINE_BACK, "go",
                                 trigger_distance=float(self.rng.uniform(25, 40)))
        self.intersections.append(Intersection(center, half, light))
        self.crosswalks += [Crosswalk(center - half - 1.75), Crosswalk(center + half + 1.75)]
        return center, light

    def _red_light(self) -> None:
        center, light = self._signal("stop")
        self.spans.append(ScenarioSpan("red_light_stop", light.stop_s - 60.0, center))
        crossers = [(1, float(self.rng.uniform(0.5, 1.0)))]
        if self.rng.random() < 0.7:
            crossers.append((-1, float(self.rng.uniform(1.8, 2.5))))
        for direction, delay in crossers:
            color, size = random_car(self.rng)

            def make(route: Path, world: World, direction=direction, delay=delay,
                     color=color, size=size) -> None:
                lane_s = center - 1.75 * direction
                a = np.array(route.offset_point(lane_s, 40.0 * direction))
                b = np.array(route.offset_point(lane_s, -40.0 * direction))
                pts = a + np.linspace(0, 1, 81)[:, None] * (b - a)
                world.vehicles.append(Vehicle("cross", *size, color, path=Path(pts),
                                              v=10.0, v_cruise=10.0, active=False,
                                              cross_light=light, cross_delay=delay))

            self.pending.append(make)

    def _green_light(self) -> None:
        center, light = self._signal("go")
        self.spans.append(ScenarioSpan("green_light_go", light.stop_s - 60.0, center))

    def _pedestrian(self) -> None:
        start = self.s
        self.straight(70.0)
        s_cw = start + 50.0
        self.crosswalks.append(Crosswalk(s_cw))
        side = float(self.rng.choice([-1, 1]))
        trigger = s_cw - float(self.rng.uniform(22, 28)) - (10.0 if side > 0 else 0.0)
        speed = float(self.rng.uniform(1.2, 1.6))
        color = tuple(int(c) for c in self.rng.integers(40, 220, 3))

        def make(route: Path, world: World) -> None:
            a = route.offset_point(s_cw + self.rng.uniform(-0.8, 0.8), side * 7.5)
            b = route.offset_point(s_cw + self.rng.uniform(-0.8, 0.8), -side * 7.5)
            world.pedestrians.append(Pedestrian((float(a[0]), float(a[1])),
                                                (float(b[0]), float(b[1])), speed,
                                                trigger, color))

        self.pending.append(make)
        self.spans.append(ScenarioSpan("pedestrian_yield", s_cw - 45.0, s_cw + 3.0))


def build_world(seed: int, seconds: float, blocks: tuple[str, ...] | None = None) -> World:
    """A deterministic world for a drive of `seconds` (plus the 6.4 s future horizon).

    blocks: the scenario blocks to start with (default FIRST_BLOCKS in a seeded order, then
    random blocks);
    when given, the route continues with plain cruise blocks after them.
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    unknown = [k for k in (blocks or ()) if k not in BLOCK_KINDS]
    if unknown:
        raise ValueError(f"unknown scenario blocks {unknown}; known: {BLOCK_KINDS}")
    rng = np.random.default_rng(seed)
    v_cruise = float(rng.uniform(11.0, 13.0))
    need = EGO_START_S + (seconds + 8.0) * v_cruise + 200.0
    b = _Builder(rng)
    kinds = [str(k) for k in (rng.permutation(FIRST_BLOCKS) if blocks is None else blocks)]
    standstill = rng.random() < STANDSTILL_START_SHARE
    while b.s < need or kinds:
        if kinds:
            kind = kinds.pop(0)
        elif blocks is None:
            kind = str(rng.choice(BLOCK_KINDS))
        else:
            kind = "cruise"
        b.block(kind)
    b.straight(60.0)
    route = integrate_segments(0.0, 0.0, 0.0, b.segments)
    world = World(seed=seed, route=route, style=make_style(rng), ego_start_s=EGO_START_S,
                  ego_start_v=0.0 if standstill else float(rng.uniform(8.0, 10.0)),
                  v_cruise=v_cruise,
                  intersections=b.intersections, crosswalks=b.crosswalks,
                  pedestrians=b.pedestrians, spans=b.spans)
    for make in b.pending:
        make(route, world)
    _add_oncoming(world, rng)
    add_scenery(world, rng)
    _draw_stop_margins(world, np.random.default_rng([seed, STOP_MARGIN_STREAM]))
    return world


def _draw_stop_margins(world: World, rng: np.random.Generator) -> None:
    """Where the expert ego stops short of each signal's line, drawn per light from its own
    stream (the rest of the world is the same as without it)."""
    for light in world.lights():
        light.ego_stop_margin = float(rng.uniform(*EGO_STOP_MARGIN))


def _add_oncoming(world: World, rng: np.random.Generator) -> None:
    route = world.route
    path = route.offset_path(ONCOMING_LANE_D, reverse=True)
    lines = []
    for inter in world.intersections:
        if inter.light is not None:
            line_xy = route.offset_point(inter.light.oncoming_stop_s, ONCOMING_LANE_D)
            lines.append((path.project(line_xy)[0], inter.light))
    s = float(rng.uniform(10, 40))
    while s < path.length - 20.0:
        color, size = random_car(rng)
        v = float(rng.uniform(9.0, 12.5))
        world.vehicles.append(Vehicle("oncoming", *size, color, path=path, s=s, v=v,
                                      v_cruise=v, stop_lines=tuple(lines)))
        s += float(rng.uniform(45, 120))
