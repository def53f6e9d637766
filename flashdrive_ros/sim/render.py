"""OpenCV renderer of the synthetic world: sky and ground, road surface with markings,
shaded 3D boxes for vehicles, pedestrians, buildings and trees, and traffic lights."""

from __future__ import annotations

import numpy as np

from flashdrive_ros.sim.box import box_corners
from flashdrive_ros.sim.cameras import DEFAULT_HEIGHT, DEFAULT_WIDTH, CameraSpec, rig
from flashdrive_ros.sim.drive import BoxSnapshot, SceneSnapshot
from flashdrive_ros.sim.raster import CameraRaster
from flashdrive_ros.sim.road_geometry import RoadGeometry
from flashdrive_ros.sim.world import World

FOG_DISTANCE = 320.0
OBJECT_RANGE = 200.0
_FACES = np.array([[0, 1, 5, 4], [2, 3, 7, 6], [1, 2, 6, 5], [3, 0, 4, 7], [4, 5, 6, 7],
                   [0, 3, 2, 1]])
_LOCAL_NORMALS = np.array([[1.0, 0, 0], [-1.0, 0, 0], [0, -1.0, 0], [0, 1.0, 0], [0, 0, 1.0],
                           [0, 0, -1.0]])
_LAMP_COLORS = {"red": (255, 45, 35), "yellow": (255, 200, 20), "green": (60, 255, 120)}
_LAMP_OFF = (45, 45, 40)
_BRAKE_ON = (255, 30, 25)
_BRAKE_OFF = (110, 20, 20)
_LAMP_ORDER = ("red", "yellow", "green")


def _vehicle_parts(b: BoxSnapshot) -> list[tuple]:
    """(x, y, yaw, length, width, height, z0, colour) of a car's chassis, body and cabin."""
    c, s = np.cos(b.yaw), np.sin(b.yaw)
    body_h = 0.5 * b.height
    cabin_len = 0.5 * b.length if b.height < 2.5 else 0.25 * b.length
    shift = -0.08 * b.length if b.height < 2.5 else 0.35 * b.length
    glass = tuple(int(0.35 * ch + 30) for ch in b.color)
    cabin_color = glass if b.height < 2.5 else b.color
    return [
        (b.x, b.y, b.yaw, 0.85 * b.length, 0.92 * b.width, 0.3, 0.05, (25, 25, 25)),
        (b.x, b.y, b.yaw, b.length, b.width, body_h, 0.3, b.color),
        (b.x + c * shift, b.y + s * shift, b.yaw, cabin_len, 0.9 * b.width,
         b.height - body_h - 0.3, 0.3 + body_h, cabin_color),
    ]


def _tail_lights(b: BoxSnapshot) -> list[tuple]:
    """(centre, radius, colour, facing) of a car's two tail lights, bright when braking."""
    c, s = np.cos(b.yaw), np.sin(b.yaw)
    back = np.array([-c, -s, 0.0])
    side = np.array([-s, c, 0.0])
    rear = np.array([b.x, b.y, 0.3 + 0.35 * b.height]) + back * (b.length / 2 + 0.02)
    color = _BRAKE_ON if b.braking else _BRAKE_OFF
    return [(rear + side * k * 0.38 * b.width, 0.11, color, back) for k in (-1.0, 1.0)]


class Renderer:
    """Renders every rig camera from a scene snapshot; images are uint8 RGB [H, W, 3]."""

    def __init__(self, world: World, width: int = DEFAULT_WIDTH, height: int = DEFAULT_HEIGHT,
                 cameras: tuple[CameraSpec, ...] | None = None) -> None:
        self.check_size(width, height)
        self.world, self.width, self.height = world, int(width), int(height)
        self.cameras = rig() if cameras is None else cameras
        self.k = [c.intrinsics(self.width, self.height) for c in self.cameras]
        self.base_from_cam = [c.base_from_camera() for c in self.cameras]
        self.rasters = [CameraRaster(k, self.width, self.height) for k in self.k]
        self.style = world.style
        self.road = RoadGeometry(world)
        self._sun = np.asarray(self.style.sun)
        self._haze = np.asarray(self.style.sky_horizon, dtype=np.float64)
        self._backgrounds = [self._background(c, k) for c, k in zip(self.cameras, self.k)]
        self._statics = [(box_corners(st.x, st.y, st.yaw, st.length, st.width, st.height,
                                      st.z0), st.yaw, st.color,
                          (st.x, st.y, st.z0 + st.height / 2)) for st in world.statics]
        self._static_xy = np.array([(st.x, st.y) for st in world.statics]).reshape(-1, 2)
        self._light_parts = self.road.traffic_light_parts()

    @staticmethod
    def check_size(width: int, height: int) -> None:
        if int(width) != width or int(height) != height or width < 8 or height < 8:
            raise ValueError(f"image size {width}x{height} too small or not whole (min 8x8)")
        if width > 4096 or height > 4096:
            raise ValueError(f"image size {width}x{height} too large (max 4096)")

    def _background(self, cam: CameraSpec, k: np.ndarray) -> np.ndarray:
        st = self.style
        h = self.height
        horizon = k[1, 2] - k[1, 1] * np.tan(np.deg2rad(cam.pitch_deg))
        rows = np.arange(h, dtype=np.float64)[:, None]
        top, hz = np.asarray(st.sky_top, float), self._haze
        t_sky = np.clip(rows / max(horizon, 1.0), 0.0, 1.0) ** 0.6
        sky = top * (1 - t_sky) + hz * t_sky
        ground = np.asarray(st.ground, float) * (st.ambient + (1 - st.ambient) * st.sun[2])
        t_g = np.exp(-np.clip(rows - horizon, 0.0, None) / (0.08 * h))
        grd = ground * st.exposure * (1 - t_g) + hz * t_g
        col = np.where(rows < horizon, sky, grd)
        img = np.repeat(col[:, None, :], self.width, axis=1)
        return np.clip(img, 0, 255).astype(np.uint8)

    def _shade_many(self, colors: np.ndarray, light: np.ndarray,
                    dist: np.ndarray) -> np.ndarray:
        """uint8-range colours [..., 3] lit by light [...] and hazed by distance [...]."""
        st = self.style
        c = colors * (st.ambient + (1 - st.ambient) * light)[..., None] * st.exposure
        f = (1.0 - np.exp(-dist / FOG_DISTANCE))[..., None]
        return np.clip(c * (1 - f) + self._haze * f, 0, 255).astype(np.int32)

    def render(self, scene: SceneSnapshot) -> list[np.ndarray]:
        ego = scene.ego
        c, s = np.cos(ego.yaw), np.sin(ego.yaw)
        world_from_base = np.array([[c, -s, 0, ego.x], [s, c, 0, ego.y], [0, 0, 1, 0],
                                    [0, 0, 0, 1.0]])
        ground = self._ground_batch(ego, scene.route_s)
        objects = self._object_batch(scene)
        images = []
        for i, raster in enumerate(self.rasters):
            wc = world_from_base @ self.base_from_cam[i]
            rot, pos = wc[:3, :3], wc[:3, 3]
            img = self._backgrounds[i].copy()
            if ground is not None:
                self._draw_ground(img, raster, rot, pos, ground)
            if objects is not None:
                self._draw_objects(img, raster, rot, pos, objects)
            images.append(img)
        return images

    def _ground_batch(self, ego, route_s: float):
        polys = self.road.ground_polygons(route_s)
        if not polys:
            return None
        sizes = np.array([len(p) for _, p in polys])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        pts = np.concatenate([p for _, p in polys], axis=0)
        centers = np.add.reduceat(pts, starts, axis=0) / sizes[:, None]
        dist = np.hypot(centers[:, 0] - ego.x, centers[:, 1] - ego.y)
        colors = self._shade_many(np.array([c for c, _ in polys], dtype=np.float64),
                                  np.full(len(polys), self.style.sun[2]), dist)
        return pts, starts, sizes, [tuple(map(int, c)) for c in colors]

    def _draw_ground(self, img, raster: CameraRaster, rot, pos, ground) -> None:
        pts, starts, sizes, colors = ground
        cam = (pts - pos) @ rot
        dist = raster.distances(cam)
        inside = dist >= 0
        any_in = np.logical_or.reduceat(inside, starts, axis=0)
        all_in = np.logical_and.reduceat(inside.all(axis=1), starts)
        visible = any_in.all(axis=1)
        uv = raster.project_fixed(cam)
        run: list[np.ndarray] = []
        run_color = None
        for j in np.flatnonzero(visible):
            a, n = starts[j], sizes[j]
            if run and colors[j] != run_color:
                raster.fill_fixed(img, run, run_color)
                run = []
            if all_in[j]:
                run.append(uv[a:a + n])
                run_color = colors[j]
            else:
                raster.fill(img, cam[a:a + n], colors[j], dist[a:a + n])
        if run:
            raster.fill_fixed(img, run, run_color)

    def _object_batch(self, scene: SceneSnapshot):
        """Boxes of all nearby objects with per-face colours, and the lamps of the signals."""
        ego = scene.ego
        boxes, refs, owner, lamps = [], [], [], []
        if len(self._static_xy):
            near = np.flatnonzero(np.hypot(self._static_xy[:, 0] - ego.x,
                                           self._static_xy[:, 1] - ego.y) < OBJECT_RANGE)
            for k in near:
                corners, yaw, color, ref = self._statics[k]
                owner.append(len(refs))
                refs.append(ref)
                boxes.append((corners, yaw, color))
        for b in scene.boxes:
            if np.hypot(b.x - ego.x, b.y - ego.y) > OBJECT_RANGE:
                continue
            if b.kind == "pedestrian":
                parts = [(b.x, b.y, b.yaw, b.length, b.width, b.height, b.z0, b.color)]
            else:
                parts = _vehicle_parts(b)
            for p in parts:
                owner.append(len(refs))
                boxes.append((box_corners(*p[:7]), p[2], p[7]))
            if b.kind != "pedestrian":
                lamps += [(len(refs), *lamp) for lamp in _tail_lights(b)]
            refs.append((b.x, b.y, b.z0 + b.height / 2))
        for index, parts in self._light_parts:
            ref = parts["ref"]
            if np.hypot(ref[0] - ego.x, ref[1] - ego.y) > OBJECT_RANGE:
                continue
            state = scene.light_states[index]
            for corners, yaw, color in parts["boxes"]:
                owner.append(len(refs))
                boxes.append((corners, yaw, color))
            for centers, radius, facing in parts["lamps"]:
                for name, center in zip(_LAMP_ORDER, centers):
                    lamps.append((len(refs), center, radius,
                                  _LAMP_COLORS[name] if name == state else _LAMP_OFF, facing))
            refs.append(tuple(ref))
        if not boxes:
            return None
        corners = np.stack([b[0] for b in boxes])
        yaw = np.array([b[1] for b in boxes])
        c, s = np.cos(yaw), np.sin(yaw)
        rot = np.zeros((len(boxes), 3, 3))
        rot[:, 0, 0], rot[:, 0, 1], rot[:, 1, 0], rot[:, 1, 1], rot[:, 2, 2] = c, s, -s, c, 1
        normals = np.einsum("fk,mkj->mfj", _LOCAL_NORMALS, rot)
        face_centers = corners[:, _FACES].mean(axis=2)
        refs_arr = np.asarray(refs)
        owner = np.asarray(owner)
        dist = np.hypot(refs_arr[owner, 0] - ego.x, refs_arr[owner, 1] - ego.y)
        light = np.maximum(normals @ self._sun, 0.0)
        base = np.array([b[2] for b in boxes], dtype=np.float64)[:, None, :]
        colors = self._shade_many(np.broadcast_to(base, (len(boxes), 6, 3)), light,
                                  np.repeat(dist[:, None], 6, axis=1))
        return corners, normals, face_centers, colors, owner, refs_arr, lamps

    def _draw_objects(self, img, raster: CameraRaster, rot, pos, objects) -> None:
        corners, normals, face_centers, colors, owner, refs, lamps = objects
        cam = (corners.reshape(-1, 3) - pos) @ rot
        dist = raster.distances(cam).reshape(len(corners), 8, 5)
        inside = dist >= 0
        shown = inside.any(axis=1).all(axis=1)
        all_in = inside.all(axis=(1, 2))
        faces_vis = np.einsum("mfj,mfj->mf", normals, pos - face_centers) > 0
        uv = raster.project_fixed(cam).reshape(len(corners), 8, 2)
        cam = cam.reshape(len(corners), 8, 3)
        order = np.argsort(-np.sum((refs - pos) ** 2, axis=1), kind="stable")
        by_owner: dict[int, list[int]] = {}
        for m in np.flatnonzero(shown):
            by_owner.setdefault(int(owner[m]), []).append(int(m))
        lamps_by_owner: dict[int, list] = {}
        for lamp in lamps:
            lamps_by_owner.setdefault(lamp[0], []).append(lamp[1:])
        for o in order:
            for m in by_owner.get(int(o), ()):
                for f in np.flatnonzero(faces_vis[m]):
                    face = _FACES[f]
                    color = tuple(map(int, colors[m, f]))
                    if all_in[m]:
                        raster.fill_fixed(img, uv[m, face], color)
                    else:
                        raster.fill(img, cam[m, face], color, dist[m, face])
            for center, radius, color, facing in lamps_by_owner.get(int(o), ()):
                if facing @ (pos - center) > 0:
                    raster.dot(img, (center - pos) @ rot, radius, color)
