"""Bend approach: plans sorted by the front bumper's distance to the next tight bend, their
offsets turned towards the bend's inside, slow plans and plans with no bend ahead left out,
and the bands pooled over drives; the plan trace reads the bend from the route."""

import numpy as np
import pytest

from flashdrive_ros.closed_loop.bend_approach import (
    BANDS,
    band,
    bend_approach,
    pooled_bend_approach,
)
from flashdrive_ros.sim.bends import BEND_RANGE_M, TIGHT_CURVATURE, bend_ahead
from flashdrive_ros.sim.scenarios import build_world


def row(gap, side, plan_3s, ego, speed=8.0):
    return {"bend_ahead_m": gap, "bend_side": side, "plan_offset_3s": plan_3s,
            "lane_offset_m": ego, "ego_speed_mps": speed}


def test_plans_go_to_the_band_of_their_bend_with_offsets_towards_its_inside():
    assert [band(g) for g in (0.0, 0.5, 9.99, 10.0, 25.0, 30.0, 44.0)] == [
        "in the bend", "0-10 m", "0-10 m", "10-20 m", "20-30 m", "30-45 m", "30-45 m"]
    trace = [row(15.0, -1.0, -1.2, -0.1), row(15.0, 1.0, -0.4, 0.2), row(0.0, -1.0, 0.3, -0.5),
             row("", "", 2.0, 0.0), row(5.0, 1.0, 1.0, 0.0, speed=3.0)]
    out = bend_approach(trace)
    assert set(out) == set(BANDS)
    assert out["10-20 m"] == [[1.2, 0.1], [-0.4, 0.2]]
    assert out["in the bend"] == [[-0.3, 0.5]]
    assert out["0-10 m"] == [] and out["20-30 m"] == []


def test_the_bands_pool_over_drives():
    drives = [{"bend_approach": bend_approach([row(15.0, -1.0, -1.0, 0.0),
                                               row(12.0, -1.0, -3.0, -0.2)])},
              {"bend_approach": bend_approach([row(18.0, 1.0, 0.5, 0.4)])},
              {"bend_approach": bend_approach([])}]
    pooled = pooled_bend_approach(drives)
    cell = pooled["10-20 m"]
    assert cell["plans"] == 3
    assert cell["plan_inside_3s_p50"] == 1.0
    assert cell["plan_inside_3s_p90"] == pytest.approx(np.percentile([1.0, 3.0, 0.5], 90),
                                                       abs=0.01)
    assert cell["ego_inside_p50"] == 0.2
    assert pooled["in the bend"] == {"plans": 0, "plan_inside_3s_p50": None,
                                     "plan_inside_3s_p90": None, "ego_inside_p50": None}


def test_the_next_tight_bend_is_read_along_the_route():
    route = build_world(1000024, 20.0).route
    grid = np.arange(0.0, route.length, 0.5)
    start = grid[np.abs(route.curvature_at(grid)) >= TIGHT_CURVATURE][0]
    gap, side = bend_ahead(route, start - 12.0)
    assert gap == pytest.approx(12.0, abs=1.0) and side == np.sign(route.curvature_at(start))
    assert bend_ahead(route, start + 2.0)[0] == 0.0
    assert all(np.isnan(bend_ahead(route, start - BEND_RANGE_M - 2.0)))
