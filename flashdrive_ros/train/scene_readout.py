"""Scene readout: a training-only linear head on the backbone's hidden state at the last prompt
token (the position whose logits give the CoC's first, deciding token) that reads the lamp of
the light ahead and the gap to the vehicle ahead, so that the target stage teaches the language
model to carry both to where it decides. The head is not part of the model directory.

Per step of a drive the expert's readings are kept as `scene` [S, 3] (SCENE_COLUMNS): the lamp
(index into LAMPS) of the nearest light ahead, its gap from the front bumper to the stop line
and the gap to the nearest vehicle in the ego's path (NaN when none). The head's classes: the
lamp of a light within LAMP_RANGE_M (else "none"), and the vehicle gap in GAP_EDGES_M bins
("none" beyond the last edge or without a vehicle).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from flashdrive_ros.sim.expert import ExpertInfo

LAMPS = ("none", "red", "yellow", "green")
SCENE_COLUMNS = ("lamp", "light_gap_m", "vehicle_gap_m")
LAMP_RANGE_M = 40.0  # m, front bumper to the line: a lamp farther ahead is read as "none"
GAP_EDGES_M = (6.0, 12.0, 20.0, 40.0)  # m, front bumper to the vehicle's rear
GAP_CLASSES = ("0-6", "6-12", "12-20", "20-40", "none")


def scene_readings(infos: Sequence[ExpertInfo]) -> np.ndarray:
    """[S, 3] float64 (SCENE_COLUMNS) of the expert's readings."""
    out = np.full((len(infos), len(SCENE_COLUMNS)), np.nan)
    for k, info in enumerate(infos):
        out[k, 0] = LAMPS.index(info.light_state) if info.light_state else 0
        if info.light_gap is not None:
            out[k, 1] = info.light_gap
        if info.vehicle_gap is not None:
            out[k, 2] = info.vehicle_gap
    return out


def lamp_classes(scene: torch.Tensor) -> torch.Tensor:
    """scene: [B, 3] -> [B] long index into LAMPS; a light beyond LAMP_RANGE_M is "none"."""
    near = torch.nan_to_num(scene[:, 1], nan=math.inf) <= LAMP_RANGE_M
    return torch.where(near, scene[:, 0], 0.0).long()


def gap_classes(scene: torch.Tensor) -> torch.Tensor:
    """scene: [B, 3] -> [B] long index into GAP_CLASSES."""
    gap = torch.nan_to_num(scene[:, 2], nan=math.inf)
    edges = torch.tensor(GAP_EDGES_M, dtype=gap.dtype, device=gap.device)
    return torch.bucketize(gap, edges, right=True)


def scene_class_counts(scene: torch.Tensor) -> dict[str, dict[str, int]]:
    """scene: [N, 3] -> windows per lamp class and per gap class."""
    lamp = torch.bincount(lamp_classes(scene), minlength=len(LAMPS))
    gap = torch.bincount(gap_classes(scene), minlength=len(GAP_CLASSES))
    return {"lamp": dict(zip(LAMPS, map(int, lamp))), "gap": dict(zip(GAP_CLASSES, map(int, gap)))}


class SceneReadout(nn.Module):
    """Linear head: hidden [B, H] -> (lamp logits [B, len(LAMPS)], gap logits
    [B, len(GAP_CLASSES)])."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, len(LAMPS) + len(GAP_CLASSES))

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.proj(hidden).float()  # logits: [B, len(LAMPS) + len(GAP_CLASSES)]
        return logits[:, :len(LAMPS)], logits[:, len(LAMPS):]


def readout_losses(readout: SceneReadout, hidden: torch.Tensor, scene: torch.Tensor
                   ) -> dict[str, torch.Tensor]:
    """hidden: [B, H] at the last prompt token; scene: [B, 3] -> readout_loss (the mean of the
    two cross-entropies), lamp_hit [B] (1.0 / 0.0 where a light is in range, NaN elsewhere)
    and gap_hit [B] (1.0 / 0.0)."""
    lamp_logits, gap_logits = readout(hidden)
    lamp, gap = lamp_classes(scene), gap_classes(scene)
    loss = 0.5 * (F.cross_entropy(lamp_logits, lamp) + F.cross_entropy(gap_logits, gap))
    with torch.no_grad():
        lamp_hit = (lamp_logits.argmax(-1) == lamp).float()  # lamp_hit: [B]
        lamp_hit = torch.where(lamp > 0, lamp_hit, math.nan)
        gap_hit = (gap_logits.argmax(-1) == gap).float()  # gap_hit: [B]
    return {"readout_loss": loss, "lamp_hit": lamp_hit, "gap_hit": gap_hit}
