"""Looks and decoration: lighting styles, car sizes and colours, buildings, trees, parked cars."""

from __future__ import annotations

import numpy as np

from flashdrive_ros.sim.entities import Pedestrian, StaticBox, Vehicle
from flashdrive_ros.sim.world import ROAD_HALF_WIDTH, SIDEWALK_WIDTH, Style, World

_SKIES = (
    ((70, 120, 200), (175, 205, 235), 1.0),
    ((120, 125, 135), (185, 188, 192), 0.8),
    ((60, 80, 140), (235, 170, 120), 0.75),
)
_CAR_COLORS = ((200, 200, 205), (30, 30, 35), (150, 20, 25), (20, 50, 120), (110, 115, 120),
               (235, 235, 230), (40, 90, 60), (190, 150, 40))
_CAR_SIZES = ((4.5, 1.85, 1.45), (4.9, 1.95, 1.75), (5.2, 2.0, 1.95), (4.1, 1.75, 1.5))
_TRUCK_SIZE = (8.5, 2.45, 3.2)


def make_style(rng: np.random.Generator) -> Style:
    top, horizon, exposure = _SKIES[int(rng.integers(len(_SKIES)))]
    jitter = rng.uniform(0.9, 1.1)
    azimuth = rng.uniform(-np.pi, np.pi)
    elevation = rng.uniform(0.3, 1.1)
    sun = (float(np.cos(elevation) * np.cos(azimuth)), float(np.cos(elevation) *
                                                              np.sin(azimuth)),
           float(np.sin(elevation)))
    grass = (int(rng.integers(70, 110)), int(rng.integers(100, 130)), int(rng.integers(55, 80)))
    gray = int(rng.integers(75, 100))
    return Style(sky_top=top, sky_horizon=horizon, ground=grass,
                 asphalt=(gray, gray, gray + 4), sidewalk=(165, 162, 155), sun=sun,
                 ambient=float(rng.uniform(0.45, 0.6)), exposure=float(exposure * jitter),
                 center_line=str(rng.choice(["double_yellow", "dashed_white"])))


def random_car(rng: np.random.Generator):
    """(colour, (length, width, height)) of a random car; now and then a truck."""
    color = _CAR_COLORS[int(rng.integers(len(_CAR_COLORS)))]
    size = _TRUCK_SIZE if rng.random() < 0.08 else _CAR_SIZES[int(rng.integers(len(_CAR_SIZES)))]
    return color, size


def _clear_of(s: float, blocked: list[tuple[float, float]]) -> bool:
    return all(not (a <= s <= b) for a, b in blocked)


def add_scenery(world: World, rng: np.random.Generator) -> None:
    """Buildings, trees and parked cars beside the road, clear of junctions and crossings."""
    route = world.route
    blocked = [(i.s - i.half_width - 9.0, i.s + i.half_width + 9.0) for i in world.intersections]
    blocked += [(c.s - 5.0, c.s + 5.0) for c in world.crosswalks]
    park_blocked = blocked + [(sp.s_start - 10.0, sp.s_end + 10.0) for sp in world.spans
                              if sp.kind in ("nudge_parked", "follow_lead", "red_light_stop",
                                             "green_light_go", "pedestrian_yield")]
    samples = route.points[::4]
    for side in (-1.0, 1.0):
        s = float(rng.uniform(0, 10))
        while s < route.length:
            length = float(rng.uniform(10, 24))
            depth = float(rng.uniform(8, 16))
            d = side * (ROAD_HALF_WIDTH + SIDEWALK_WIDTH + rng.uniform(2.5, 8.0) + depth / 2)
            mid = s + length / 2
            if _clear_of(mid, [(a - length, b + length) for a, b in blocked]):
                _, _, yaw = route.pose_at(mid)
                cx, cy = route.offset_point(mid, d)
                corners = _corners(float(cx), float(cy), float(yaw), length, depth)
                dist = np.min(np.linalg.norm(samples[None] - corners[:, None], axis=2))
                if dist > ROAD_HALF_WIDTH + SIDEWALK_WIDTH + 1.0:
                    shade = int(rng.integers(110, 210))
                    tint = rng.integers(-25, 25, 3)
                    color = tuple(int(np.clip(shade + t, 0, 255)) for t in tint)
                    world.statics.append(StaticBox(float(cx), float(cy), float(yaw), length,
                                                   depth, float(rng.uniform(6, 22)), color))
            s += length + float(rng.uniform(2, 12))
        s = float(rng.uniform(0, 10))
        while s < route.length:
            if _clear_of(s, blocked):
                tx, ty = route.offset_point(s, side * (ROAD_HALF_WIDTH + 1.6))
                _, _, yaw = route.pose_at(s)
                crown = float(rng.uniform(1.8, 3.0))
                world.statics.append(StaticBox(float(tx), float(ty), float(yaw), 0.35, 0.35,
                                               2.4, (90, 65, 40)))
                green = (int(rng.integers(30, 70)), int(rng.integers(90, 140)),
                         int(rng.integers(30, 60)))
                world.statics.append(StaticBox(float(tx), float(ty), float(yaw), crown, crown,
                                               crown * 1.1, green, z0=2.0))
            s += float(rng.uniform(12, 28))
        s = float(rng.uniform(10, 40))
        while s < route.length:
            if _clear_of(s, [(a - 6, b + 6) for a, b in park_blocked]) and rng.random() < 0.5:
                color, size = random_car(rng)
                px, py = route.offset_point(s, side * 4.8)
                _, _, yaw = route.pose_at(s)
                world.vehicles.append(Vehicle("parked", *size, color, x=float(px), y=float(py),
                                              yaw=float(yaw) + (0.0 if side < 0 else np.pi)))
            s += float(rng.uniform(15, 45))
    _add_walkers(world, rng, blocked)


def _add_walkers(world: World, rng: np.random.Generator, blocked: list) -> None:
    """Pedestrians strolling along straight stretches of sidewalk (they never cross)."""
    route = world.route
    s = float(rng.uniform(20, 60))
    while s < route.length - 60.0:
        length = float(rng.uniform(25, 45))
        straight = abs(route.pose_at(s + length)[2] - route.pose_at(s)[2]) < 0.01
        clear = all(_clear_of(x, blocked) for x in np.linspace(s, s + length, 8))
        if straight and clear and rng.random() < 0.6:
            d = float(rng.choice([-1.0, 1.0])) * (ROAD_HALF_WIDTH + 0.9)
            ends = [route.offset_point(s, d), route.offset_point(s + length, d)]
            if rng.random() < 0.5:
                ends.reverse()
            (ax, ay), (bx, by) = ends
            color = tuple(int(c) for c in rng.integers(40, 220, 3))
            world.pedestrians.append(Pedestrian((float(ax), float(ay)), (float(bx), float(by)),
                                                float(rng.uniform(1.0, 1.5)), s - 120.0, color))
        s += length + float(rng.uniform(40, 120))


def _corners(cx: float, cy: float, yaw: float, length: float, width: float) -> np.ndarray:
    c, s = np.cos(yaw), np.sin(yaw)
    local = np.array([[1, 1], [1, -1], [-1, -1], [-1, 1]]) * [length / 2, width / 2]
    return np.stack([cx + c * local[:, 0] - s * local[:, 1],
                     cy + s * local[:, 0] + c * local[:, 1]], axis=1)
