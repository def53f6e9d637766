"""Tight bends of a route: where its |curvature| reaches TIGHT_CURVATURE, and the next one
ahead of a point (the scene readout's bend, the lane forks' and the lane probe's episodes and
the closed-loop bend approach read them alike)."""

from __future__ import annotations

import math

import numpy as np

from flashdrive_ros.sim.path import Path

TIGHT_CURVATURE = 1.0 / 45.0  # 1/m, the least |curvature| of a tight bend
BEND_RANGE_M = 45.0  # m of route ahead searched for the next tight bend
BEND_STEP_M = 1.0  # m between the route samples searched


def bend_ahead(route: Path, s: float) -> tuple[float, float]:
    """(gap, side) of the next tight bend from route arc length s:
    the route from s to where it first reaches it within BEND_RANGE_M (0 where it already
    has) and the side it turns to (+1 left, -1 right); (NaN, NaN) with none."""
    ahead = np.arange(0.0, BEND_RANGE_M + BEND_STEP_M / 2, BEND_STEP_M)  # ahead: [G] m
    kappa = route.curvature_at(s + ahead)  # kappa: [G] 1/m, left +
    tight = np.flatnonzero(np.abs(kappa) >= TIGHT_CURVATURE)
    if not tight.size:
        return math.nan, math.nan
    return float(ahead[tight[0]]), float(np.sign(kappa[tight[0]]))
