"""Held-out drives replayed with streaming on and off, broken down per scenario tag, labelled
decision, ego speed band, time into the drive and, for the windows where the ego stands, the
labelled decision (does the model start from rest at green, or read it from its own motion)
(minADE against constant velocity on the same windows, decision match, side match: a bend's or
a nudge's side named correctly), the streaming-vs-full
agreement, and the targets a model is held to; as a JSON-ready dict and markdown tables.
Drives replayed with streaming alone give the same report without the agreement; the checks
that need full prefill are then marked not measured."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from flashdrive_ros.eval.held_out import DriveWindows
from flashdrive_ros.eval.metrics import mean_or_none
from flashdrive_ros.eval.model_compare import PREFILLS
from flashdrive_ros.eval.summary import WindowResult, group_block, group_members
from flashdrive_ros.sim.labels import STANDING_MPS

STREAMING = next(name for name, streaming in PREFILLS.items() if streaming)
FULL = next(name for name, streaming in PREFILLS.items() if not streaming)
MODES = (STREAMING, FULL)
SPEED_EDGES_MPS = (2.0, 6.0, 10.0)
TIME_BAND_S = 20.0
UNLABELLED = "unlabelled"
BREAKDOWNS = ("scenario tag", "decision", "speed band", "time in drive", "standstill")
PREDICTED_BREAKDOWNS = ("decision", "standstill")


@dataclass(frozen=True)
class Targets:
    """Limits checked on the streaming engine (as the drive node runs): minADE1 / CV overall
    and per scenario tag with >= min_tag_windows windows, decision match likewise; streaming
    against full prefill: same CoC share, minADE1 gap within max(gap_m, gap_share * full);
    accepted draft length while streaming."""

    cv_ratio: float = 0.5
    tag_cv_ratio: float = 0.8
    decision_match: float = 0.9
    tag_decision_match: float = 0.8
    min_tag_windows: int = 30
    same_coc: float = 0.9
    minade1_gap_m: float = 0.1
    minade1_gap_share: float = 0.1
    accepted_length: float = 6.0


def speed_band(speed: float) -> str:
    edges = (0.0, *SPEED_EDGES_MPS)
    for lo, hi in zip(edges, edges[1:]):
        if speed < hi:
            return f"{lo:g}-{hi:g} m/s"
    return f">= {edges[-1]:g} m/s"


def standstill_group(speed: float, decision: str | None) -> tuple[str, ...]:
    """The standstill group of a window: its labelled decision when the ego stands, else
    none."""
    if speed >= STANDING_MPS:
        return ()
    return (f"standing, label {decision or UNLABELLED}",)


def time_band(elapsed: float, width: float = TIME_BAND_S) -> str:
    lo = int(elapsed // width) * width
    return f"{lo:g}-{lo + width:g} s"


@dataclass
class PairedWindows:
    """The windows of all drives, merged: results per mode (index i: the same window in
    every mode), and per window its drive seed, ego speed and time into the drive."""

    results: dict[str, list[WindowResult]]
    seeds: list[int]
    speeds: list[float]
    elapsed: list[float]

    @property
    def modes(self) -> tuple[str, ...]:
        return tuple(self.results)

    @property
    def paired(self) -> bool:
        return FULL in self.results

    @classmethod
    def merge(cls, drives: list[DriveWindows], seeds: list[int]) -> PairedWindows:
        """Every drive holds STREAMING results; FULL ones in all drives or in none."""
        have_full = {FULL in drive.results for drive in drives}
        if any(STREAMING not in drive.results for drive in drives) or len(have_full) > 1:
            raise ValueError(f"every drive needs {STREAMING!r} results and {FULL!r} results "
                             f"in all drives or in none")
        modes = MODES if have_full == {True} else (STREAMING,)
        merged = cls({mode: [] for mode in modes}, [], [], [])
        for seed, drive in zip(seeds, drives, strict=True):
            t0s = {mode: [r.t0 for r in drive.results[mode]] for mode in modes}
            if any(t != t0s[STREAMING] for t in t0s.values()):
                raise ValueError(f"drive {seed}: the modes planned different windows")
            for mode in modes:
                merged.results[mode].extend(drive.results[mode])
            merged.seeds += [seed] * len(drive.speeds)
            merged.speeds += drive.speeds
            merged.elapsed += drive.elapsed
        return merged

    def keys(self, breakdown: str) -> list[tuple[str, ...]]:
        stream = self.results[STREAMING]
        if breakdown == "scenario tag":
            return [r.tags for r in stream]
        if breakdown == "decision":
            return [(r.decision or UNLABELLED,) for r in stream]
        if breakdown == "speed band":
            return [(speed_band(v),) for v in self.speeds]
        if breakdown == "time in drive":
            return [(time_band(t),) for t in self.elapsed]
        if breakdown == "standstill":
            return [standstill_group(v, r.decision) for r, v in zip(stream, self.speeds)]
        raise ValueError(f"breakdown must be one of {BREAKDOWNS}, got {breakdown!r}")


def mode_block(results: list[WindowResult]) -> dict:
    """group_block plus the decoding figures of the mode."""
    return {**group_block(results),
            "accepted_length_mean": mean_or_none(a for r in results for a in r.accepted_lengths),
            "tokens_per_window": mean_or_none(r.tokens_generated for r in results)}


def agreement(stream: list[WindowResult], full: list[WindowResult]) -> dict:
    """Streaming against full prefill on the same windows."""
    deltas = [s.metrics["minade1_6s"] - f.metrics["minade1_6s"] for s, f in zip(stream, full)]
    return {"windows": len(stream),
            "same_coc": mean_or_none(float(s.coc_text == f.coc_text)
                                     for s, f in zip(stream, full)),
            "minade1_delta_mean": mean_or_none(deltas),
            "minade1_abs_delta_mean": mean_or_none(abs(d) for d in deltas),
            "accepted_length_mean_streaming": mean_or_none(
                a for r in stream for a in r.accepted_lengths)}


def _band_start(name: str) -> float:
    return float(name.split("-")[0])


def breakdown(windows: PairedWindows, name: str) -> dict[str, dict]:
    """{group: {mode: group_block, "agreement": ..., "predicted": {mode: counts}}}."""
    members = group_members(windows.keys(name))
    if name == "time in drive":
        members = dict(sorted(members.items(), key=lambda item: _band_start(item[0])))
    out = {}
    for group, indices in members.items():
        picked = {mode: [windows.results[mode][i] for i in indices] for mode in windows.modes}
        entry = {mode: group_block(picked[mode]) for mode in windows.modes}
        entry["agreement"] = (agreement(picked[STREAMING], picked[FULL]) if windows.paired
                              else None)
        if name in PREDICTED_BREAKDOWNS:
            entry["predicted"] = {mode: dict(Counter(
                str(r.predicted_decision) for r in picked[mode]).most_common())
                for mode in windows.modes}
        out[group] = entry
    return out


def _check(value: float | None, limit: float, at_most: bool) -> dict:
    passed = value is not None and (value <= limit if at_most else value >= limit)
    return {"value": value, "limit": limit, "pass": passed}


def _not_measured(limit: float) -> dict:
    """A check that needs full-prefill results the report does not have: it does not pass."""
    return {"value": None, "limit": limit, "pass": False, "measured": False}


def _per_tag(tags: dict[str, dict], key: str, limit: float, at_most: bool,
             min_windows: int) -> dict:
    checked = {tag: _check(entry[STREAMING][key], limit, at_most)
               for tag, entry in tags.items() if entry[STREAMING]["windows"] >= min_windows}
    return {"limit": limit, "min_windows": min_windows, "tags": checked,
            "pass": all(c["pass"] for c in checked.values())}


def evaluate_targets(report: dict, targets: Targets) -> dict:
    """Every check with its value, limit and pass; per-tag checks cover the tags with at
    least `min_tag_windows` windows (and pass when all of those do)."""
    overall = report["overall"][STREAMING]
    full = report["overall"].get(FULL)
    tags = report["breakdowns"]["scenario tag"]
    paired = report["agreement"] is not None
    gap = report["agreement"]["minade1_delta_mean"] if paired else None
    gap_limit = (max(targets.minade1_gap_m, targets.minade1_gap_share * full["minade1_6s"])
                 if full is not None and full["minade1_6s"] is not None
                 else targets.minade1_gap_m)
    checks = {
        "minade1_cv_ratio": _check(overall["minade1_cv_ratio"], targets.cv_ratio, True),
        "minade1_cv_ratio_per_tag": _per_tag(tags, "minade1_cv_ratio", targets.tag_cv_ratio,
                                             True, targets.min_tag_windows),
        "decision_match": _check(overall["decision_match_rate"], targets.decision_match,
                                 False),
        "decision_match_per_tag": _per_tag(tags, "decision_match_rate",
                                           targets.tag_decision_match, False,
                                           targets.min_tag_windows),
        "streaming_same_coc": (_check(report["agreement"]["same_coc"], targets.same_coc, False)
                               if paired else _not_measured(targets.same_coc)),
        "streaming_minade1_gap": (_check(None if gap is None else abs(gap), gap_limit, True)
                                  if paired else _not_measured(gap_limit)),
        "accepted_length_streaming": _check(overall["accepted_length_mean"],
                                            targets.accepted_length, False),
    }
    return {"mode": STREAMING, "limits": asdict(targets), "checks": checks,
            "pass": all(c["pass"] for c in checks.values())}


def window_rows(windows: PairedWindows) -> list[dict]:
    rows = []
    for i, stream in enumerate(windows.results[STREAMING]):
        row = {"seed": windows.seeds[i], "t0": round(stream.t0, 6),
               "elapsed_s": round(windows.elapsed[i], 3),
               "speed_mps": round(windows.speeds[i], 3), "decision": stream.decision,
               "tags": list(stream.tags), "label_sides": list(stream.label_sides),
               "cv_minade_6s": stream.metrics["cv_minade_6s"]}
        for mode in windows.modes:
            r = windows.results[mode][i]
            row[mode] = {"minade1_6s": r.metrics["minade1_6s"],
                         "minade6_6s": r.metrics["minade6_6s"],
                         "predicted_decision": r.predicted_decision,
                         "side_match": r.side_match, "coc": r.coc_text,
                         "accepted_length_mean": mean_or_none(r.accepted_lengths)}
        rows.append(row)
    return rows


def held_out_report(drives: list[DriveWindows], seeds: list[int],
                    targets: Targets | None = None) -> dict:
    """overall (per mode), agreement, breakdowns, targets, skipped windows and per-window
    rows of the drives (`seeds[i]` is the seed of `drives[i]`)."""
    windows = PairedWindows.merge(drives, seeds)
    skipped: Counter = Counter()
    for drive in drives:
        skipped.update(drive.skipped.counts)
    report = {
        "seeds": list(seeds),
        "overall": {mode: mode_block(windows.results[mode]) for mode in windows.modes},
        "agreement": (agreement(windows.results[STREAMING], windows.results[FULL])
                      if windows.paired else None),
        "breakdowns": {name: breakdown(windows, name) for name in BREAKDOWNS},
        "skipped_windows": dict(sorted(skipped.items())),
    }
    report["targets"] = evaluate_targets(report, targets or Targets())
    report["windows"] = window_rows(windows)
    return report


def _fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pair(entry: dict, key: str) -> str:
    if FULL not in entry:
        return _fmt(entry[STREAMING][key])
    return f"{_fmt(entry[STREAMING][key])} / {_fmt(entry[FULL][key])}"


def _sides(block: dict) -> str:
    """Side match with its window count, "-" where no window names a side."""
    if not block["side_windows"]:
        return "-"
    return f"{_fmt(block['side_match_rate'])} ({block['side_windows']})"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(row) + " |" for row in rows])


def markdown(report: dict, minade6: bool) -> str:
    """The overall table, the agreement, one table per breakdown (streaming / full prefill
    in each cell) and the targets; minADE6 columns only when `minade6`."""
    metrics = [("minADE1 (m)", "minade1_6s")] + ([("minADE6 (m)", "minade6_6s")] if minade6
                                                 else [])
    head = ["mode", "windows", *(n for n, _ in metrics), "CV ADE (m)", "minADE1 / CV",
            "decision match", "side match (windows)", "accepted length", "CoC tokens"]
    rows = [[mode, str(b["windows"]), *(_fmt(b[k]) for _, k in metrics),
             _fmt(b["cv_minade_6s"]), _fmt(b["minade1_cv_ratio"]),
             _fmt(b["decision_match_rate"]), _sides(b), _fmt(b["accepted_length_mean"], 2),
             _fmt(b["tokens_per_window"], 1)] for mode, b in report["overall"].items()]
    a = report["agreement"]
    lines = ["All at 6.4 s. " + ("Cells with two figures: streaming / full prefill." if a
                                 else "Streaming only (full prefill not run)."), "",
             *_table(head, rows), ""]
    if a:
        lines += _table(["streaming vs full prefill", "same CoC", "minADE1 delta (m)",
                         "mean abs minADE1 delta (m)", "accepted length (streaming)"],
                        [["all windows", _fmt(a["same_coc"]), _fmt(a["minade1_delta_mean"]),
                          _fmt(a["minade1_abs_delta_mean"]),
                          _fmt(a["accepted_length_mean_streaming"], 2)]]) + [""]
    for name, groups in report["breakdowns"].items():
        head = [name, "windows", *(n for n, _ in metrics), "CV ADE (m)", "minADE1 / CV",
                "decision match", "side match (windows)", "same CoC"]
        if name in PREDICTED_BREAKDOWNS:
            head.append("predicted (streaming)")
        rows = []
        for group, entry in groups.items():
            row = [group, str(entry[STREAMING]["windows"]),
                   *(_pair(entry, k) for _, k in metrics),
                   _fmt(entry[STREAMING]["cv_minade_6s"]), _pair(entry, "minade1_cv_ratio"),
                   _pair(entry, "decision_match_rate"), _sides(entry[STREAMING]),
                   _fmt(entry["agreement"]["same_coc"] if entry["agreement"] else None)]
            if name in PREDICTED_BREAKDOWNS:
                row.append(", ".join(f"{k} {v}" for k, v in entry["predicted"][STREAMING].items()))
            rows.append(row)
        lines += [f"By {name}:", "", *_table(head, rows), ""]
    rows = []
    for check, result in report["targets"]["checks"].items():
        if "tags" in result:
            failing = [t for t, c in result["tags"].items() if not c["pass"]]
            value = (f"{len(result['tags']) - len(failing)} / {len(result['tags'])} tags pass"
                     + (f" (failing: {', '.join(failing)})" if failing else "")
                     if result["tags"] else
                     f"no tag with >= {result['min_windows']} windows")
        else:
            value = _fmt(result["value"])
        verdict = ("not measured" if result.get("measured") is False
                   else "pass" if result["pass"] else "FAIL")
        rows.append([check, value, _fmt(result["limit"]), verdict])
    lines += ["Targets (streaming engine):", "",
              *_table(["check", "value", "limit", "result"], rows)]
    return "\n".join(lines) + "\n"
