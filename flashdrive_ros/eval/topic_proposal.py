"""A topic mapping proposed for a bag: camera slots by name hints, odometry by type."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml

from flashdrive_ros.eval.bag import LABELS_TYPE, ODOMETRY_TYPE, TopicInfo
from flashdrive_ros.eval.images import COMPRESSED_TYPE, IMAGE_TYPES
from flashdrive_ros.eval.topics import TopicMapping

SLOT_HINTS = {
    "camera_front_tele_30fov": ("front_tele", "tele", "narrow", "long_range", "30fov"),
    "camera_cross_left_120fov": ("cross_left", "front_left", "left"),
    "camera_cross_right_120fov": ("cross_right", "front_right", "right"),
    "camera_front_wide_120fov": ("front_wide", "wide", "front", "center", "centre"),
}
ODOMETRY_HINTS = ("kinematic_state", "localization")


class ProposalError(ValueError):
    """The bag lacks what a mapping needs (image topics for every slot, an odometry topic)."""


@dataclass
class Proposal:
    mapping: TopicMapping
    notes: list[str] = field(default_factory=list)


def tokens(topic: str) -> list[str]:
    return [t for t in re.split(r"[/_.\-]+", topic.lower()) if t]


def matches(topic: str, hint: str) -> bool:
    """The hint's tokens appear in a row among the topic's tokens."""
    have, want = tokens(topic), tokens(hint)
    return any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def _preferred(candidates: list[TopicInfo]) -> TopicInfo:
    """CompressedImage over Image (smaller to play back), then the most messages."""
    return min(candidates, key=lambda i: (i.msgtype != COMPRESSED_TYPE, -i.count, i.topic))


def _hints(slot: str) -> tuple[str, ...]:
    short = re.sub(r"^camera_|_\d+fov$", "", slot)
    return SLOT_HINTS.get(slot, (short,))


def propose_cameras(images: list[TopicInfo], slots: tuple[str, ...],
                    notes: list[str]) -> list[str]:
    if len(images) < len(slots):
        raise ProposalError(f"the bag has {len(images)} image topics, the model takes "
                            f"{len(slots)} cameras ({', '.join(slots)})")
    chosen: dict[str, TopicInfo] = {}
    cameras_of = {}  # one physical camera may appear as raw and compressed topics
    for info in images:
        cameras_of.setdefault(info.topic.removesuffix("/compressed"), []).append(info)
    free = dict(cameras_of)
    depth = max(len(_hints(s)) for s in slots)
    progress = True
    while progress:
        progress = False
        for rank in range(depth):
            for slot in slots:
                hints = _hints(slot)
                if slot in chosen or rank >= len(hints):
                    continue
                hits = [k for k in sorted(free) if matches(k, hints[rank])]
                if len(hits) == 1:
                    chosen[slot] = _preferred(free.pop(hits[0]))
                    notes.append(f"{slot} <- {chosen[slot].topic} (name hint "
                                 f"{hints[rank]!r})")
                    progress = True
    for slot in slots:
        if slot not in chosen:
            key = sorted(free)[0]
            chosen[slot] = _preferred(free.pop(key))
            notes.append(f"{slot} <- {chosen[slot].topic} (GUESSED: no name hint matched; "
                         f"check the slot)")
    transports = {chosen[s].msgtype for s in slots}
    if len(transports) > 1:
        notes.append("the cameras mix Image and CompressedImage: the replay reads both, the "
                     "drive node subscribes one image_transport for all")
    return [chosen[s].topic for s in slots]


def propose_odometry(infos: list[TopicInfo], notes: list[str]) -> str:
    odometry = [i for i in infos if i.msgtype == ODOMETRY_TYPE]
    if not odometry:
        raise ProposalError(f"the bag has no {ODOMETRY_TYPE} topic")

    def rank(info: TopicInfo) -> tuple:
        hint = next((k for k, h in enumerate(ODOMETRY_HINTS) if matches(info.topic, h)),
                    len(ODOMETRY_HINTS))
        return hint, -info.count, info.topic

    best = min(odometry, key=rank)
    if len(odometry) > 1:
        notes.append(f"odometry <- {best.topic} of {[i.topic for i in odometry]}")
    return best.topic


def propose(infos: list[TopicInfo], slots: tuple[str, ...]) -> Proposal:
    """A mapping for a bag of these topics and a model of these camera slots."""
    notes: list[str] = []
    images = [i for i in infos if i.msgtype in IMAGE_TYPES and i.count > 0]
    cameras = propose_cameras(images, slots, notes)
    odometry = propose_odometry([i for i in infos if i.count > 0], notes)
    labels = next((i.topic for i in infos if i.msgtype == LABELS_TYPE and i.count > 0
                   and tokens(i.topic)[-1:] == ["labels"]), None)
    return Proposal(TopicMapping(cameras=tuple(cameras), odometry=odometry, labels=labels),
                    notes)


def proposal_yaml(proposal: Proposal, bag: str) -> str:
    """The topics YAML text, the notes as comments."""
    head = [f"# topics YAML proposed for {bag}; camera slots in model order:"]
    head += [f"#   {note}" for note in proposal.notes]
    body = yaml.safe_dump(proposal.mapping.to_yaml_dict(), sort_keys=False)
    return "\n".join(head) + "\n" + body
