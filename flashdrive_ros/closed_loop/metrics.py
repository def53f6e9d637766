"""Ground truth of a closed-loop drive, read from the world at every simulator step:
collisions (vehicles, parked cars, pedestrians, roadside objects), off-road and lane
departure, red-light crossings and stop-line overshoot, progress along the route, comfort
and the age of the plan the controller follows; summed per drive and per scenario span."""

from __future__ import annotations

import math

import numpy as np

from flashdrive_ros.sim.rectangles import overlap, rectangle
from flashdrive_ros.sim.vehicle import EGO_LENGTH, EGO_WIDTH, REAR_OVERHANG, WHEELBASE, EgoState
from flashdrive_ros.sim.world import EGO_LANE_D, LANE_WIDTH, ROAD_HALF_WIDTH, World

CONTACT_RANGE = 12.0
STATIC_RANGE = 40.0
PEDESTRIAN_SIZE = 0.5
STOP_SPEED = 0.2
STOP_LINE_ZONE = 15.0
INTERSECTION_MARGIN = 1.0
COMFORT_DT = 0.1
_CORNERS = np.array([[EGO_LENGTH - REAR_OVERHANG, EGO_WIDTH / 2],
                     [EGO_LENGTH - REAR_OVERHANG, -EGO_WIDTH / 2],
                     [-REAR_OVERHANG, -EGO_WIDTH / 2], [-REAR_OVERHANG, EGO_WIDTH / 2]])
LEAD_RANGE = 80.0
# rows: t, x, y, yaw, v, accel, steer, route s, route d, plan age (nan: none), off road,
# lane departure, following a plan, lead gap (nan: none), lead speed (nan: none)
_COLUMNS = 15
ROW_T, ROW_SPEED, ROW_ROUTE_S, ROW_ROUTE_D = 0, 4, 7, 8
ROW_LEAD_GAP, ROW_LEAD_SPEED = 13, 14


def _quantiles(values: np.ndarray) -> dict[str, float | None]:
    if len(values) == 0:
        return {"p50": None, "p90": None, "max": None}
    return {"p50": float(np.percentile(values, 50)), "p90": float(np.percentile(values, 90)),
            "max": float(np.max(values))}


class DriveMonitor:
    """`record(...)` once per simulator step (before the step), `summary(...)` at the end."""

    def __init__(self, world: World, dt: float) -> None:
        self.world = world
        self.dt = dt
        self.lights = world.lights()
        self._statics = np.array([(b.x, b.y) for b in world.statics]).reshape(-1, 2)
        self._touching: set[tuple[str, int]] = set()
        self._front_s: float | None = None
        self._overshoot: dict[int, float] = {}
        self.collisions: list[dict] = []
        self.red_light_violations: list[dict] = []
        self.yellow_crossings: list[dict] = []
        self._rows: list[tuple] = []

    def record(self, t: float, ego: EgoState, route_s: float, route_d: float,
               plan_age_s: float | None, following: bool = True) -> None:
        """following: the controller tracks a plan (False: it brakes for want of one)."""
        route = self.world.route
        front_s = route_s + ego.front_offset
        rel = ego.yaw - float(route.pose_at(route_s)[2])
        lateral = route_d + np.sin(rel) * _CORNERS[:, 0] + np.cos(rel) * _CORNERS[:, 1]
        off_road = self._off_road(front_s, lateral)
        lane_departure = bool(lateral.min() < -LANE_WIDTH or (
            lateral.max() > 0.0 and not self._in_span(front_s, "nudge_parked")))
        self._contacts(t, ego, front_s)
        self._lights(t, ego, front_s)
        lead_gap, lead_speed = self._lead(ego, route_s, front_s)
        self._rows.append((t, ego.x, ego.y, ego.yaw, ego.v, ego.accel, ego.steer, route_s,
                           route_d, math.nan if plan_age_s is None else plan_age_s,
                           float(off_road), float(lane_departure), float(following),
                           lead_gap, lead_speed))
        self._front_s = front_s

    def _in_span(self, s: float, kind: str) -> bool:
        return any(sp.kind == kind and sp.s_start <= s <= sp.s_end for sp in self.world.spans)

    def _off_road(self, s: float, lateral: np.ndarray) -> bool:
        outside = np.abs(lateral) > ROAD_HALF_WIDTH
        if not outside.any():
            return False
        for inter in self.world.intersections:
            if abs(s - inter.s) < inter.half_width + INTERSECTION_MARGIN + EGO_LENGTH:
                if not inter.side_only:
                    return False
                outside &= lateral > 0
        return bool(outside.any())

    def _contacts(self, t: float, ego: EgoState, front_s: float) -> None:
        cx, cy = ego.center
        box = rectangle(cx, cy, ego.yaw, EGO_LENGTH, EGO_WIDTH)
        touching: dict[tuple[str, int], tuple[str, float, np.ndarray]] = {}
        for i, veh in enumerate(self.world.vehicles):
            if veh.active and math.hypot(veh.x - cx, veh.y - cy) < CONTACT_RANGE:
                other = rectangle(veh.x, veh.y, veh.yaw, veh.length, veh.width)
                if overlap(box, other):
                    touching[("vehicle", i)] = veh.kind, veh.v, other
        for i, ped in enumerate(self.world.pedestrians):
            px, py = ped.position()
            if math.hypot(px - cx, py - cy) < CONTACT_RANGE:
                other = rectangle(px, py, ped.yaw, PEDESTRIAN_SIZE, PEDESTRIAN_SIZE)
                if overlap(box, other):
                    touching[("pedestrian", i)] = ("pedestrian", float(np.hypot(*ped.velocity())),
                                                   other)
        if len(self._statics):
            near = np.flatnonzero(np.hypot(self._statics[:, 0] - cx,
                                           self._statics[:, 1] - cy) < STATIC_RANGE)
            for i in near:
                b = self.world.statics[i]
                other = rectangle(b.x, b.y, b.yaw, b.length, b.width)
                if overlap(box, other):
                    touching[("static", int(i))] = "static", 0.0, other
        for key, (kind, other_speed, other) in touching.items():
            if key not in self._touching:
                self.collisions.append({
                    "t": round(t, 3), "kind": kind, "x": round(float(cx), 2),
                    "y": round(float(cy), 2), "yaw": round(float(ego.yaw), 4),
                    "route_s": round(float(front_s), 2), "speed": round(ego.v, 2),
                    "other_speed": round(float(other_speed), 2),
                    "other_box": np.round(other, 3).tolist()})
        self._touching = set(touching)

    def _lead(self, ego: EgoState, route_s: float, front_s: float) -> tuple[float, float]:
        """(gap from the ego's front to the rear of the nearest moving vehicle ahead in the
        ego lane within LEAD_RANGE, its speed); (nan, nan) when there is none."""
        route = self.world.route
        best_gap, best_speed = math.nan, math.nan
        near = self.world.distances_to(ego.x, ego.y) <= LEAD_RANGE + EGO_LENGTH
        for k in np.flatnonzero(near):
            veh = self.world.vehicles[k]
            if not veh.active or veh.kind == "parked":
                continue
            s, d = route.project((veh.x, veh.y), hint=route_s, window=LEAD_RANGE + EGO_LENGTH)
            gap = float(s) - veh.length / 2 - front_s
            if abs(float(d) - EGO_LANE_D) < LANE_WIDTH / 2 and -veh.length < gap < LEAD_RANGE \
                    and not gap >= best_gap:
                best_gap, best_speed = gap, float(veh.v)
        return best_gap, best_speed

    def _lights(self, t: float, ego: EgoState, front_s: float) -> None:
        for i, light in enumerate(self.lights):
            state = light.ego_state(t)
            if self._front_s is not None and self._front_s < light.stop_s <= front_s:
                event = {"t": round(t, 3), "light": i, "route_s": round(light.stop_s, 2),
                         "speed": round(ego.v, 2)}
                if state == "red":
                    self.red_light_violations.append(event)
                elif state == "yellow":
                    self.yellow_crossings.append(event)
            past = front_s - light.stop_s
            if state != "green" and ego.v < STOP_SPEED and abs(past) < STOP_LINE_ZONE:
                self._overshoot[i] = max(self._overshoot.get(i, 0.0), max(past, 0.0))

    def rows(self) -> np.ndarray:
        """float64 [N, 15]: t, x, y, yaw, v, accel, steer, route s, route d, plan age,
        off road, lane departure, following a plan, lead gap, lead speed."""
        return np.asarray(self._rows, dtype=np.float64).reshape(-1, _COLUMNS)

    def progress(self) -> float:
        """Route distance covered by base_link while on the road (m)."""
        rows = self.rows()
        on_road = np.abs(rows[:, 8]) < ROAD_HALF_WIDTH
        if not on_road.any():
            return 0.0
        return float(rows[on_road, 7].max() - rows[0, 7])

    def summary(self, engaged_at: float, reference_progress: float, end_s: float) -> dict:
        """The drive's metrics; comfort and plan age from `engaged_at` on, route completion
        against `reference_progress` (the expert's), scenario spans starting before the
        route arc length `end_s` the expert reached."""
        rows = self.rows()
        dt = self.dt
        active = rows[rows[:, 0] >= engaged_at - 1e-9]
        ages = active[:, 9]
        progress = self.progress()
        return {
            "collisions": len(self.collisions),
            "collision_events": self.collisions,
            "red_light_violations": len(self.red_light_violations),
            "red_light_events": self.red_light_violations,
            "yellow_light_crossings": len(self.yellow_crossings),
            "stop_line_overshoot_m": round(max(self._overshoot.values(), default=0.0), 3),
            "stops_at_lights": len(self._overshoot),
            "off_road_s": round(float(rows[:, 10].sum() * dt), 3),
            "lane_departure_s": round(float(rows[:, 11].sum() * dt), 3),
            "lane_offset_m": self._lane_offset(active),
            "progress_m": round(progress, 2),
            "reference_progress_m": round(reference_progress, 2),
            "route_completion": round(min(progress / max(reference_progress, 1e-6), 1.0), 4),
            "mean_speed_mps": round(float(active[:, 4].mean()), 3) if len(active) else None,
            "comfort": self._comfort(active),
            "plan_age_s": _quantiles(ages[np.isfinite(ages)]),
            "no_plan_s": round(float(np.isnan(ages).sum() * dt), 3),
            "fallback_s": round(float((active[:, 12] == 0).sum() * dt), 3),
            "scenarios": self._scenarios(rows, end_s),
        }

    def _lane_offset(self, rows: np.ndarray) -> dict:
        """base_link's offset from its lane centre (m, left positive) while on the road and
        outside the parked-car nudge spans: signed mean (a steady drift to one side) and p95
        of its size."""
        front = rows[:, 7] + EGO_LENGTH - REAR_OVERHANG
        keep = np.abs(rows[:, 8]) < ROAD_HALF_WIDTH
        for span in self.world.spans:
            if span.kind == "nudge_parked":
                keep &= ~((front >= span.s_start) & (front <= span.s_end))
        offset = rows[keep, ROW_ROUTE_D] - EGO_LANE_D
        if not len(offset):
            return {"mean": None, "abs_p95": None}
        return {"mean": round(float(offset.mean()), 3),
                "abs_p95": round(float(np.percentile(np.abs(offset), 95)), 3)}

    def _comfort(self, rows: np.ndarray) -> dict:
        per = max(int(round(COMFORT_DT / self.dt)), 1)
        n = len(rows) // per
        if n < 3:
            return {"max_accel": None, "max_decel": None, "jerk_rms": None, "jerk_max": None,
                    "lateral_accel_p95": None, "lateral_accel_max": None}
        accel = rows[:n * per, 5].reshape(n, per).mean(axis=1)
        jerk = np.diff(accel) / COMFORT_DT
        lateral = np.abs(rows[:, 4] ** 2 * np.tan(rows[:, 6]) / WHEELBASE)
        return {"max_accel": round(float(accel.max()), 3),
                "max_decel": round(float(-accel.min()), 3),
                "jerk_rms": round(float(np.sqrt(np.mean(jerk ** 2))), 3),
                "jerk_max": round(float(np.abs(jerk).max()), 3),
                "lateral_accel_p95": round(float(np.percentile(lateral, 95)), 3),
                "lateral_accel_max": round(float(lateral.max()), 3)}

    def _scenarios(self, rows: np.ndarray, end_s: float) -> list[dict]:
        front = rows[:, 7] + EGO_LENGTH - REAR_OVERHANG
        out = []
        for span in self.world.spans:
            if span.s_start >= end_s:
                continue
            inside = (front >= span.s_start) & (front <= span.s_end)
            events = [e for e in self.collisions if span.s_start <= e["route_s"] <= span.s_end]
            reds = [e for e in self.red_light_violations
                    if span.s_start <= e["route_s"] <= span.s_end]
            out.append({
                "kind": span.kind, "s_start": round(float(span.s_start), 2),
                "s_end": round(float(span.s_end), 2),
                "reached": bool(front.max() >= span.s_start),
                "completed": bool(front.max() >= span.s_end),
                "collisions": len(events), "red_light_violations": len(reds),
                "off_road_s": round(float(rows[inside, 10].sum() * self.dt), 3),
                "lane_departure_s": round(float(rows[inside, 11].sum() * self.dt), 3),
                "time_s": round(float(inside.sum() * self.dt), 3),
                "min_speed_mps": round(float(rows[inside, 4].min()), 3) if inside.any()
                else None})
        return out
