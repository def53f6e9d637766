"""Things in the synthetic world: traffic lights, intersections, crosswalks, vehicles,
pedestrians and static boxes (buildings, trees, poles)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from flashdrive_ros.sim.path import Path

LIGHT_MODES = ("stop", "go", "green")
LIGHT_STATES = ("green", "yellow", "red")
VEHICLE_KINDS = ("lead", "oncoming", "cross", "parked")
BRAKE_LIGHT_MPS2 = -0.8  # m/s^2: a car braking harder than this lights its tail lights
BRAKE_LIGHT_STANDING_MPS = 0.3  # m/s: a driving car slower than this stands, lights lit


@dataclass
class TrafficLight:
    """A signal for the route's axis; its cycle starts when the ego nears the stop line.

    mode 'stop': green, then (trigger) yellow -> red -> green.  mode 'go': red, then
    (trigger) green.  mode 'green': always green. stop_s / oncoming_stop_s: route arc
    lengths of the two stop lines. held: a state shown from now on whatever the cycle (a
    forked world's light kept as it was seen). ego_view: (t, state): from t on the head
    facing the ego shows `state` while the other traffic keeps the cycle (a light edit).
    ego_stop_margin: where the expert ego's front bumper comes to rest short of the line.
    """

    stop_s: float
    oncoming_stop_s: float
    mode: str
    trigger_distance: float = 50.0
    yellow_time: float = 2.5
    red_time: float = 8.0
    t_trigger: float | None = None
    held: str | None = None
    ego_view: tuple[float, str] | None = None
    ego_stop_margin: float = 1.0

    def __post_init__(self) -> None:
        if self.mode not in LIGHT_MODES:
            raise ValueError(f"light mode must be one of {LIGHT_MODES}, got {self.mode!r}")
        if self.held is not None and self.held not in LIGHT_STATES:
            raise ValueError(f"held light state must be one of {LIGHT_STATES}, got "
                             f"{self.held!r}")
        if self.trigger_distance <= 0 or self.yellow_time <= 0 or self.red_time <= 0:
            raise ValueError("light timings must be positive")
        if not 0.0 <= self.ego_stop_margin <= 4.5:
            raise ValueError(f"ego_stop_margin must be in [0, 4.5] m, got "
                             f"{self.ego_stop_margin}")

    def update(self, t: float, ego_front_s: float) -> None:
        if (self.t_trigger is None and self.mode != "green"
                and self.stop_s - ego_front_s <= self.trigger_distance):
            self.t_trigger = t

    def state(self, t: float) -> str:
        if self.held is not None:
            return self.held
        if self.mode == "green":
            return "green"
        if self.t_trigger is None or t < self.t_trigger:
            return "green" if self.mode == "stop" else "red"
        if self.mode == "go":
            return "green"
        since = t - self.t_trigger
        if since < self.yellow_time:
            return "yellow"
        if since < self.yellow_time + self.red_time:
            return "red"
        return "green"

    def turned_green_at(self) -> float | None:
        if self.t_trigger is None or self.mode == "green" or self.held is not None:
            return None
        if self.mode == "go":
            return self.t_trigger
        return self.t_trigger + self.yellow_time + self.red_time

    def ego_state(self, t: float) -> str:
        """What the head facing the ego shows: the held state, else from ego_view[0] on
        ego_view[1], else the cycle's state."""
        if self.held is None and self.ego_view is not None and t >= self.ego_view[0]:
            return self.ego_view[1]
        return self.state(t)

    def ego_green_at(self) -> float | None:
        """When the head facing the ego last turned green (None: not yet, or not in a cycle)."""
        if self.ego_view is None or self.held is not None:
            return self.turned_green_at()
        return self.ego_view[0] if self.ego_view[1] == "green" else None


@dataclass(frozen=True)
class LightEdit:
    """From time t on, the head of light `index` (of the world's lights()) that faces the ego
    shows `state`, 'green' or 'red', while the other traffic keeps the light's cycle; a green
    edit is made where that head shows red."""

    t: float
    index: int
    state: str

    def __post_init__(self) -> None:
        if self.state not in ("green", "red"):
            raise ValueError(f"a light edit shows 'green' or 'red', got {self.state!r}")
        if self.index < 0 or not self.t >= 0.0:
            raise ValueError(f"light edit needs index >= 0 and t >= 0, got {self.index}, "
                             f"{self.t}")

    def apply(self, lights: list[TrafficLight]) -> None:
        light = lights[self.index]
        if self.state == "green" and light.ego_state(self.t) != "red":
            raise ValueError(f"light {self.index} shows {light.ego_state(self.t)} at "
                             f"t = {self.t}: a green edit ends a red")
        light.ego_view = (self.t, self.state)


class PendingLightEdits:
    """Light edits not made yet, in time order."""

    def __init__(self, edits: tuple[LightEdit, ...]) -> None:
        self._edits = sorted(edits, key=lambda edit: edit.t)

    def apply_due(self, t: float, lights: list[TrafficLight]) -> bool:
        """Makes every edit due at time t; whether any was made."""
        made = False
        while self._edits and self._edits[0].t <= t + 1e-9:
            self._edits.pop(0).apply(lights)
            made = True
        return made


@dataclass
class Intersection:
    """A cross road through the route at arc length s; half_width of the cross road."""

    s: float
    half_width: float = 6.0
    light: TrafficLight | None = None
    side_only: bool = False


@dataclass
class Crosswalk:
    s: float
    width: float = 3.0


@dataclass
class Vehicle:
    """A car driving along its own path (center of the box at path arc length s).

    Parked cars have no path and keep the pose (x, y, yaw). stop_lines: (path s, light).
    brake: (path s where braking starts, target speed, hold seconds) for a lead that brakes.
    activate_s: ego route arc length at which the car starts to exist (None: from the start).
    held: never speeds up from now on, and stands once below BRAKE_LIGHT_STANDING_MPS.
    """

    kind: str
    length: float
    width: float
    height: float
    color: tuple[int, int, int]
    path: Path | None = None
    s: float = 0.0
    v: float = 0.0
    accel: float = 0.0
    v_cruise: float = 0.0
    x: float = 0.0
    y: float = 0.0
    yaw: float = 0.0
    active: bool = True
    stop_lines: tuple = ()
    brake: tuple[float, float, float] | None = None
    activate_s: float | None = None
    merge_s: float = 0.0
    cross_light: TrafficLight | None = None
    cross_delay: float = 0.0
    brake_until: float | None = None
    committed: frozenset = frozenset()
    held: bool = False

    def __post_init__(self) -> None:
        if self.kind not in VEHICLE_KINDS:
            raise ValueError(f"vehicle kind must be one of {VEHICLE_KINDS}, got {self.kind!r}")
        if self.kind != "parked" and self.path is None:
            raise ValueError(f"a {self.kind} vehicle needs a path")
        if self.path is not None:
            self.sync_pose()

    @property
    def brake_lights(self) -> bool:
        """Whether the tail lights are lit: braking harder than BRAKE_LIGHT_MPS2, or a driving
        car standing."""
        return self.accel < BRAKE_LIGHT_MPS2 or (self.kind != "parked"
                                                 and self.v < BRAKE_LIGHT_STANDING_MPS)

    def sync_pose(self) -> None:
        x, y, yaw = self.path.pose_at(self.s)
        self.x, self.y, self.yaw = float(x), float(y), float(yaw)

    @property
    def finished(self) -> bool:
        return self.path is not None and self.s >= self.path.length - 0.5


@dataclass
class Pedestrian:
    """Walks from start to end at speed once the ego's front passes trigger_s (route s).
    held: stands where it is from now on, still showing the walk it is on (velocity)."""

    start: tuple[float, float]
    end: tuple[float, float]
    speed: float
    trigger_s: float
    color: tuple[int, int, int]
    height: float = 1.75
    t_start: float | None = None
    walked: float = 0.0
    held: bool = False

    @property
    def route_length(self) -> float:
        return float(np.hypot(self.end[0] - self.start[0], self.end[1] - self.start[1]))

    @cached_property
    def direction(self) -> np.ndarray:
        d = np.subtract(self.end, self.start)
        return d / np.linalg.norm(d)

    @property
    def walking(self) -> bool:
        return self.t_start is not None and self.walked < self.route_length

    def position(self) -> np.ndarray:
        return np.asarray(self.start, dtype=np.float64) + self.direction * self.walked

    def velocity(self) -> np.ndarray:
        return self.direction * self.speed if self.walking else np.zeros(2)

    @property
    def yaw(self) -> float:
        d = self.direction
        return float(np.arctan2(d[1], d[0]))


@dataclass
class StaticBox:
    """A box resting on the ground: center (x, y), heading, size, colour."""

    x: float
    y: float
    yaw: float
    length: float
    width: float
    height: float
    color: tuple[int, int, int]
    z0: float = 0.0
