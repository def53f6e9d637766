"""Per-frame labels from the expert's reasoning: key decision, scenario tags, CoC sentence."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from flashdrive_ros.sim.expert import ExpertInfo

DECISIONS = ("stop", "slow", "follow", "nudge", "keep_lane", "turn")
SCENARIO_TAGS = ("keep_lane", "follow_lead", "red_light_stop", "green_light_go",
                 "pedestrian_yield", "nudge_parked", "turn")
SHARP_CURVATURE = 1.0 / 50.0
GREEN_GO_WINDOW = 5.0
RESTART_LOOKBACK = 60
STANDING_MPS = 0.3  # m/s: below it the ego stands
CREEP_SPEED = 3.0  # below this, a red light or crossing pedestrian ahead is the reason to stop
RED_WAIT_GAP = 5.0  # m, front bumper to the line: standing farther back at red, the car moves up
WORDING_SPEED_BANDS = (4.0, 9.0)  # m/s; the ego's speed band picks a situation's wording
STANDING_LEAD_MPS = 0.5  # m/s: a binding lead slower than this stands (standing_lead labels)

# Every sentence opens with the word of its decision (DECISION_WORDS) and no other decision's
# sentence does, so the first CoC token names the decision.
DECISION_WORDS = {"stop": "Stop", "slow": "Slow", "follow": "Follow", "nudge": "Nudge",
                  "keep_lane": "Keep", "turn": "Turn"}
_TEMPLATES: dict[str, tuple[str, ...]] = {
    "red_approach": (
        "Stop smoothly at the line because the traffic light ahead turns {color}",
        "Stop at the line and brake smoothly since the signal ahead is {color}",
        "Stop and decelerate because the light at the intersection is {color}"),
    "red_wait": (
        "Stop and stay at the stop line because the traffic light is still red",
        "Stop and remain stationary until the red light at the intersection turns green",
        "Stop and hold the vehicle at the line since the signal ahead remains red"),
    "green_go": (
        "Keep going through the intersection because the traffic light has turned green",
        "Keep going straight since the signal ahead is now green",
        "Keep going through the intersection as the red light changed to green"),
    "green_restart": (
        "Keep going again because the red light changed to green and the way is clear",
        "Keep going and pull away from the stop line since the traffic light has turned green",
        "Keep going from the stop and cross the intersection because the light is green"),
    "ped": (
        "Stop and wait because a pedestrian is crossing the road ahead",
        "Stop and yield to the pedestrian walking across the crosswalk in front",
        "Stop to let the crossing pedestrian reach the other side safely"),
    "follow": (
        "Follow the slower {obj} ahead and keep a safe distance in the lane",
        "Follow the {obj} in front at a safe gap since it drives slowly",
        "Follow and match the speed of the slower {obj} ahead in the current lane"),
    "lead_standing": (
        "Stop behind the {obj} standing still in the lane ahead",
        "Stop and wait behind the {obj} that stands in front",
        "Stop and stay behind the {obj} standing ahead in the lane"),
    "lead_brake": (
        "Slow down because the {obj} ahead is braking and the gap is closing",
        "Slow down to keep a safe distance since the lead {obj} slows down",
        "Slow down and brake gently because the {obj} in front is slowing"),
    "lead_slower": (
        "Slow down because the {obj} ahead drives slower and the gap is closing",
        "Slow down to the speed of the slower {obj} ahead before the gap gets small",
        "Slow down early since the {obj} in front moves much slower in the lane"),
    "nudge": (
        "Nudge slightly to the left to pass the parked {obj} intruding into the lane",
        "Nudge a little left within the lane to keep clear of the parked {obj}",
        "Nudge slightly left around the parked {obj} on the right while keeping speed"),
    "curve_slow": (
        "Slow down before the sharp {side} turn ahead to keep the car stable",
        "Slow down because the road ahead bends sharply to the {side}",
        "Slow down for the tight {side} curve coming up and stay in the lane"),
    "turn": (
        "Turn with the road as it bends sharply to the {side} and stay in the lane",
        "Turn {side} through the tight bend while keeping a moderate speed",
        "Turn through the sharp {side} bend in the lane at a steady speed"),
    "keep": (
        "Keep lane and maintain speed since the road ahead is clear",
        "Keep straight in the current lane because there are no obstacles ahead",
        "Keep the lane at a steady speed as the road is free"),
    "keep_curve": (
        "Keep lane and follow the road as it curves gently to the {side}",
        "Keep centered in the lane through the gentle {side} curve at steady speed"),
}


TEMPLATE_DECISIONS = {"red_approach": "stop", "red_wait": "stop", "green_go": "keep_lane",
                      "green_restart": "keep_lane", "ped": "stop", "follow": "follow",
                      "lead_standing": "stop", "lead_brake": "slow", "lead_slower": "slow",
                      "nudge": "nudge", "curve_slow": "slow", "turn": "turn",
                      "keep": "keep_lane", "keep_curve": "keep_lane"}
FILLS = {"obj": ("car", "vehicle"), "side": ("left", "right"), "color": ("red", "yellow")}


def template_sentences() -> list[tuple[str, str]]:
    """Every CoC sentence the labels can write, with its decision."""
    out = []
    for key, options in _TEMPLATES.items():
        for text in options:
            out += sorted({(text.format(obj=obj, side=side, color=color), TEMPLATE_DECISIONS[key])
                           for obj in FILLS["obj"] for side in FILLS["side"]
                           for color in FILLS["color"]})
    return out


@dataclass(frozen=True)
class Label:
    t: float
    coc: str
    decision: str
    tags: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"t": round(self.t, 3), "coc": self.coc, "decision": self.decision,
                "tags": list(self.tags)}


def _situation(infos: list[ExpertInfo], k: int, standing_lead: bool = False
               ) -> tuple[str, list[str]]:
    """(template key, scenario tags) of frame k; TEMPLATE_DECISIONS gives the decision.
    standing_lead: a binding lead slower than STANDING_LEAD_MPS is a reason to stop (else the
    frame follows it)."""
    info = infos[k]
    creeping = info.v < CREEP_SPEED
    red_ahead = (info.light_state == "red" and info.light_gap is not None
                 and info.light_gap >= -0.5)
    if info.reason in ("red_light", "yellow_light") or (creeping and red_ahead):
        waiting = (info.v < STANDING_MPS and info.light_state == "red"
                   and info.light_gap is not None and info.light_gap <= RED_WAIT_GAP)
        return ("red_wait" if waiting else "red_approach"), ["red_light_stop"]
    if info.reason == "pedestrian" or (creeping and info.ped_gap is not None):
        return "ped", ["pedestrian_yield"]
    green_at = info.light_green_at
    if (info.light_state == "green" and green_at is not None
            and 0.0 <= info.t - green_at <= GREEN_GO_WINDOW):
        stopped = any(i.v < STANDING_MPS for i in infos[max(0, k - RESTART_LOOKBACK):k])
        return ("green_restart" if stopped else "green_go"), ["green_light_go"]
    if info.reason in ("lead", "vehicle"):
        if (standing_lead and info.lead_speed is not None
                and info.lead_speed < STANDING_LEAD_MPS):
            return "lead_standing", ["follow_lead"]
        braking = info.accel < -1.0 and info.lead_speed is not None and info.lead_speed < info.v
        if not braking:
            return "follow", ["follow_lead"]
        return ("lead_brake" if info.lead_brake_lights else "lead_slower"), ["follow_lead"]
    if max(info.nudge_now, info.nudge_ahead) > 0.15:
        return "nudge", ["nudge_parked"]
    if abs(info.curvature_ahead) >= SHARP_CURVATURE:
        if info.reason == "curve" and info.accel < -0.3:
            return "curve_slow", ["turn"]
        return "turn", ["turn"]
    if abs(info.curvature_ahead) > 1.0 / 400.0:
        return "keep_curve", ["keep_lane", "curve"]
    return "keep", ["keep_lane"]


def wording_index(info: ExpertInfo) -> int:
    """The ego's speed band (0, 1, 2 by WORDING_SPEED_BANDS): what picks a situation's
    sentence and object noun, so that the wording follows from what the model sees."""
    return int(np.searchsorted(WORDING_SPEED_BANDS, info.v, side="right"))


def label_frame(infos: list[ExpertInfo], k: int, standing_lead: bool = False) -> Label:
    """The label of 10 Hz frame k (standing_lead as in `_situation`)."""
    info = infos[k]
    key, tags = _situation(infos, k, standing_lead)
    decision = TEMPLATE_DECISIONS[key]
    if info.oncoming_near:
        tags.append("oncoming_traffic")
    if info.light_gap is not None and info.light_gap < 40.0:
        tags.append("intersection")
    band = wording_index(info)
    options = _TEMPLATES[key]
    text = options[band % len(options)]
    side = "left" if info.curvature_ahead > 0 else "right"
    color = "yellow" if info.light_state == "yellow" else "red"
    obj = FILLS["obj"][band % 2]
    coc = text.format(obj=obj, side=side, color=color)
    return Label(info.t, coc, decision, tuple(tags))


def label_drive(infos: list[ExpertInfo], count: int | None = None,
                standing_lead: bool = False) -> list[Label]:
    n = len(infos) if count is None else count
    return [label_frame(infos, k, standing_lead) for k in range(n)]
