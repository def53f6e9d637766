"""What a drive's recorded stream holds, as the offline replay reads it: camera images,
odometry and labels in log-time order (from a bag, `eval/bag.py`, or straight from the
simulator, `eval/sim_source.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from flashdrive_ros.eval.topics import TopicMapping


@dataclass(frozen=True)
class ImageRecord:
    camera: int
    stamp: float
    rgb: np.ndarray | None
    error: str | None = None


@dataclass(frozen=True)
class OdometryRecord:
    stamp: float
    position: np.ndarray  # [3] world
    quaternion: np.ndarray  # [4] xyzw, world from body
    linear_velocity: np.ndarray  # [3]


@dataclass(frozen=True)
class LabelRecord:
    stamp: float
    values: dict = field(default_factory=dict)


Record = ImageRecord | OdometryRecord | LabelRecord


class RecordSource(Protocol):
    """start_time / end_time in seconds (end: just after the last record)."""

    topics: TopicMapping

    @property
    def start_time(self) -> float: ...

    @property
    def end_time(self) -> float: ...

    def records(self) -> Iterator[Record]: ...

    def odometry(self) -> list[OdometryRecord]: ...

    def labels(self) -> list[LabelRecord]: ...
