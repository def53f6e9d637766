"""Scene readout: a training-only linear head on the backbone's hidden state at the last prompt
token (the position whose logits give the CoC's first, deciding token) that reads the lamp of
the light ahead, the gap to the vehicle ahead, whether that vehicle stands and where the next
tight bend starts, so that the target stage teaches the language model to carry them to where
it decides. The head is not part of the model directory.

Per step of a drive the expert's readings are kept as `scene` [S, 6] (SCENE_COLUMNS): the lamp
(index into LAMPS) of the nearest light ahead, its gap from the front bumper to the stop line,
the gap to the nearest vehicle in the ego's path and that vehicle's speed (NaN when none), the
route ahead of the front bumper to the start of the next tight bend (sim/bends.py; 0 in one,
NaN with none within its range) and its side (+1 left, -1 right).
The head's classes: the lamp of a light within LAMP_RANGE_M (else "none"), the vehicle gap in
GAP_EDGES_M bins ("none" beyond the last edge or without a vehicle), the motion of a vehicle
within the last edge (MOTIONS: standing below STANDING_MPS) and the bend's side and gap in
BEND_EDGES_M bins (BENDS).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from flashdrive_ros.sim.bends import bend_ahead
from flashdrive_ros.sim.expert import ExpertInfo
from flashdrive_ros.sim.path import Path
from flashdrive_ros.train.drive import SCENE_COLUMNS

LAMPS = ("none", "red", "yellow", "green")
LAMP_RANGE_M = 40.0  # m, front bumper to the line: a lamp farther ahead is read as "none"
GAP_EDGES_M = (6.0, 12.0, 20.0, 40.0)  # m, front bumper to the vehicle's rear
GAP_CLASSES = ("0-6", "6-12", "12-20", "20-40", "none")
MOTIONS = ("none", "standing", "moving")
STANDING_MPS = 0.5  # m/s: a vehicle slower than this stands
BEND_EDGES_M = (10.0, 25.0)  # m, front bumper to the bend's start
BENDS = ("none", "right 0-10", "right 10-25", "right 25-45", "left 0-10", "left 10-25",
         "left 25-45")


def scene_readings(infos: Sequence[ExpertInfo], route: Path) -> np.ndarray:
    """[S, 6] float64 (SCENE_COLUMNS) of the expert's readings on `route`."""
    out = np.full((len(infos), len(SCENE_COLUMNS)), np.nan)
    for k, info in enumerate(infos):
        out[k, 4:6] = bend_ahead(route, info.front_s)
        out[k, 0] = LAMPS.index(info.light_state) if info.light_state else 0
        if info.light_gap is not None:
            out[k, 1] = info.light_gap
        if info.vehicle_gap is not None:
            out[k, 2] = info.vehicle_gap
        if info.vehicle_speed is not None:
            out[k, 3] = info.vehicle_speed
    return out


def lamp_classes(scene: torch.Tensor) -> torch.Tensor:
    """scene: [B, 4] -> [B] long index into LAMPS; a light beyond LAMP_RANGE_M is "none"."""
    near = torch.nan_to_num(scene[:, 1], nan=math.inf) <= LAMP_RANGE_M
    return torch.where(near, scene[:, 0], 0.0).long()


def gap_classes(scene: torch.Tensor) -> torch.Tensor:
    """scene: [B, 4] -> [B] long index into GAP_CLASSES."""
    gap = torch.nan_to_num(scene[:, 2], nan=math.inf)
    edges = torch.tensor(GAP_EDGES_M, dtype=gap.dtype, device=gap.device)
    return torch.bucketize(gap, edges, right=True)


def bend_classes(scene: torch.Tensor) -> torch.Tensor:
    """scene: [B, 6] -> [B] long index into BENDS."""
    gap = torch.nan_to_num(scene[:, 4], nan=math.inf)
    edges = torch.tensor(BEND_EDGES_M, dtype=gap.dtype, device=gap.device)
    band = torch.bucketize(gap, edges, right=True)  # band: [B] 0, 1, 2
    left = scene[:, 5] > 0
    return torch.where(torch.isfinite(gap), 1 + band + 3 * left.long(), 0).long()


def motion_classes(scene: torch.Tensor) -> torch.Tensor:
    """scene: [B, 4] -> [B] long index into MOTIONS; "none" without a vehicle within the last
    of GAP_EDGES_M."""
    near = gap_classes(scene) < len(GAP_EDGES_M)
    standing = torch.nan_to_num(scene[:, 3], nan=math.inf) < STANDING_MPS
    return torch.where(near, torch.where(standing, 1, 2), 0).long()


class Reading(NamedTuple):
    """One readout head: its class names, the classes of scene rows, and the class that means
    nothing to read (its rows are left out of the hit rate; None: every row counts)."""

    names: tuple[str, ...]
    classes: Callable[[torch.Tensor], torch.Tensor]
    unread: int | None


CLASSES = {"lamp": Reading(LAMPS, lamp_classes, 0),
           "gap": Reading(GAP_CLASSES, gap_classes, None),
           "motion": Reading(MOTIONS, motion_classes, 0),
           "bend": Reading(BENDS, bend_classes, 0)}


def scene_class_counts(scene: torch.Tensor) -> dict[str, dict[str, int]]:
    """scene: [N, 6] -> windows per class of each reading (lamp, gap, motion, bend)."""
    counts = {}
    for reading, (names, classes, _) in CLASSES.items():
        count = torch.bincount(classes(scene), minlength=len(names))
        counts[reading] = dict(zip(names, map(int, count)))
    return counts


class SceneReadout(nn.Module):
    """Linear head: hidden [B, H] -> logits per reading of CLASSES, in its order
    ([B, len(LAMPS)], [B, len(GAP_CLASSES)], [B, len(MOTIONS)], [B, len(BENDS)])."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.sizes = [len(reading.names) for reading in CLASSES.values()]
        self.proj = nn.Linear(hidden_size, sum(self.sizes))

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.proj(hidden).float()  # logits: [B, sum(sizes)]
        return logits.split(self.sizes, dim=-1)


def readout_losses(readout: SceneReadout, hidden: torch.Tensor, scene: torch.Tensor
                   ) -> dict[str, torch.Tensor]:
    """hidden: [B, H] at the last prompt token; scene: [B, 6] -> readout_loss (the mean of the
    cross-entropies of CLASSES), lamp_hit [B] (1.0 / 0.0 where a light is in range, NaN
    elsewhere), gap_hit [B] (1.0 / 0.0), motion_hit [B] (1.0 / 0.0 where a vehicle is
    within range, NaN elsewhere) and bend_hit [B] (1.0 / 0.0 where a tight bend is within
    range, NaN elsewhere)."""
    losses, hits = [], {}
    for (name, reading), logits in zip(CLASSES.items(), readout(hidden)):
        target = reading.classes(scene)  # target: [B]
        losses.append(F.cross_entropy(logits, target))
        with torch.no_grad():
            hit = (logits.argmax(-1) == target).float()  # hit: [B]
            if reading.unread is not None:
                hit = torch.where(target != reading.unread, hit, math.nan)
            hits[f"{name}_hit"] = hit
    return {"readout_loss": torch.stack(losses).mean(), **hits}


def check_readout_blind(readout_blind: float, history_dropout: float,
                       scene_weight: float) -> None:
    """Blind windows need the readout and leave some windows with their history."""
    if not 0.0 <= readout_blind < 1.0:
        raise ValueError(f"readout_blind must be in [0, 1), got {readout_blind}")
    if readout_blind > 0.0 and not scene_weight > 0.0:
        raise ValueError("readout_blind needs scene_weight > 0 (blind windows train the "
                         "readout alone)")
    if history_dropout + readout_blind >= 1.0:
        raise ValueError(f"history_dropout + readout_blind must be < 1, got "
                         f"{history_dropout} + {readout_blind}")
