"""Which bag topics feed which model inputs: camera slots, odometry, optional sim labels; and
the schema of a topics YAML."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from flashdrive_ros.eval.errors import TopicsConfigError
from flashdrive_ros.sim.topics import (
    CAMERA_NAMES,
    LABELS_TOPIC,
    ODOMETRY_TOPIC,
    camera_image_topic,
)

TOPIC_NAME = re.compile(r"^(/[A-Za-z_][A-Za-z0-9_]*)+$")
PROPOSAL_COMMAND = "flashdrive-topics BAG --out topics.yaml"
PROPOSAL = f"`{PROPOSAL_COMMAND}` writes one for a bag"


@dataclass(frozen=True)
class YamlKey:
    """One key of a topics YAML: whether it must be there, and what its value is."""

    name: str
    required: bool
    expected: str
    flag: str


YAML_SCHEMA = (
    YamlKey("cameras", True, "a list of topic names, one per camera slot in slot order",
            "--camera-topics"),
    YamlKey("odometry", True, "a topic name (nav_msgs/Odometry)", "--odom-topic"),
    YamlKey("labels", False, "a topic name (std_msgs/String JSON labels) or null; left out: "
            "no labels", "--labels-topic"),
)
YAML_KEYS = tuple(k.name for k in YAML_SCHEMA)


def topic_problem(topic) -> str | None:
    if not isinstance(topic, str):
        return f"{topic!r} is a {type(topic).__name__}, not a topic name"
    if not TOPIC_NAME.match(topic):
        hint = (" (two YAML lines run together? check the indentation)"
                if any(c in topic for c in ": ") else "")
        return (f"{topic!r} is not an absolute topic name like /a/b (letters, digits, _; "
                f"no token starting with a digit){hint}")
    return None


@dataclass(frozen=True)
class TopicMapping:
    """cameras: one image topic per model camera slot, in slot order (CompressedImage or
    Image). labels: a std_msgs/String JSON topic with ground-truth decisions, used only when
    the bag holds it; None disables it. The defaults are the simulator's topic names."""

    cameras: tuple[str, ...] = tuple(camera_image_topic(n) for n in CAMERA_NAMES)
    odometry: str = ODOMETRY_TOPIC
    labels: str | None = LABELS_TOPIC

    def __post_init__(self) -> None:
        object.__setattr__(self, "cameras", tuple(self.cameras))
        if not self.cameras:
            raise TopicsConfigError("topic mapping needs at least one camera topic")
        named = [*self.cameras, self.odometry] + ([self.labels] if self.labels else [])
        for topic in named:
            if problem := topic_problem(topic):
                raise TopicsConfigError(f"topic mapping: {problem}")
        if len(set(named)) != len(named):
            raise TopicsConfigError(f"topic mapping uses a topic twice: {named}")

    @classmethod
    def from_yaml(cls, path: str | Path, cameras: list[str] | None = None,
                  odometry: str | None = None, labels: str | None = None) -> TopicMapping:
        """A topics YAML checked against YAML_SCHEMA; cameras / odometry / labels given here
        (the command-line flags) replace the file's values and stand in for missing keys."""
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            raise TopicsConfigError(f"topics YAML not found: {path}") from None
        except yaml.YAMLError as exc:
            raise TopicsConfigError(f"topics YAML {path} does not parse (check the "
                                    f"indentation: keys {', '.join(YAML_KEYS)} at the start "
                                    f"of a line, cameras as a '- /topic' list). {PROPOSAL}\n"
                                    f"{exc}") from None
        values = check_yaml(data, path, {"cameras": cameras, "odometry": odometry,
                                         "labels": labels})
        try:
            return cls(**values)
        except TopicsConfigError as exc:
            raise TopicsConfigError(f"topics YAML {path}: {exc}. {PROPOSAL}") from None

    def with_overrides(self, cameras: list[str] | None = None, odometry: str | None = None,
                       labels: str | None = None) -> TopicMapping:
        """Command-line overrides; labels="" disables labels."""
        return TopicMapping(
            cameras=tuple(cameras) if cameras else self.cameras,
            odometry=odometry or self.odometry,
            labels=self.labels if labels is None else (labels or None))

    def to_yaml_dict(self) -> dict:
        return {"cameras": list(self.cameras), "odometry": self.odometry,
                "labels": self.labels}


def _describe(value) -> str:
    if isinstance(value, dict):
        return f"a mapping with keys {sorted(map(str, value))}"
    return f"{type(value).__name__} {value!r}"


def check_yaml(data, path: Path, given: dict) -> dict:
    """The TopicMapping fields from a parsed topics YAML; errors name the unknown keys, the
    missing keys and each value that is not of the expected type."""
    schema = "; ".join(f"{k.name}: {k.expected}" + ("" if k.required else " (optional)")
                       for k in YAML_SCHEMA)
    if not isinstance(data, dict):
        raise TopicsConfigError(f"topics YAML {path} must hold a mapping ({schema}), got "
                                f"{_describe(data)}. {PROPOSAL}")
    problems = []
    unknown = sorted(map(str, set(data) - set(YAML_KEYS)))
    if unknown:
        problems.append(f"unknown keys {unknown} (known: {', '.join(YAML_KEYS)})")
    missing = [k for k in YAML_SCHEMA if k.required and k.name not in data
               and given.get(k.name) is None]
    if missing:
        problems.append(f"missing keys {[k.name for k in missing]} (give them in the file "
                        f"or with {', '.join(k.flag for k in missing)})")
    values = {}
    for key in YAML_SCHEMA:
        if given.get(key.name) is not None:
            values[key.name] = given[key.name]
            continue
        if key.name not in data:
            if not key.required:
                values[key.name] = None
            continue
        value = data[key.name]
        if key.name == "cameras":
            ok = isinstance(value, list) and value and all(isinstance(t, str) for t in value)
        elif key.required:
            ok = isinstance(value, str)
        else:
            ok = value is None or isinstance(value, str)
        if not ok:
            problems.append(f"{key.name} must be {key.expected}, got {_describe(value)}")
        values[key.name] = tuple(value) if key.name == "cameras" and ok else value
    if "labels" in given and given["labels"] == "":
        values["labels"] = None
    if problems:
        raise TopicsConfigError(f"topics YAML {path}: " + "; ".join(problems) + f". {PROPOSAL}")
    return values
