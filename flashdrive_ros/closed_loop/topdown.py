"""Top-down PNG of a closed-loop drive (matplotlib, Agg): road and lanes, stop lines, the
route, the ego path coloured by speed, every few plans, the vehicles and pedestrians where
they ended, collision and red-light markers."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.patches import Polygon  # noqa: E402

from flashdrive_ros.sim.rectangles import rectangle  # noqa: E402
from flashdrive_ros.closed_loop.runner import DriveResult  # noqa: E402
from flashdrive_ros.sim.world import LANE_WIDTH, ROAD_HALF_WIDTH  # noqa: E402

MARGIN = 30.0
PLAN_EVERY = 10
VIEW_MARGIN = 20.0


def _ribbon(route, s: np.ndarray, d0: float, d1: float) -> np.ndarray:
    x0, y0 = route.offset_point(s, d0)
    x1, y1 = route.offset_point(s, d1)
    return np.stack([np.concatenate([x0, x1[::-1]]), np.concatenate([y0, y1[::-1]])], axis=1)


def draw_drive(result: DriveResult, path: Path) -> Path:
    world, rows = result.world, result.rows
    route = world.route
    s_lo = max(float(rows[:, 7].min()) - MARGIN, 0.0)
    s_hi = min(float(rows[:, 7].max()) + MARGIN, route.length)
    s = np.arange(s_lo, s_hi, 1.0)
    view_lo = rows[:, 1:3].min(axis=0) - VIEW_MARGIN
    view_hi = rows[:, 1:3].max(axis=0) + VIEW_MARGIN
    span = view_hi - view_lo
    fig, ax = plt.subplots(figsize=(12, float(np.clip(12 * span[1] / span[0], 4, 12)) + 1))
    ax.add_patch(Polygon(_ribbon(route, s, -ROAD_HALF_WIDTH, ROAD_HALF_WIDTH),
                         color="0.8", zorder=0))
    for inter in world.intersections:
        if s_lo - 20 < inter.s < s_hi + 20:
            lo = -ROAD_HALF_WIDTH - 25.0
            hi = -ROAD_HALF_WIDTH if inter.side_only else ROAD_HALF_WIDTH + 25.0
            ss = np.array([inter.s - inter.half_width, inter.s + inter.half_width])
            ax.add_patch(Polygon(_ribbon(route, ss, lo, hi), color="0.8", zorder=0))
    for d, style in ((0.0, "--"), (-LANE_WIDTH, "-"), (LANE_WIDTH, "-")):
        ax.plot(*route.offset_point(s, d), style, color="white", lw=1, zorder=1)
    for i, light in enumerate(world.lights()):
        if s_lo < light.stop_s < s_hi:
            xy = _ribbon(route, np.array([light.stop_s - 0.2, light.stop_s + 0.2]),
                         -LANE_WIDTH, 0.0)
            ax.add_patch(Polygon(xy, color="firebrick", zorder=2))
            ax.annotate(f"light {i}", xy[0], fontsize=7, color="firebrick")
    ax.plot(*route.offset_point(s, -LANE_WIDTH / 2), ":", color="tab:blue", lw=1,
            label="route (lane centre)", zorder=2)
    for plan in result.plans[::PLAN_EVERY]:
        ax.plot(plan.xy[:, 0], plan.xy[:, 1], color="tab:purple", lw=0.6, alpha=0.5,
                zorder=3)
    points = rows[:, 1:3]
    segments = np.stack([points[:-1], points[1:]], axis=1)
    lines = LineCollection(segments, cmap="viridis", linewidths=2.5, zorder=4)
    lines.set_array(rows[:-1, 4])
    ax.add_collection(lines)
    fig.colorbar(lines, ax=ax, shrink=0.8, label="ego speed (m/s)")
    for veh in world.vehicles:
        if veh.active and s_lo - 10 < route.project((veh.x, veh.y))[0] < s_hi + 10:
            ax.add_patch(Polygon(rectangle(veh.x, veh.y, veh.yaw, veh.length, veh.width),
                                 fc="tab:orange" if veh.kind != "parked" else "0.4",
                                 ec="k", lw=0.5, zorder=5))
    for ped in world.pedestrians:
        x, y = ped.position()
        if np.all((view_lo <= (x, y)) & (view_hi >= (x, y))):
            ax.plot(x, y, "o", color="tab:pink", ms=5, zorder=5)
    x, y, yaw = rows[-1, 1:4]
    c = 1.4
    ax.add_patch(Polygon(rectangle(x + c * np.cos(yaw), y + c * np.sin(yaw), yaw, 4.8, 1.9),
                         fc="tab:green", ec="k", lw=0.5, zorder=6, label="ego (end)"))
    ax.plot([], [], color="tab:purple", lw=0.6, label=f"every {PLAN_EVERY}th plan")
    metrics = result.metrics
    for event in metrics["collision_events"]:
        ax.plot(event["x"], event["y"], "rx", ms=14, mew=3, zorder=7)
    for event in metrics["red_light_events"]:
        ax.plot(*route.offset_point(event["route_s"], -LANE_WIDTH / 2), "r*", ms=14,
                zorder=7)
    ax.set_aspect("equal")
    ax.set_xlim(view_lo[0], view_hi[0])
    ax.set_ylim(view_lo[1], view_hi[1])
    ax.set_title(f"seed {result.seed} {result.variant}: {metrics['collisions']} collisions, "
                 f"{metrics['red_light_violations']} red-light, off-road "
                 f"{metrics['off_road_s']:.1f} s, completion "
                 f"{metrics['route_completion']:.2f}", fontsize=10)
    ax.set_xlabel("x (m)")
    ax.set_ylabel("y (m)")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
