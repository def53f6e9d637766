"""Held-out drives as bags, and planners replayed over them: every planner sees the same
windows in the same order; results are merged over the drives."""

from __future__ import annotations

from pathlib import Path

from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.offline import OfflineReplay, Planner, ReplaySettings
from flashdrive_ros.eval.summary import SkipCounter, WindowResult, summarize
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.sim.bag import write_bag
from flashdrive_ros.train.seeds import eval_seeds

CONTROL_RATE_HZ = 10.0


def held_out_bags(directory: Path, drives: int, seconds: float,
                  workers: int | None = None) -> list[Path]:
    """Bags of the first `drives` evaluation seeds under `directory` (written when absent)."""
    bags = []
    for seed in eval_seeds(drives):
        bag = directory / f"drive_seed{seed}_{seconds:g}s"
        if not (bag / "metadata.yaml").is_file():
            write_bag(bag, seconds, seed, workers=workers)
        bags.append(bag)
    return bags


def replay_planners(planners: dict[str, Planner], model: ModelConfig, bags: list[Path],
                    max_windows: int | None = None) -> dict[str, dict]:
    """The summary block of every planner over all bags (at most `max_windows` per bag)."""
    merged: dict[str, list[WindowResult]] = {name: [] for name in planners}
    skipped = SkipCounter()
    for bag in bags:
        for planner in planners.values():
            planner.reset()
        with BagReader(bag, TopicMapping()) as reader:
            replay = OfflineReplay(reader, planners, model,
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
