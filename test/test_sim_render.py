"""Renderer: sizes, sky/ground layout, agreement with the published K and extrinsics,
near-plane clipping, visible traffic-light state, far-side signal heads."""

from dataclasses import replace

import numpy as np
import pytest

from flashdrive_ros.sim.cameras import rig
from flashdrive_ros.model.preprocess import resize_images
from flashdrive_ros.sim.drive import BoxSnapshot, SceneSnapshot, simulate
from flashdrive_ros.sim.raster import NEAR, CameraRaster
from flashdrive_ros.sim.render import Renderer
from flashdrive_ros.sim.topics import CAMERA_NAMES
from flashdrive_ros.sim.vehicle import EgoState
from flashdrive_ros.sim.road_geometry import RoadGeometry
from flashdrive_ros.sim.world import EGO_LANE_D, ROAD_HALF_WIDTH


@pytest.fixture(scope="module")
def red_log():
    return simulate(21, 12.0, blocks=("red_light",))


def _project(spec, w, h, ego, point):
    """Pixel (u, v) of a world point through the published K and camera pose in base_link."""
    c, s = np.cos(ego.yaw), np.sin(ego.yaw)
    world_from_base = np.array([[c, -s, 0, ego.x], [s, c, 0, ego.y], [0, 0, 1, 0],
                                [0, 0, 0, 1.0]])
    cam_from_world = np.linalg.inv(world_from_base @ spec.base_from_camera())
    p = cam_from_world @ np.append(point, 1.0)
    if p[2] <= 0:
        return None
    uvw = spec.intrinsics(w, h) @ p[:3]
    return uvw[0] / uvw[2], uvw[1] / uvw[2]


@pytest.mark.parametrize("size", [(128, 80), (480, 272)])
def test_images_have_the_requested_size_and_a_sky_above_the_road(red_log, size):
    w, h = size
    images = Renderer(red_log.world, w, h).render(red_log.scenes[0])
    assert len(images) == len(CAMERA_NAMES)
    for img in images:
        assert img.shape == (h, w, 3) and img.dtype == np.uint8
    front = images[CAMERA_NAMES.index("camera_front_wide_120fov")].astype(float)
    sky, road = front[1, w // 2], front[h - 2, w // 2]
    assert sky.mean() > road.mean() + 30, "sky should be brighter than the asphalt"
    assert np.ptp(road) < 20, "asphalt should be grey"


def test_box_lands_where_published_intrinsics_and_extrinsics_put_it(red_log):
    w, h = 480, 272
    scene = red_log.scenes[0]
    ego = scene.ego
    ahead = np.array([ego.x + 14.0 * np.cos(ego.yaw), ego.y + 14.0 * np.sin(ego.yaw)])
    marker = BoxSnapshot(float(ahead[0]), float(ahead[1]), ego.yaw, 1.0, 1.0, 2.5,
                         (255, 0, 255), "pedestrian")
    images = Renderer(red_log.world, w, h).render(replace(scene, boxes=(marker,)))
    checked = 0
    for spec, img in zip(rig(), images):
        uv = _project(spec, w, h, ego, np.array([ahead[0], ahead[1], 1.25]))
        if uv is None or not (2 <= uv[0] < w - 2 and 2 <= uv[1] < h - 2):
            continue
        r, g, b = img[int(uv[1]), int(uv[0])].astype(int)
        assert r > g + 40 and b > g + 40, f"{spec.name}: marker not at its projection"
        checked += 1
    assert checked >= 2, "front cameras should both see the marker"


def test_box_beside_and_behind_the_camera_is_clipped_at_the_near_plane(red_log):
    w, h = 128, 80
    scene = red_log.scenes[0]
    ego = scene.ego
    front = CAMERA_NAMES.index("camera_front_wide_120fov")
    cam = rig()[front]
    c, s = np.cos(ego.yaw), np.sin(ego.yaw)
    cx = ego.x + cam.x * c - 1.2 * s
    cy = ego.y + cam.x * s + 1.2 * c
    wall = BoxSnapshot(float(cx), float(cy), ego.yaw, 6.0, 0.4, 3.0, (0, 255, 0), "pedestrian")
    img = Renderer(red_log.world, w, h).render(replace(scene, boxes=(wall,)))[front]
    px = img.astype(int)
    wall_px = (px[..., 1] > px[..., 0] + 60) & (px[..., 1] > px[..., 2] + 60)
    assert wall_px[:, : w // 4].mean() > 0.5, "the wall should fill the left edge"
    assert not wall_px[:, 5 * w // 8:].any(), "the wall must not leak to the right side"


def test_clip_keeps_only_the_part_in_front_of_the_near_plane():
    spec = rig()[1]
    raster = CameraRaster(spec.intrinsics(64, 48), 64, 48)
    quad = np.array([[-0.5, 0.2, -1.0], [0.5, 0.2, -1.0], [0.5, 0.2, 3.0], [-0.5, 0.2, 3.0]])
    out = raster.clip(quad)
    assert out is not None and out[:, 2].min() >= NEAR - 1e-9
    assert np.isclose(out[:, 2].max(), 3.0)
    assert raster.clip(quad - (0, 0, 5.0)) is None


def test_traffic_light_state_is_visible_in_the_tele_camera(red_log):
    renderer = Renderer(red_log.world, 480, 272)
    tele = CAMERA_NAMES.index("camera_front_tele_30fov")

    def lamp_pixels(img):
        px = img.reshape(-1, 3).astype(int)
        red = np.sum((px[:, 0] > 200) & (px[:, 1] < 90) & (px[:, 2] < 90))
        green = np.sum((px[:, 1] > 200) & (px[:, 0] < 120) & (px[:, 2] > 80))
        return red, green

    def frame_where(state):
        for k, info in enumerate(red_log.infos):
            if info.light_state == state and info.light_gap is not None \
                    and 15 < info.light_gap < 60:
                return k
        raise AssertionError(f"no frame with a {state} light 15-60 m ahead")

    red, green = lamp_pixels(renderer.render(red_log.scenes[frame_where("red")])[tele])
    assert red > 0 and green == 0
    red, green = lamp_pixels(renderer.render(red_log.scenes[frame_where("green")])[tele])
    assert green > 0 and red == 0


@pytest.mark.parametrize("front_gap, least_wide", [(1.5, 20), (4.0, 12), (8.0, 6)])
def test_the_light_state_shows_at_the_model_input_where_a_car_stands_at_the_line(
        red_log, front_gap, least_wide):
    world = red_log.world
    light_index = next(i for i, light in enumerate(world.lights()) if light.mode == "stop")
    light = world.lights()[light_index]
    s = light.stop_s - front_gap - red_log.scenes[0].ego.front_offset
    x, y = world.route.offset_point(s, EGO_LANE_D)
    ego = EgoState(float(x), float(y), float(world.route.pose_at(s)[2]), 0.0)
    renderer = Renderer(world, 480, 272)
    views = {}
    for state in ("red", "green"):
        states = tuple(state if i == light_index else "green"
                       for i in range(len(world.lights())))
        rendered = np.stack(renderer.render(SceneSnapshot(5.0, ego, s, (), states)))
        views[state] = resize_images(rendered, (80, 128)).numpy()  # [N_cam, 3, 80, 128]
    changed = np.abs(views["red"] - views["green"]).max(axis=1) > 40  # [N_cam, 80, 128]
    counts = dict(zip(CAMERA_NAMES, changed.sum(axis=(1, 2)).tolist()))
    assert counts["camera_front_wide_120fov"] >= least_wide, counts
    assert counts["camera_front_tele_30fov"] >= 12, counts
    tele = changed[CAMERA_NAMES.index("camera_front_tele_30fov")]
    rows, cols = np.nonzero(tele)
    assert rows.max() < 40 and cols.min() > 64, "the far-side head: above the horizon, right"


def test_each_direction_has_a_far_side_head_facing_it_beyond_the_junction(red_log):
    world = red_log.world
    geometry = RoadGeometry(world)
    light = world.lights()[0]
    parts = [p for index, p in geometry.traffic_light_parts() if index == 0]
    assert len(parts) == 4
    for stop_s, far_s, travel in ((light.stop_s, light.oncoming_stop_s, 1.0),
                                  (light.oncoming_stop_s, light.stop_s, -1.0)):
        x, y, yaw = world.route.pose_at(far_s)
        t = travel * np.array([np.cos(yaw), np.sin(yaw)])
        right = np.array([t[1], -t[0]])
        far = [p for p in parts
               if len(p["lamps"]) == 1 and (np.asarray(p["ref"][:2]) - (x, y)) @ t > 0]
        assert len(far) == 1
        offset = np.asarray(far[0]["ref"][:2]) - (x, y)
        assert offset @ right > ROAD_HALF_WIDTH, "on the far corner to the driver's right"
        centres, _, facing = far[0]["lamps"][0]
        assert np.allclose(facing[:2], -t), "lit towards the approaching driver"
        assert all(1.6 < c[2] < 4.0 for c in centres), "at the height of a pole head"


def test_rig_matches_alpamayo_layout():
    specs = rig()
    assert tuple(s.name for s in specs) == CAMERA_NAMES
    fov = {s.name: s.hfov_deg for s in specs}
    assert fov["camera_front_tele_30fov"] == 30 and fov["camera_cross_left_120fov"] == 120
    for s in specs:
        r = s.rotation_base_from_camera()
        assert np.allclose(r @ r.T, np.eye(3)) and np.isclose(np.linalg.det(r), 1.0)
        q = np.array(s.quaternion_xyzw())
        assert np.isclose(np.linalg.norm(q), 1.0)
    left, right = specs[0].rotation_base_from_camera(), specs[2].rotation_base_from_camera()
    assert left[1, 2] > 0.8 and right[1, 2] < -0.8, "cross cameras must look left / right"
    with pytest.raises(ValueError):
        rig(("camera_rear",))
    with pytest.raises(ValueError):
        Renderer.check_size(4, 4)
