"""Drives forked from a wait at a red light with the light changed, so that the same standing
scene is seen under both colours: an early green ends the red phase at a random moment of the
wait (the expert starts; cross traffic already under way goes on), a held red keeps the light
red past its green (the expert keeps standing, the cross road emptied). Each fork is the seed's
drive simulated again with that one change, cut to HISTORY_STEPS - 1 frames before the fork
(a training window's history and frames) and `after_s` after it, so its first window is the
first frame under the new colour."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.drive import FRAME_HZ, HISTORY_STEPS, DriveLog, simulate
from flashdrive_ros.sim.entities import LightEdit
from flashdrive_ros.sim.labels import RED_WAIT_GAP, STANDING_MPS


@dataclass(frozen=True)
class LightBranches:
    """early_greens: early-green forks per red wait (0: none); held_red: one held-red fork
    per red wait whose light turns green within the drive; min_standing_s:
    an early green comes at least this long after the ego stopped and before the light's own
    green; after_s: frames kept after a fork; clear_m: at an early green's fork no cross
    vehicle is within this distance of the ego."""

    early_greens: int = 3
    held_red: bool = True
    min_standing_s: float = 0.5
    after_s: float = 4.0
    clear_m: float = 20.0

    def __post_init__(self) -> None:
        if self.early_greens < 0:
            raise ValueError(f"LightBranches.early_greens must be >= 0, got "
                             f"{self.early_greens}")
        for name in ("min_standing_s", "after_s", "clear_m"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"LightBranches.{name} must be a finite number > 0, got "
                                 f"{value}")

    @property
    def enabled(self) -> bool:
        return self.early_greens > 0 or self.held_red


@dataclass(frozen=True)
class RedWait:
    """Frames first .. last (10 Hz) where the ego stands at light `light` showing red; the
    light turns green at frame last + 1 (when the drive goes on that long)."""

    light: int
    first: int
    last: int


def red_waits(log: DriveLog) -> list[RedWait]:
    """The drive's waits at red lights, in time order."""
    lights = log.world.lights()
    waits: list[RedWait] = []
    for k, info in enumerate(log.infos[:log.frame_count]):
        if not (info.v < STANDING_MPS and info.light_state == "red"
                and info.light_gap is not None and info.light_gap <= RED_WAIT_GAP):
            continue
        light = int(np.argmin([abs(lt.stop_s - info.front_s - info.light_gap) for lt in lights]))
        if waits and waits[-1].light == light and waits[-1].last == k - 1:
            waits[-1] = RedWait(light, waits[-1].first, k)
        else:
            waits.append(RedWait(light, k, k))
    return waits


def _cross_clear(log: DriveLog, k: int, clear_m: float) -> bool:
    scene = log.scenes[k]
    return all(np.hypot(b.x - scene.ego.x, b.y - scene.ego.y) > clear_m
               for b in scene.boxes if b.kind == "cross")


def fork_edits(log: DriveLog, spec: LightBranches, rng: np.random.Generator) -> list[LightEdit]:
    """The light edits of the drive's forks: early greens at frames drawn from each wait's
    standing frames with a clear cross road, a held red from each wait's last red frame (its
    light turns green before the next frame)."""
    edits: list[LightEdit] = []
    margin = int(round(spec.min_standing_s * FRAME_HZ))
    for wait in red_waits(log):
        first = max(wait.first + margin, HISTORY_STEPS - 1)
        frames = [k for k in range(first, wait.last + 1 - margin)
                  if _cross_clear(log, k, spec.clear_m)]
        picked = rng.choice(frames, size=min(spec.early_greens, len(frames)), replace=False)
        edits += [LightEdit(float(k) / FRAME_HZ, wait.light, "green") for k in sorted(picked)]
        if spec.held_red and HISTORY_STEPS - 1 <= wait.last < log.frame_count - 1:
            edits.append(LightEdit(float(wait.last) / FRAME_HZ, wait.light, "red"))
    return edits


def branch_logs(seed: int, seconds: float, spec: LightBranches,
                log: DriveLog | None = None) -> list[DriveLog]:
    """The forks of the seed's `seconds` drive (`log`: that drive, when already simulated),
    each cut to its window frames."""
    if log is None:
        log = simulate(seed, seconds)
    rng = np.random.default_rng([seed, 23])
    after = int(round(spec.after_s * FRAME_HZ))
    out = []
    for edit in fork_edits(log, spec, rng):
        fork = int(round(edit.t * FRAME_HZ))
        count = min(HISTORY_STEPS + after, log.frame_count - fork + HISTORY_STEPS - 1)
        end_frame = fork - (HISTORY_STEPS - 1) + count - 1
        branch = simulate(seed, log.seconds, light_edits=(edit,), end_s=end_frame / FRAME_HZ)
        out.append(branch.cut(fork - (HISTORY_STEPS - 1), count))
    return out
