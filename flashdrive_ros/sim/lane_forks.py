"""Drives forked from a seed's drive at its tight bends and parked-car passes, the ego drifted
over towards the inside of the bend (`outside_share` of them towards the outside) or towards
the parked car, and held there while it drives through; each frame's future is the expert's
plan from that drifted state, its way back to its line (sim/disturbed_drive.py forks the world
at every drifted frame). The expert's own drives keep to its line there, so a model that cuts
a bend or nudges around a parked car too little reaches states they never show. The offset is
cut to keep the drifted ego CLEARANCE_M clear of the parked cars and roadside objects beside
its path. A fork is a `drive_s` drive of the seed (longer than a training drive, so that it
reaches the bends and parked cars beyond one) simulated again with the drift, cut to the
frames from the drift's start (its first window's history is the undrifted drive) to
`after_s` after its end."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.bends import TIGHT_CURVATURE
from flashdrive_ros.sim.disturbance import AimedDrift
from flashdrive_ros.sim.disturbed_drive import simulate_disturbed
from flashdrive_ros.sim.drive import FRAME_HZ, HISTORY_STEPS, SIM_HZ, SUBSTEPS, DriveLog
from flashdrive_ros.sim.expert import NUDGE_MAX, Expert
from flashdrive_ros.sim.rectangles import rectangle
from flashdrive_ros.sim.vehicle import EGO_LENGTH, EGO_WIDTH
from flashdrive_ros.sim.world import World

BEND, NUDGE = "bend", "nudge"
MIN_SPEED_MPS = 3.0  # m/s: the ego drives at least this fast where an episode starts
CLEARANCE_M = 0.15  # m: the least lateral gap kept from parked cars and roadside objects
MERGE_GAP_M = 10.0  # m: stretches of one kind closer than this are one episode
GRID_M = 1.0  # m: route sampling of the episode search
AFTER_DRIFT_M = 15.0  # m past the drift's end still checked for clearance
MIN_OFFSET_M = 0.2  # m: a fork whose offset the clearance cuts below this is dropped


@dataclass(frozen=True)
class LaneForks:
    """per_drive: forks per training drive (0: none), at distinct episodes: stretches where
    the route bends by bend_curvature (1/m) or more, or the expert nudges nudge_m or more
    around a parked car (not at NUDGE_MAX, where its own clearance is cut), on the seed's
    drive of drive_s (s). Each draws its offset from bend_offset_m or nudge_offset_m (cut
    for clearance; dropped below MIN_OFFSET_M), the ramp from ramp_s and the hold from
    hold_s, and reaches the full offset lead_s (drawn) before the episode starts; after_s:
    frames kept after the drift ends."""

    per_drive: int = 0
    bend_curvature: float = TIGHT_CURVATURE
    nudge_m: float = 0.3
    bend_offset_m: tuple[float, float] = (0.5, 1.2)
    nudge_offset_m: tuple[float, float] = (0.2, 0.55)
    outside_share: float = 0.25
    ramp_s: tuple[float, float] = (1.0, 2.0)
    hold_s: tuple[float, float] = (1.0, 2.5)
    lead_s: tuple[float, float] = (0.0, 1.5)
    after_s: float = 3.0
    drive_s: float = 120.0

    def __post_init__(self) -> None:
        if self.per_drive < 0:
            raise ValueError(f"LaneForks.per_drive must be >= 0, got {self.per_drive}")
        for name in ("bend_offset_m", "nudge_offset_m", "ramp_s", "hold_s"):
            low, high = getattr(self, name)
            if not (np.isfinite(high) and 0 < low <= high):
                raise ValueError(f"LaneForks.{name} must be (low, high) with 0 < low <= high, "
                                 f"got {getattr(self, name)}")
        low, high = self.lead_s
        if not (np.isfinite(high) and 0 <= low <= high):
            raise ValueError(f"LaneForks.lead_s must be (low, high) with 0 <= low <= high, got "
                             f"{self.lead_s}")
        for name in ("bend_curvature", "nudge_m", "after_s", "drive_s"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"LaneForks.{name} must be a finite number > 0, got {value}")
        if not 0.0 <= self.outside_share <= 1.0:
            raise ValueError(f"LaneForks.outside_share must be in [0, 1], got "
                             f"{self.outside_share}")

    @property
    def enabled(self) -> bool:
        return self.per_drive > 0


@dataclass(frozen=True)
class Episode:
    """A stretch [s_start, s_end] (route arc length, m) of a bend or a nudge; inside: +1 where
    its inside (the bend's, or the parked car's side) is left, -1 where it is right."""

    kind: str
    s_start: float
    s_end: float
    inside: int


@dataclass(frozen=True)
class LaneFork:
    """An episode and the drift that the fork's ego drives it with (its start at 10 Hz frame
    `frame`)."""

    episode: Episode
    frame: int
    drift: AimedDrift

    @property
    def last_frame(self) -> int:
        """The drift's last frame."""
        return (self.drift.stop - 1) // SUBSTEPS


def episodes(world: World, expert: Expert, spec: LaneForks) -> list[Episode]:
    """The route's bends and nudges in route order; a nudge wins over a bend where both
    are."""
    route = world.route
    s = np.arange(0.0, route.length, GRID_M)  # s: [G]
    kappa = route.curvature_at(s)  # kappa: [G] 1/m, left positive
    nudge = expert.nudge_at(s)  # nudge: [G] m
    nudging = _merged(nudge >= spec.nudge_m)
    bending = _merged(np.abs(kappa) >= spec.bend_curvature) & ~nudging
    out = []
    for kind, mask in ((NUDGE, nudging), (BEND, bending)):
        for a, b in _runs(mask):
            if kind == NUDGE:
                if nudge[a:b].max() >= NUDGE_MAX - 1e-6:
                    continue
                inside = -1
            else:
                inside = 1 if kappa[a + int(np.argmax(np.abs(kappa[a:b])))] > 0 else -1
            out.append(Episode(kind, float(s[a]), float(s[b - 1]), inside))
    return sorted(out, key=lambda e: e.s_start)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, stop) index pairs of the runs of True in mask."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def _merged(mask: np.ndarray) -> np.ndarray:
    """mask with its gaps shorter than MERGE_GAP_M filled."""
    out = mask.copy()
    runs = _runs(mask)
    for (_, b), (a, _) in zip(runs, runs[1:]):
        if (a - b) * GRID_M < MERGE_GAP_M:
            out[b:a] = True
    return out


def lateral_room(world: World, log: DriveLog, s_from: float, s_to: float, side: int) -> float:
    """How far (m, >= 0) the ego may move from its logged path towards `side` (+1 left, -1
    right) over route arc lengths [s_from, s_to] and keep CLEARANCE_M from every parked car
    and roadside object beside that stretch (inf when none is)."""
    route = world.route
    frames = np.array([info.route_s for info in log.infos[:log.frame_count]])  # [F] m
    offsets = np.array([info.route_d for info in log.infos[:log.frame_count]])  # [F] m
    boxes = [(v.x, v.y, v.yaw, v.length, v.width) for v in world.vehicles if v.kind == "parked"]
    boxes += [(b.x, b.y, b.yaw, b.length, b.width) for b in world.statics]
    middle = np.asarray(route.pose_at((s_from + s_to) / 2)[:2])  # middle: [2] (x, y)
    room = np.inf
    for x, y, yaw, length, width in boxes:
        if np.hypot(*(middle - (x, y))) > (s_to - s_from) / 2 + 60.0:
            continue
        sd = np.array([route.project(p, hint=(s_from + s_to) / 2, window=s_to - s_from + 60.0)
                       for p in rectangle(x, y, yaw, length, width)])  # sd: [4, 2] (s, d)
        if sd[:, 0].max() < s_from - EGO_LENGTH or sd[:, 0].min() > s_to + EGO_LENGTH:
            continue
        near = (frames >= sd[:, 0].min() - EGO_LENGTH) & (frames <= sd[:, 0].max() + EGO_LENGTH)
        if not near.any():
            continue
        ego_d = offsets[near]  # [n] m, the logged ego beside the object
        if side > 0 and sd[:, 1].min() >= ego_d.max():
            gap = sd[:, 1].min() - (ego_d.max() + EGO_WIDTH / 2)
        elif side < 0 and sd[:, 1].max() <= ego_d.min():
            gap = ego_d.min() - EGO_WIDTH / 2 - sd[:, 1].max()
        else:
            continue
        room = min(room, gap - CLEARANCE_M)
    return max(float(room), 0.0)


def seed_lane_forks(seed: int, spec: LaneForks, log: DriveLog | None = None
                    ) -> list[LaneFork]:
    """The lane forks drawn for the seed's `spec.drive_s` drive (`log`: that drive with the
    lights held, when already simulated): per_drive at distinct episodes the drive reaches,
    their frames apart, fewer where it has fewer."""
    if not spec.enabled:
        return []
    rng = np.random.default_rng([seed, 47])
    if log is None:
        log = simulate_disturbed(seed, spec.drive_s, None)
    world = log.world
    route_s = np.array([info.route_s for info in log.infos[:log.frame_count]])  # [F] m
    found = episodes(world, Expert(world), spec)
    forks: list[LaneFork] = []
    for k in rng.permutation(len(found)):
        if len(forks) == spec.per_drive:
            break
        fork = _draw_fork(found[k], log, route_s, spec, rng)
        if fork is not None and all(fork.frame > other.last_frame + HISTORY_STEPS
                                    or other.frame > fork.last_frame + HISTORY_STEPS
                                    for other in forks):
            forks.append(fork)
    return sorted(forks, key=lambda f: f.frame)


def _draw_fork(episode: Episode, log: DriveLog, route_s: np.ndarray, spec: LaneForks,
               rng: np.random.Generator) -> LaneFork | None:
    """The episode's fork, its drift drawn from spec, or None where the drive does not reach
    the episode at MIN_SPEED_MPS with room for the drift before and after it."""
    reached = np.flatnonzero(route_s >= episode.s_start)
    if not reached.size or log.infos[int(reached[0])].v < MIN_SPEED_MPS:
        return None
    entry = int(reached[0])
    ramp_s, hold_s = float(rng.uniform(*spec.ramp_s)), float(rng.uniform(*spec.hold_s))
    frame = entry - int(round((float(rng.uniform(*spec.lead_s)) + ramp_s) * FRAME_HZ))
    ramp, hold = int(round(ramp_s * SIM_HZ)), int(round(hold_s * SIM_HZ))
    last = (frame * SUBSTEPS + ramp + hold) // SUBSTEPS + int(round(spec.after_s * FRAME_HZ))
    if frame < HISTORY_STEPS - 1 or last >= log.frame_count:
        return None
    side = episode.inside
    drawn = spec.nudge_offset_m if episode.kind == NUDGE else spec.bend_offset_m
    if episode.kind == BEND and rng.random() < spec.outside_share:
        side = -side
    size = float(rng.uniform(*drawn))
    end = min(last, log.frame_count - 1)
    room = lateral_room(log.world, log, float(route_s[frame]),
                        float(route_s[end]) + AFTER_DRIFT_M, side)
    size = min(size, room)
    if size < MIN_OFFSET_M:
        return None
    return LaneFork(episode, frame, AimedDrift(frame * SUBSTEPS, ramp, hold, side * size))


def lane_fork_log(seed: int, fork: LaneFork, spec: LaneForks) -> DriveLog:
    """The fork of the seed's `spec.drive_s` drive with `fork`'s drift, cut to its window
    frames: from the drift's start to `after_s` after its end."""
    first = fork.frame - (HISTORY_STEPS - 1)
    last = fork.last_frame + int(round(spec.after_s * FRAME_HZ))
    log = simulate_disturbed(seed, spec.drive_s, None,
                             end_s=min(last / FRAME_HZ, spec.drive_s),
                             futures_from=first, aimed_drift=fork.drift)
    return log.cut(first, min(last, log.frame_count - 1) - first + 1)
