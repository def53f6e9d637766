"""Trajectory and latency metrics (numpy only).

Trajectories are [T, >=2] or [K, T, >=2] with waypoint i at (i + 1) * dt after t0; only x and
y enter the displacement errors. A horizon of H seconds uses the first round(H / dt) waypoints.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

HORIZONS_S = {"3s": 3.0, "6s": 6.4}
MIN_OVER = {"minade1": 1, "minade6": 6}
PERCENTILES = (50, 90, 99)


def horizon_steps(seconds: float, dt: float, available: int) -> int:
    steps = int(round(seconds / dt))
    if not 1 <= steps <= available:
        raise ValueError(f"horizon {seconds} s at dt {dt} needs {steps} waypoints, "
                         f"trajectory has {available}")
    return steps


def _xy(trajectory: np.ndarray, ndim: int) -> np.ndarray:
    array = np.asarray(trajectory, dtype=np.float64)
    if array.ndim != ndim or array.shape[-1] < 2:
        raise ValueError(f"expected a [{'K, ' if ndim == 3 else ''}T, >=2] trajectory, got "
                         f"{array.shape}")
    return array[..., :2]


def displacement(samples: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """samples [K, T, >=2], truth [T, >=2] -> Euclidean error [K, T]."""
    pred, gt = _xy(samples, 3), _xy(truth, 2)
    if pred.shape[1] != gt.shape[0]:
        raise ValueError(f"samples have {pred.shape[1]} waypoints, truth {gt.shape[0]}")
    return np.linalg.norm(pred - gt[None], axis=-1)


def ade(trajectory: np.ndarray, truth: np.ndarray, steps: int | None = None) -> float:
    errors = displacement(_xy(trajectory, 2)[None], truth)[0]
    return float(errors[:steps].mean())


def fde(trajectory: np.ndarray, truth: np.ndarray, steps: int | None = None) -> float:
    errors = displacement(_xy(trajectory, 2)[None], truth)[0]
    return float(errors[:steps][-1])


def min_ade(samples: np.ndarray, truth: np.ndarray, k: int, steps: int | None = None) -> float:
    """Best ADE over the first min(k, K) samples."""
    errors = displacement(samples, truth)[:k, :steps]
    return float(errors.mean(axis=1).min())


def min_fde(samples: np.ndarray, truth: np.ndarray, k: int, steps: int | None = None) -> float:
    errors = displacement(samples, truth)[:k, :steps]
    return float(errors[:, -1].min())


def window_metrics(samples: np.ndarray, truth: np.ndarray, constant_velocity: np.ndarray,
                   dt: float) -> dict[str, float]:
    """minADE1/minADE6 and FDE at every horizon for the plan, ADE/FDE for the CV baseline."""
    waypoints = np.asarray(truth).shape[0]
    out: dict[str, float] = {}
    for name, seconds in HORIZONS_S.items():
        steps = horizon_steps(seconds, dt, waypoints)
        for metric, k in MIN_OVER.items():
            out[f"{metric}_{name}"] = min_ade(samples, truth, k, steps)
        out[f"fde1_{name}"] = min_fde(samples, truth, 1, steps)
        out[f"minfde6_{name}"] = min_fde(samples, truth, 6, steps)
        out[f"cv_minade_{name}"] = ade(constant_velocity, truth, steps)
        out[f"cv_fde_{name}"] = fde(constant_velocity, truth, steps)
    return out


def percentiles(values: Iterable[float]) -> dict[str, float | None]:
    """p50/p90/p99 (linear interpolation), mean and max; None for every key when empty."""
    array = np.asarray(list(values), dtype=np.float64)
    keys = [f"p{p}" for p in PERCENTILES] + ["mean", "max"]
    if array.size == 0:
        return dict.fromkeys(keys)
    stats = [float(np.percentile(array, p)) for p in PERCENTILES]
    return dict(zip(keys, stats + [float(array.mean()), float(array.max())]))


def mean_or_none(values: Iterable[float]) -> float | None:
    array = np.asarray(list(values), dtype=np.float64)
    return float(array.mean()) if array.size else None


SIDES = frozenset({"left", "right"})


def words(text: str) -> frozenset[str]:
    return frozenset(_word_list(text))


def _word_list(text: str) -> list[str]:
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def named_sides(text: str) -> tuple[str, ...]:
    """The sides ("left", "right") a CoC names, in the order it names them."""
    return tuple(w for w in _word_list(text) if w in SIDES)


def nearest_decision(text: str, examples: list[tuple[frozenset[str], str]]) -> str | None:
    """The decision of the labelled CoC example sharing the most words with `text` (Jaccard
    similarity); None when nothing is shared or there are no examples."""
    query = words(text)
    best, best_score = None, 0.0
    for example, decision in examples:
        union = len(query | example)
        score = len(query & example) / union if union else 0.0
        if score > best_score:
            best, best_score = decision, score
    return best
