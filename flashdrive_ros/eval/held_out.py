"""Held-out drives, and planners replayed over them: every planner sees the same windows in
the same order; results are merged over the drives. Needs no rosbags: drives come straight
from the simulator (`SimDriveSource`), or as any other opened `RecordSource` (a `BagReader`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from flashdrive_ros.eval.offline import OfflineReplay, Planner, ReplaySettings
from flashdrive_ros.eval.records import RecordSource
from flashdrive_ros.eval.sim_source import SimDriveSource
from flashdrive_ros.eval.summary import SkipCounter, WindowResult, summarize
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.sim.seeds import eval_seeds

CONTROL_RATE_HZ = 10.0


def held_out_drives(drives: int, seconds: float, workers: int = 1) -> list[SimDriveSource]:
    """The first `drives` evaluation seeds, `seconds` long, rendered as their bags hold them."""
    return [SimDriveSource(seed, seconds, workers=workers) for seed in eval_seeds(drives)]


@dataclass
class DriveWindows:
    """One drive replayed by every planner on the same windows: results per planner, and per
    window the ego speed (m/s, as the constant-velocity baseline takes it) and the time into
    the drive (s) at t0."""

    results: dict[str, list[WindowResult]]
    speeds: list[float]
    elapsed: list[float]
    skipped: SkipCounter


def replay_drive(planners: dict[str, Planner], model: ModelConfig,
                 source: AbstractContextManager[RecordSource],
                 max_windows: int | None = None) -> DriveWindows:
    for planner in planners.values():
        planner.reset()
    with source as records:
        replay = OfflineReplay(records, planners, model,
                               ReplaySettings(max_windows=max_windows, progress=False))
        out = replay.run()
        start = records.start_time
    t0s = [r.t0 for r in next(iter(out.results.values()))]
    speeds = [float(np.linalg.norm(replay.track.velocity(t0, model.action.dt))) for t0 in t0s]
    return DriveWindows(out.results, speeds, [t0 - start for t0 in t0s],
                        next(iter(out.skipped.values())))


def replay_planners(planners: dict[str, Planner], model: ModelConfig,
                    sources: list[AbstractContextManager[RecordSource]],
                    max_windows: int | None = None) -> dict[str, dict]:
    """The summary block of every planner over all sources (at most `max_windows` each)."""
    merged: dict[str, list[WindowResult]] = {name: [] for name in planners}
    skipped = SkipCounter()
    for source in sources:
        drive = replay_drive(planners, model, source, max_windows)
        for name in planners:
            merged[name].extend(drive.results[name])
        skipped.counts.update(drive.skipped.counts)
        for code, message in drive.skipped.examples.items():
            skipped.examples.setdefault(code, message)
    return {name: summarize(results, skipped, CONTROL_RATE_HZ)
            for name, results in merged.items()}
