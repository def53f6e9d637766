"""World-space ground polygons of the road near the ego (surface, markings, crossings) and
the static geometry of traffic-light assemblies."""

from __future__ import annotations

import numpy as np

from flashdrive_ros.sim.box import box_corners
from flashdrive_ros.sim.world import LANE_WIDTH, ROAD_HALF_WIDTH, SIDEWALK_WIDTH, World

BEHIND = 40.0
AHEAD = 300.0
MARKING_RANGE = 160.0
NEAR_CHUNK = 10.0
FAR_CHUNK = 40.0
NEAR_RANGE = 60.0
CROSS_ROAD_LENGTH = 80.0
LINE_WIDTH = 0.15
WHITE = (225, 225, 220)
YELLOW = (225, 180, 40)
POLE = (70, 72, 75)
HOUSING = (30, 32, 30)
FAR_HEAD_Z0 = 2.7


class RoadGeometry:
    def __init__(self, world: World) -> None:
        self.world = world
        self.route = world.route
        st = world.style
        self.asphalt, self.sidewalk = st.asphalt, st.sidewalk
        self.center_style = st.center_line
        inter = world.intersections
        self._full_breaks = [(i.s - i.half_width, i.s + i.half_width) for i in inter
                             if not i.side_only]
        self._right_breaks = [(i.s - i.half_width, i.s + i.half_width) for i in inter]

    def _chunks(self, s_ego: float, lo: float, hi: float) -> list[np.ndarray]:
        """Arc-length samples of consecutive chunks on an absolute grid (stable over time)."""
        lo, hi = max(lo, 0.0), min(hi, self.route.length)
        out = []
        a = np.floor(lo / NEAR_CHUNK) * NEAR_CHUNK
        while a < hi:
            near = abs(a - s_ego) < NEAR_RANGE
            size = NEAR_CHUNK if near else FAR_CHUNK
            b = min(a + size, hi)
            step = 1.0 if near else 5.0
            s = np.unique(np.concatenate([np.arange(np.ceil(a / step) * step, b, step),
                                          [max(a, lo), b]]))
            s = s[(s >= max(a, lo)) & (s <= b)]
            if len(s) >= 2:
                out.append(s)
            a = b
        return out

    def _ribbon(self, s: np.ndarray, d0: float, d1: float, z: float = 0.0) -> np.ndarray:
        x0, y0 = self.route.offset_point(s, d0)
        x1, y1 = self.route.offset_point(s, d1)
        xs = np.concatenate([x0, x1[::-1]])
        ys = np.concatenate([y0, y1[::-1]])
        return np.stack([xs, ys, np.full(len(xs), z)], axis=1)

    @staticmethod
    def _split(s: np.ndarray, breaks: list[tuple[float, float]]) -> list[np.ndarray]:
        keep = np.ones(len(s), dtype=bool)
        for a, b in breaks:
            keep &= ~((s > a) & (s < b))
        pieces, cur = [], []
        for v, k in zip(s, keep):
            if k:
                cur.append(v)
            elif cur:
                pieces.append(np.array(cur))
                cur = []
        if cur:
            pieces.append(np.array(cur))
        return [p for p in pieces if len(p) >= 2]

    def _rect(self, s_c: float, s_half: float, d0: float, d1: float, z: float) -> np.ndarray:
        x, y, yaw = self.route.pose_at(s_c)
        t = np.array([np.cos(yaw), np.sin(yaw)])
        n = np.array([-np.sin(yaw), np.cos(yaw)])
        p = np.array([x, y])
        corners = [p - t * s_half + n * d0, p + t * s_half + n * d0, p + t * s_half + n * d1,
                   p - t * s_half + n * d1]
        return np.array([[c[0], c[1], z] for c in corners])

    def ground_polygons(self, s_ego: float) -> list[tuple]:
        """[(colour, polygon [N, 3] world)] in drawing order for an ego at route s_ego."""
        chunks = self._chunks(s_ego, s_ego - BEHIND, s_ego + AHEAD)
        out: list[tuple] = []
        outer = ROAD_HALF_WIDTH + SIDEWALK_WIDTH
        out += [(self.sidewalk, self._ribbon(s, -outer, outer)) for s in chunks]
        out += [(self.asphalt, self._ribbon(s, -ROAD_HALF_WIDTH, ROAD_HALF_WIDTH))
                for s in chunks]
        lo, hi = s_ego - BEHIND, s_ego + AHEAD
        for inter in self.world.intersections:
            if not lo - 60 < inter.s < hi + 60:
                continue
            far = ROAD_HALF_WIDTH + CROSS_ROAD_LENGTH
            d_top = -ROAD_HALF_WIDTH + 0.05 if inter.side_only else far
            out.append((self.asphalt, self._rect(inter.s, inter.half_width, -far, d_top, 0.0)))
        for inter in self.world.intersections:
            if not lo - 60 < inter.s < hi + 60:
                continue
            far = ROAD_HALF_WIDTH + CROSS_ROAD_LENGTH
            for d0, d1 in ((-far, -ROAD_HALF_WIDTH), (ROAD_HALF_WIDTH, far)):
                if inter.side_only and d0 > 0:
                    continue
                out.append((YELLOW, self._rect(inter.s, 0.06, d0, d1, 0.01)))
        marks = [s[s < s_ego + MARKING_RANGE] for s in chunks]
        marks = [s for s in marks if len(s) >= 2]
        if marks:
            self._markings(out, np.unique(np.concatenate(marks)), s_ego)
        return out

    def _markings(self, out: list, s: np.ndarray, s_ego: float) -> None:
        w = LINE_WIDTH / 2
        for piece in self._split(s, self._right_breaks):
            out.append((WHITE, self._ribbon(piece, -LANE_WIDTH - w, -LANE_WIDTH + w, 0.01)))
        for piece in self._split(s, self._full_breaks):
            out.append((WHITE, self._ribbon(piece, LANE_WIDTH - w, LANE_WIDTH + w, 0.01)))
            if self.center_style == "double_yellow":
                out.append((YELLOW, self._ribbon(piece, -0.2, -0.08, 0.01)))
                out.append((YELLOW, self._ribbon(piece, 0.08, 0.2, 0.01)))
        if self.center_style == "dashed_white":
            first = np.ceil(s[0] / 9.0) * 9.0
            for a in np.arange(first, s[-1] - 3.0, 9.0):
                if any(x0 < a + 3.0 and a < x1 for x0, x1 in self._full_breaks):
                    continue
                out.append((WHITE, self._ribbon(np.array([a, a + 1.5, a + 3.0]), -w, w, 0.01)))
        for inter in self.world.intersections:
            if inter.light is None or not s[0] - 10 < inter.s < s[-1] + 10:
                continue
            light = inter.light
            out.append((WHITE, self._rect(light.stop_s, 0.2, -LANE_WIDTH, 0.0, 0.01)))
            out.append((WHITE, self._rect(light.oncoming_stop_s, 0.2, 0.0, LANE_WIDTH, 0.01)))
        for cw in self.world.crosswalks:
            if not s[0] - 5 < cw.s < s[-1] + 5:
                continue
            for d in np.arange(-ROAD_HALF_WIDTH + 0.5, ROAD_HALF_WIDTH, 1.1):
                out.append((WHITE, self._rect(cw.s, cw.width / 2, d, d + 0.55, 0.01)))

    def traffic_light_parts(self) -> list[tuple[int, dict]]:
        """Per signal and direction of travel: (index in world.lights(), {'ref', 'boxes',
        'lamps'}) with boxes as (corners [8, 3], yaw, colour) and lamps as ([3 centres], radius,
        facing normal). Each direction has a near-side assembly at its stop line (a head over
        its lane on a mast arm, one on the pole) and a far-side pole head beyond the junction
        on its right, the head a driver standing at the line sees ahead."""
        parts = []
        for index, light in enumerate(self.world.lights()):
            for near_s, far_s, side in ((light.stop_s, light.oncoming_stop_s, -1.0),
                                        (light.oncoming_stop_s, light.stop_s, 1.0)):
                parts.append((index, self._near_side_assembly(near_s, side)))
                parts.append((index, self._far_side_head(far_s, side)))
        return parts

    def _facing(self, s: float, side: float) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
        """Ground point [3] on the route at s, and the yaw, unit travel direction t [3] and its
        left normal n [3] of the direction of travel `side` (-1: the route's, 1: oncoming)."""
        x, y, yaw = self.route.pose_at(s)
        if side > 0:
            yaw = yaw + np.pi
        t = np.array([np.cos(yaw), np.sin(yaw), 0.0])
        n = np.array([-np.sin(yaw), np.cos(yaw), 0.0])
        return np.array([x, y, 0.0]), yaw, t, n

    def _near_side_assembly(self, stop_s: float, side: float) -> dict:
        point, yaw, t, n = self._facing(stop_s, side)
        base = point + t * 1.0
        pole = base - n * (ROAD_HALF_WIDTH + 0.6)
        boxes = [(box_corners(pole[0], pole[1], yaw, 0.25, 0.25, 6.2), yaw, POLE)]
        arm_mid = base - n * (ROAD_HALF_WIDTH + 0.6 + LANE_WIDTH / 2) / 2
        boxes.append((box_corners(arm_mid[0], arm_mid[1], yaw, 0.15,
                                  ROAD_HALF_WIDTH + 0.6 - LANE_WIDTH / 2, 0.15, 5.9), yaw, POLE))
        lamps = []
        for centre, z0 in ((base - n * LANE_WIDTH / 2, 4.7), (pole, 2.6)):
            boxes.append(_housing(centre, yaw, z0))
            lamps.append(_lamps(centre, t, z0))
        return {"ref": base + (0, 0, 4.0), "boxes": boxes, "lamps": lamps}

    def _far_side_head(self, other_stop_s: float, side: float) -> dict:
        point, yaw, t, n = self._facing(other_stop_s, side)
        pole = point + t * 2.0 - n * (ROAD_HALF_WIDTH + 0.6)
        boxes = [(box_corners(pole[0], pole[1], yaw, 0.2, 0.2, 3.9), yaw, POLE),
                 _housing(pole, yaw, FAR_HEAD_Z0)]
        return {"ref": pole + (0, 0, FAR_HEAD_Z0), "boxes": boxes,
                "lamps": [_lamps(pole, t, FAR_HEAD_Z0)]}


def _housing(centre: np.ndarray, yaw: float, z0: float) -> tuple:
    """The box of a signal head at ground point centre [3] from height z0."""
    return box_corners(centre[0], centre[1], yaw, 0.35, 0.5, 1.2, z0), yaw, HOUSING


def _lamps(centre: np.ndarray, t: np.ndarray, z0: float) -> tuple:
    """(red, yellow, green centres [3 x 3], radius, facing normal) of the head at ground point
    centre [3] from height z0 facing against the travel direction t [3]."""
    front = centre - t * 0.2
    return ([front + (0, 0, z0 + 0.95), front + (0, 0, z0 + 0.6), front + (0, 0, z0 + 0.25)],
            0.15, -t)
