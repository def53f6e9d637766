"""Seeded, deterministic faults applied to a bag's message stream before it reaches the
planner: each fault acts inside one interval of the stream and records which messages it
spoiled (`bad_stamps`), so that a plan built from them can be detected."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

from flashdrive_ros.ros.harness.stream import NS_PER_S, StreamMessage

IMAGE_TYPES = ("sensor_msgs/msg/CompressedImage",)
ODOMETRY_TYPE = "nav_msgs/msg/Odometry"
FAULT_DEFAULTS = {
    "drop": 0.1,            # probability a camera frame is dropped
    "jitter": 0.03,         # header stamps moved by up to +- this many seconds
    "reorder": 0.1,         # probability a message swaps places with the next one on its topic
    "duplicate": 0.1,       # probability a message is published twice
    "silent_camera": 2.0,   # seconds one camera publishes nothing
    "odom_gap": 1.0,        # seconds without odometry
    "time_jump": 5.0,       # seconds the clock and every stamp jump back (a bag loop)
    "corrupt_jpeg": 0.1,    # probability a JPEG payload is truncated or garbled
    "wrong_size": 0.1,      # probability a frame is re-encoded at half its size
    "nonfinite_odom": 0.1,  # probability an odometry sample holds NaN or inf
}
INSTANT_FAULTS = ("silent_camera", "odom_gap", "time_jump")
HEADER_GARBLE_BYTES = 64


class FaultSpecError(ValueError):
    pass


@dataclass(frozen=True)
class Fault:
    """One fault: `value` is its probability or seconds (FAULT_DEFAULTS); it acts on the
    messages published in [start_s, start_s + duration_s) of the stream's clock, counted from
    the stream start (the interval faults use `value` as their duration)."""

    name: str
    value: float
    start_s: float = 4.0
    duration_s: float = 3.0

    def __post_init__(self) -> None:
        if self.name not in FAULT_DEFAULTS:
            raise FaultSpecError(f"unknown fault {self.name!r}; faults: "
                                 f"{', '.join(FAULT_DEFAULTS)}")
        if not (math.isfinite(self.value) and self.value > 0):
            raise FaultSpecError(f"{self.name}: value must be finite and > 0, got {self.value}")
        if self.name not in INSTANT_FAULTS and self.value > 1 and self.name != "jitter":
            raise FaultSpecError(f"{self.name}: a probability must be <= 1, got {self.value}")
        if not (self.start_s >= 0 and self.duration_s > 0):
            raise FaultSpecError("fault start must be >= 0 and duration > 0")

    @property
    def active_s(self) -> float:
        """Seconds of stream time the fault acts on (0 for the time jump)."""
        if self.name == "time_jump":
            return 0.0
        return self.value if self.name in INSTANT_FAULTS else self.duration_s


def parse_faults(spec: str, start_s: float = 4.0, duration_s: float = 3.0) -> list[Fault]:
    """'all' or comma-separated 'name' / 'name=value' (e.g. 'drop=0.2,odom_gap')."""
    items = list(FAULT_DEFAULTS) if spec.strip() == "all" else [
        s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise FaultSpecError("no fault named")
    faults = []
    for item in items:
        name, _, value = item.partition("=")
        try:
            number = float(value) if value else FAULT_DEFAULTS.get(name.strip(), 1.0)
        except ValueError:
            raise FaultSpecError(f"{item!r}: value is not a number") from None
        faults.append(Fault(name.strip(), number, start_s, duration_s))
    return faults


@dataclass
class FaultedStream:
    """The faulted messages in publish order; spoiled: (topic, header stamp s) of every message
    the fault made unusable but still published; removed: how many it withheld;
    fault_end_stamp: the header time at which the fault is over (after a time jump: in the
    new time base)."""

    messages: list[StreamMessage]
    spoiled: list[tuple[str, float]] = field(default_factory=list)
    removed: int = 0
    fault_start_stamp: float = 0.0
    fault_end_stamp: float = 0.0


def _corrupt(msg, rng: np.random.Generator):
    """Truncate the JPEG, or garble the bytes after its start marker (its tables). Garbled
    entropy-coded data would still decode (to wrong pixels) and is not injected."""
    data = np.asarray(msg.data, dtype=np.uint8).copy()
    if rng.random() < 0.5:
        data = data[: max(len(data) // 2, 1)]
    else:
        end = min(len(data), 2 + HEADER_GARBLE_BYTES)
        data[2:end] = rng.integers(0, 256, end - 2, dtype=np.uint8)
    msg.data = data
    return msg


def _resized(msg):
    bgr = cv2.imdecode(np.asarray(msg.data, dtype=np.uint8), cv2.IMREAD_COLOR)
    height, width = bgr.shape[:2]
    ok, buffer = cv2.imencode(".jpg", cv2.resize(bgr, (max(width // 2, 1),
                                                       max(height // 2, 1))))
    if not ok:
        raise RuntimeError("JPEG re-encoding failed")
    msg.data = buffer.reshape(-1)
    return msg


def _nonfinite(msg, rng: np.random.Generator):
    msg.pose.pose.position.x = float("nan") if rng.random() < 0.5 else float("inf")
    return msg


def apply_fault(messages: list[StreamMessage], fault: Fault, seed: int,
                camera_topics: list[str], odometry_topic: str) -> FaultedStream:
    """Deterministic in (messages, fault, seed)."""
    rng = np.random.default_rng(seed)
    if not messages:
        return FaultedStream([])
    origin = messages[0].clock_ns
    begin = origin + round(fault.start_s * NS_PER_S)
    end = begin + round(fault.active_s * NS_PER_S)
    silent_topic = camera_topics[min(1, len(camera_topics) - 1)]
    out: list[StreamMessage] = []
    bad: list[tuple[str, float]] = []
    removed = 0
    jump_ns = round(fault.value * NS_PER_S) if fault.name == "time_jump" else 0
    for message in messages:
        inside = begin <= message.clock_ns < end
        if fault.name == "time_jump" and message.clock_ns >= begin:
            out.append(message.shifted(-jump_ns))
            continue
        if not inside or not message.has_header:
            out.append(message)
            continue
        is_image = message.topic in camera_topics and message.msgtype in IMAGE_TYPES
        is_odometry = message.topic == odometry_topic
        stamp_s = message.stamp_ns / NS_PER_S
        name = fault.name
        if (name == "drop" and is_image and rng.random() < fault.value) or \
                (name == "silent_camera" and message.topic == silent_topic) or \
                (name == "odom_gap" and is_odometry):
            removed += 1
            continue
        if name == "jitter" and (is_image or is_odometry):
            shift = rng.uniform(-fault.value, fault.value)
            out.append(message.with_stamp_ns(message.stamp_ns + round(shift * NS_PER_S)))
        elif name == "corrupt_jpeg" and is_image and rng.random() < fault.value:
            out.append(message.with_message(_corrupt(message.message(), rng)))
            bad.append((message.topic, stamp_s))
        elif name == "wrong_size" and is_image and rng.random() < fault.value:
            out.append(message.with_message(_resized(message.message())))
            bad.append((message.topic, stamp_s))
        elif name == "nonfinite_odom" and is_odometry and rng.random() < fault.value:
            out.append(message.with_message(_nonfinite(message.message(), rng)))
            bad.append((message.topic, stamp_s))
        elif name == "duplicate" and rng.random() < fault.value:
            out += [message, message]
        else:
            out.append(message)
    if fault.name == "reorder":
        out = _reordered(out, begin, end, fault.value, rng)
    start_stamp = begin / NS_PER_S
    end_stamp = (begin - jump_ns) / NS_PER_S if jump_ns else end / NS_PER_S
    return FaultedStream(out, bad, removed, start_stamp, end_stamp)


def _reordered(messages: list[StreamMessage], begin: int, end: int, probability: float,
               rng: np.random.Generator) -> list[StreamMessage]:
    """Swap the payloads of a message and the next one on its topic (clock times stay), so
    the later stamp arrives first."""
    out = list(messages)
    last_index: dict[str, int] = {}
    for i, message in enumerate(out):
        j = last_index.get(message.topic)
        last_index[message.topic] = i
        if j is None or not (begin <= message.clock_ns < end) or rng.random() >= probability:
            continue
        first, second = out[j], out[i]
        out[j] = StreamMessage(first.topic, first.msgtype, first.clock_ns, second.raw)
        out[i] = StreamMessage(second.topic, second.msgtype, second.clock_ns, first.raw)
        last_index.pop(message.topic)
    return out
