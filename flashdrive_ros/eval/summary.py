"""Per-window results of one mode and their aggregate: the report.json block of that mode."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from flashdrive_ros.engine.types import STAGES
from flashdrive_ros.eval.metrics import mean_or_none, named_sides, percentiles


@dataclass
class WindowResult:
    """One planned window. samples: [K, T, 3] (x, y, yaw) from the engine, [K, T, 2] (x, y)
    as recorded through ROS, in the t0 ego frame; truth and constant_velocity: [T, 3].
    decision and tags: the sim label nearest t0 (None / () without labels)."""

    t0: float
    samples: np.ndarray
    truth: np.ndarray
    constant_velocity: np.ndarray
    metrics: dict[str, float]
    timings_ms: dict[str, float]
    accepted_lengths: list[int] = field(default_factory=list)
    tokens_generated: int = 0
    coc_text: str = ""
    decision: str | None = None
    predicted_decision: str | None = None
    plan_age_s: float | None = None
    tags: tuple[str, ...] = ()
    label_sides: tuple[str, ...] = ()

    @property
    def decision_match(self) -> bool | None:
        """The labelled decision against the decision of the CoC's nearest labelled example
        (a CoC sharing no word with any example matches nothing)."""
        if self.decision is None:
            return None
        return self.decision == self.predicted_decision

    @property
    def side_match(self) -> bool | None:
        """On a window whose labelled CoC names a side (a bend, a nudge) and whose CoC names
        the labelled decision: the CoC names the same sides in the same order; None
        elsewhere (a wrong decision is counted by decision_match)."""
        if not self.label_sides or not self.decision_match:
            return None
        return named_sides(self.coc_text) == self.label_sides


@dataclass
class SkipCounter:
    """Windows that were not planned, by reason code, with the first message of each."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, code: str, message: str) -> None:
        self.counts[code] += 1
        self.examples.setdefault(code, message)

    def to_dict(self) -> dict:
        return {"total": int(sum(self.counts.values())),
                "reasons": dict(sorted(self.counts.items())),
                "examples": dict(sorted(self.examples.items()))}


def summarize(results: list[WindowResult], skipped: SkipCounter,
              control_rate_hz: float) -> dict:
    """The report block of one mode; every metric is a mean over the planned windows."""
    metric_names = list(results[0].metrics) if results else []
    block: dict = {"windows": len(results)}
    for name in metric_names:
        block[name] = mean_or_none(r.metrics[name] for r in results)
    block["latency_ms"] = {stage: percentiles(r.timings_ms[stage] for r in results
                                              if stage in r.timings_ms) for stage in STAGES}
    block["accepted_length_mean"] = mean_or_none(
        a for r in results for a in r.accepted_lengths)
    block["tokens_per_window"] = mean_or_none(r.tokens_generated for r in results)
    period_ms = 1000.0 / control_rate_hz
    totals = [r.timings_ms["total"] for r in results if "total" in r.timings_ms]
    block["control_rate_hz"] = control_rate_hz
    block["within_control_period"] = (
        float(np.mean(np.array(totals) <= period_ms)) if totals else None)
    block.update(match_rates(results))
    ages = [r.plan_age_s for r in results if r.plan_age_s is not None]
    if ages:
        block["plan_age_s"] = percentiles(ages)
    block["skipped_windows"] = skipped.to_dict()
    block["scenarios"] = grouped(results, [r.tags for r in results])
    block["per_window"] = [
        {"t0": round(r.t0, 6), "minade6_6s": r.metrics.get("minade6_6s"),
         "total_ms": r.timings_ms.get("total"), "accepted_length_mean":
         mean_or_none(r.accepted_lengths), "tokens": r.tokens_generated, "coc": r.coc_text,
         "decision": r.decision, "predicted_decision": r.predicted_decision,
         "decision_match": r.decision_match, "side_match": r.side_match, "tags": list(r.tags)}
        for r in results]
    return block


def match_rates(results: list[WindowResult]) -> dict:
    """Decision match over the labelled windows, side match over those whose label names a
    side and whose decision matches, with their window counts."""
    matches = [float(r.decision_match) for r in results if r.decision_match is not None]
    sides = [float(r.side_match) for r in results if r.side_match is not None]
    return {"decision_match_rate": mean_or_none(matches), "labelled_windows": len(matches),
            "side_match_rate": mean_or_none(sides), "side_windows": len(sides)}


def group_block(results: list[WindowResult]) -> dict:
    """Accuracy of a group of windows: mean minADE1 / minADE6 / constant-velocity ADE at
    6.4 s, minADE1 / CV as the ratio of those two means over the same windows, decision
    match over the labelled ones, side match over those whose label names a side and whose
    decision matches."""
    minade1 = mean_or_none(r.metrics["minade1_6s"] for r in results)
    cv = mean_or_none(r.metrics["cv_minade_6s"] for r in results)
    return {"windows": len(results), "minade1_6s": minade1,
            "minade6_6s": mean_or_none(r.metrics["minade6_6s"] for r in results),
            "cv_minade_6s": cv,
            "minade1_cv_ratio": minade1 / cv if minade1 is not None and cv else None,
            **match_rates(results)}


def group_members(keys: list[Iterable[str]]) -> dict[str, list[int]]:
    """{group: indices i whose keys[i] name it} (a window may be in several groups, e.g. its
    scenario tags, or in none), groups sorted by name."""
    members: dict[str, list[int]] = {}
    for i, names in enumerate(keys):
        for name in names:
            members.setdefault(name, []).append(i)
    return dict(sorted(members.items()))


def grouped(results: list[WindowResult], keys: list[Iterable[str]]) -> dict[str, dict]:
    """{group: group_block} where keys[i] names the groups of results[i]."""
    if len(keys) != len(results):
        raise ValueError(f"{len(keys)} key sets for {len(results)} windows")
    return {name: group_block([results[i] for i in indices])
            for name, indices in group_members(keys).items()}


def compare_blocks(baseline: dict, flashdrive: dict) -> dict:
    """Speedups (baseline / flashdrive latency) and flashdrive - baseline metric deltas."""
    out: dict = {}
    for stage in STAGES:
        for q in ("p50", "p90"):
            base = baseline["latency_ms"][stage][q]
            fast = flashdrive["latency_ms"][stage][q]
            out[f"speedup_{stage}_{q}"] = base / fast if base and fast else None
    deltas = {}
    for name, value in flashdrive.items():
        if isinstance(value, float) and isinstance(baseline.get(name), float) \
                and (name.startswith(("minade", "fde", "minfde", "cv_"))
                     or name in ("accepted_length_mean", "tokens_per_window",
                                 "decision_match_rate")):
            deltas[name] = value - baseline[name]
    out["metric_deltas"] = deltas
    return out
