"""Drives forked from a wait at a red light with the ego's signal head changed, so that the
same standing scene is seen under both colours while the rest of the traffic keeps the light's
cycle (oncoming cars wait and start as before, the cross road runs as before), so that only
the lamp tells the colour: an early green shows the ego green at a random moment of the wait
(the expert starts), a held red keeps the ego's head red past the cycle's green (the expert
keeps standing while the oncoming cars go). After an early green the ego is held a reaction
time before it starts, each frame's future being the expert's plan (the lights held as the
frame shows them, sim/disturbed_drive.py). Each fork is the seed's drive simulated again with
that one edit (the world is built for the drive's full length, so it is the same world), cut
to HISTORY_STEPS - 1 frames before the fork (a training window's history and frames) and
`after_s` after it, so its first window is the first frame under the new colour. A
stand-back fork stops the ego farther short of the line than the expert ever waits and holds
it there through the red and a reaction time into the light's own green, each frame's future
being the expert's: moving up to the line under red, starting under green; it is cut from a
frame drawn in the wait. Released under red instead, the ego moves up to the line before the
green, so the fork never shows it standing farther back than the expert under a green lamp."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.disturbed_drive import simulate_disturbed
from flashdrive_ros.sim.drive import FRAME_HZ, HISTORY_STEPS, DriveLog, simulate
from flashdrive_ros.sim.entities import LightEdit
from flashdrive_ros.sim.labels import RED_WAIT_GAP, STANDING_MPS
from flashdrive_ros.sim.vehicle import FRONT_OFFSET

STAND_BACK_RELEASES = ("green", "red")
MOVE_UP_S = 4.0  # s, a released stand-back moving up to the line, about


@dataclass(frozen=True)
class LightBranches:
    """early_greens: early-green forks drawn per red wait (0: none; a fork where a vehicle
    then holds the expert back is dropped); held_red: one held-red fork per red wait whose
    light turns green within the drive; natural_wait: the wait itself, with the reaction time
    after its own green, as a fork (so the forks hold both colours under both states of the
    other traffic); min_standing_s: an early green comes at least this
    long after the ego stopped and before the light's own green; after_s: frames kept after a
    fork; reaction_s: after an early green the ego is held at rest for a time drawn from this
    range while each frame's future is the expert's start (a driver's reaction time), so the
    fork holds a standing car under a green lamp; stand_back: one stand-back fork per red wait
    whose light turns green within the drive, the front bumper held at a gap to the line
    drawn from stand_back_m; stand_back_release: "green" holds it a reaction time into the
    light's own green, "red" a reaction time from the fork's first frame, drawn so that
    MOVE_UP_S of red are left where the wait is long enough and ending before the green, so
    that it moves up to the line under red."""

    early_greens: int = 0
    held_red: bool = False
    natural_wait: bool = False
    stand_back: bool = False
    stand_back_m: tuple[float, float] = (5.0, 10.0)
    stand_back_release: str = "green"
    min_standing_s: float = 0.5
    after_s: float = 4.0
    reaction_s: tuple[float, float] = (0.5, 3.0)

    def __post_init__(self) -> None:
        if self.early_greens < 0:
            raise ValueError(f"LightBranches.early_greens must be >= 0, got "
                             f"{self.early_greens}")
        for name in ("min_standing_s", "after_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"LightBranches.{name} must be a finite number > 0, got "
                                 f"{value}")
        low, high = self.reaction_s
        if not (np.isfinite(high) and 0 <= low <= high):
            raise ValueError(f"LightBranches.reaction_s must be (low, high) with 0 <= low <= "
                             f"high, got {self.reaction_s}")
        low, high = self.stand_back_m
        if not (np.isfinite(high) and RED_WAIT_GAP <= low <= high):
            raise ValueError(f"LightBranches.stand_back_m must be (low, high) with "
                             f"{RED_WAIT_GAP} <= low <= high, got {self.stand_back_m}")
        if self.stand_back_release not in STAND_BACK_RELEASES:
            raise ValueError(f"LightBranches.stand_back_release must be one of "
                             f"{STAND_BACK_RELEASES}, got {self.stand_back_release!r}")

    @property
    def enabled(self) -> bool:
        return self.early_greens > 0 or self.held_red or self.natural_wait or self.stand_back


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


@dataclass(frozen=True)
class Fork:
    """A fork of a drive: its first window's frame, the light edit made there (None: the
    drive's own lights) and how long the ego is held at rest from `hold_at` on (s);
    rest_s: the route arc length where base_link is stopped and held until then (None: the
    ego stops where the expert does)."""

    frame: int
    edit: LightEdit | None
    hold_at: float
    hold_s: float
    rest_s: float | None = None


def drive_forks(log: DriveLog, spec: LightBranches, rng: np.random.Generator) -> list[Fork]:
    """The drive's forks per red wait: early greens at frames drawn from the wait's standing
    frames (held a reaction time), the wait itself from its first frame (held a reaction time
    after its own green), a held red from its last red frame (the light turns green before
    the next frame), a stand-back from a frame drawn in the wait (held a reaction time after
    its own green, or from that frame on and released before the green)."""
    forks: list[Fork] = []
    margin = int(round(spec.min_standing_s * FRAME_HZ))
    for wait in red_waits(log):
        first = max(wait.first + margin, HISTORY_STEPS - 1)
        frames = list(range(first, wait.last + 1 - margin))
        picked = rng.choice(frames, size=min(spec.early_greens, len(frames)), replace=False)
        for k in sorted(picked):
            t = float(k) / FRAME_HZ
            forks.append(Fork(int(k), LightEdit(t, wait.light, "green"), t,
                              float(rng.uniform(*spec.reaction_s))))
        ends = HISTORY_STEPS - 1 <= wait.last < log.frame_count - 1
        if spec.natural_wait and ends and wait.first >= HISTORY_STEPS - 1:
            forks.append(Fork(wait.first, None, float(wait.last + 1) / FRAME_HZ,
                              float(rng.uniform(*spec.reaction_s))))
        if spec.held_red and ends:
            forks.append(Fork(wait.last, LightEdit(float(wait.last) / FRAME_HZ, wait.light,
                                                   "red"), 0.0, 0.0))
        if spec.stand_back and ends:
            gap = float(rng.uniform(*spec.stand_back_m))
            rest_s = log.world.lights()[wait.light].stop_s - FRONT_OFFSET - gap
            earliest = max(wait.first, HISTORY_STEPS - 1)
            green = float(wait.last + 1) / FRAME_HZ
            if spec.stand_back_release == "red":
                reaction = float(rng.uniform(*spec.reaction_s))
                latest = wait.last + 1 - int(round((reaction + MOVE_UP_S) * FRAME_HZ))
                frame = int(rng.integers(earliest, max(earliest, latest) + 1))
                release = min(frame / FRAME_HZ + reaction, green - 1.0 / FRAME_HZ)
                forks.append(Fork(frame, None, release, 0.0, rest_s))
            else:
                frame = int(rng.integers(earliest, wait.last + 1))
                forks.append(Fork(frame, None, green, float(rng.uniform(*spec.reaction_s)),
                                  rest_s))
    return forks


def fork_log(seed: int, seconds: float, frame_count: int, fork: Fork, spec: LightBranches
             ) -> DriveLog | None:
    """The fork of the seed's `seconds` drive (of `frame_count` frames), cut to its window
    frames; None for a held fork where a vehicle then holds the expert back."""
    after = int(round(spec.after_s * FRAME_HZ))
    last = max(fork.frame, int(round(fork.hold_at * FRAME_HZ))) + after
    count = min(last, frame_count - 1) - fork.frame + HISTORY_STEPS
    first = fork.frame - (HISTORY_STEPS - 1)
    resting = fork.rest_s is not None
    branch = simulate_disturbed(
        seed, seconds, None, light_edits=() if fork.edit is None else (fork.edit,),
        brake_holds=((fork.hold_at, fork.hold_s),) if fork.hold_s > 0 and not resting
        else (),
        rest_holds=((fork.rest_s, fork.hold_at + fork.hold_s),) if resting else (),
        end_s=(first + count - 1) / FRAME_HZ, futures_from=first)
    cut = branch.cut(first, count)
    if fork.hold_s > 0 and any(info.reason == "vehicle"
                               for info in cut.infos[HISTORY_STEPS - 1:]):
        return None
    return cut


def seed_forks(seed: int, seconds: float, spec: LightBranches,
               log: DriveLog | None = None) -> tuple[DriveLog, list[Fork]]:
    """The seed's `seconds` drive (`log`, when already simulated) and its forks."""
    if log is None:
        log = simulate(seed, seconds)
    return log, drive_forks(log, spec, np.random.default_rng([seed, 23]))


def branch_logs(seed: int, seconds: float, spec: LightBranches,
                log: DriveLog | None = None) -> list[DriveLog]:
    """The forks of the seed's `seconds` drive (`log`: that drive, when already simulated),
    each cut to its window frames."""
    log, forks = seed_forks(seed, seconds, spec, log)
    cuts = (fork_log(seed, log.seconds, log.frame_count, fork, spec) for fork in forks)
    return [cut for cut in cuts if cut is not None]
