"""Simulator seed ranges: training drives and held-out evaluation drives never overlap."""

from __future__ import annotations

TRAIN_SEEDS = range(0, 100_000)
EVAL_SEEDS = range(1_000_000, 1_001_000)


def train_seeds(count: int, offset: int = 0) -> list[int]:
    if offset + count > len(TRAIN_SEEDS):
        raise ValueError(f"only {len(TRAIN_SEEDS)} training seeds")
    return list(TRAIN_SEEDS[offset:offset + count])


def eval_seeds(count: int) -> list[int]:
    if count > len(EVAL_SEEDS):
        raise ValueError(f"only {len(EVAL_SEEDS)} evaluation seeds")
    return list(EVAL_SEEDS[:count])


def is_eval_seed(seed: int) -> bool:
    return seed in EVAL_SEEDS
