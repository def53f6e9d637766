"""Held-out drives, and planners replayed over them: every planner sees the same windows in
the same order; results are merged over the drives. Needs no rosbags: drives come straight
from the simulator (`SimDriveSource`), or as any other opened `RecordSource` (a `BagReader`)."""

from __future__ import annotations

from contextlib import AbstractContextManager

from flashdrive_ros.eval.offline import OfflineReplay, Planner, ReplaySettings
from flashdrive_ros.eval.records import RecordSource
from flashdrive_ros.eval.sim_source import SimDriveSource
from flashdrive_ros.eval.summary import SkipCounter, WindowResult, summarize
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.train.seeds import eval_seeds

CONTROL_RATE_HZ = 10.0


def held_out_drives(drives: int, seconds: float, workers: int = 1) -> list[SimDriveSource]:
    """The first `drives` evaluation seeds, `seconds` long, rendered as their bags hold them."""
    return [SimDriveSource(seed, seconds, workers=workers) for seed in eval_seeds(drives)]


def replay_planners(planners: dict[str, Planner], model: ModelConfig,
                    sources: list[AbstractContextManager[RecordSource]],
                    max_windows: int | None = None) -> dict[str, dict]:
    """The summary block of every planner over all sources (at most `max_windows` each)."""
    merged: dict[str, list[WindowResult]] = {name: [] for name in planners}
    skipped = SkipCounter()
    for source in sources:
        for planner in planners.values():
            planner.reset()
        with source as records:
            replay = OfflineReplay(records, planners, model,
                                   ReplaySettings(max_windows=max_windows,
                                                  progress=False)).run()
        for name in planners:
            merged[name].extend(replay.results[name])
        shared = next(iter(replay.skipped.values()))
        skipped.counts.update(shared.counts)
        for code, message in shared.examples.items():
            skipped.examples.setdefault(code, message)
    return {name: summarize(results, skipped, CONTROL_RATE_HZ)
            for name, results in merged.items()}
