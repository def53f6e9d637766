"""Which bag topics feed which model inputs: camera slots, odometry, optional sim labels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from flashdrive_ros.eval.errors import TopicsConfigError
from flashdrive_ros.sim.topics import (CAMERA_NAMES, LABELS_TOPIC, ODOMETRY_TOPIC,
                                       camera_image_topic)

YAML_KEYS = ("cameras", "odometry", "labels")


@dataclass(frozen=True)
class TopicMapping:
    """cameras: one image topic per model camera slot, in slot order (CompressedImage or
    Image). labels: a std_msgs/String JSON topic with ground-truth decisions, used only when
    the bag holds it; None disables it."""

    cameras: tuple[str, ...] = tuple(camera_image_topic(n) for n in CAMERA_NAMES)
    odometry: str = ODOMETRY_TOPIC
    labels: str | None = LABELS_TOPIC

    def __post_init__(self) -> None:
        object.__setattr__(self, "cameras", tuple(self.cameras))
        if not self.cameras:
            raise TopicsConfigError("topic mapping needs at least one camera topic")
        named = [*self.cameras, self.odometry] + ([self.labels] if self.labels else [])
        for topic in named:
            if not isinstance(topic, str) or not topic.startswith("/") or topic.endswith("/"):
                raise TopicsConfigError(f"topic {topic!r} must be an absolute name like /a/b")
        if len(set(named)) != len(named):
            raise TopicsConfigError(f"topic mapping uses a topic twice: {named}")

    @classmethod
    def from_yaml(cls, path: str | Path) -> TopicMapping:
        """YAML keys: cameras (list of topics, slot order), odometry, labels (or null)."""
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except FileNotFoundError:
            raise TopicsConfigError(f"topics YAML not found: {path}") from None
        except yaml.YAMLError as exc:
            raise TopicsConfigError(f"topics YAML {path} does not parse: {exc}") from None
        if not isinstance(data, dict):
            raise TopicsConfigError(f"topics YAML {path} must hold a mapping with keys "
                                    f"{YAML_KEYS}")
        unknown = set(data) - set(YAML_KEYS)
        if unknown:
            raise TopicsConfigError(f"topics YAML {path}: unknown keys {sorted(unknown)}; "
                                    f"known: {YAML_KEYS}")
        cameras = data.get("cameras", list(cls.cameras))
        if not isinstance(cameras, list):
            raise TopicsConfigError(f"topics YAML {path}: cameras must be a list of topics")
        return cls(cameras=tuple(cameras), odometry=data.get("odometry", cls.odometry),
                   labels=data.get("labels", cls.labels))

    def with_overrides(self, cameras: list[str] | None = None, odometry: str | None = None,
                       labels: str | None = None) -> TopicMapping:
        """Command-line overrides; labels="" disables labels."""
        return TopicMapping(
            cameras=tuple(cameras) if cameras else self.cameras,
            odometry=odometry or self.odometry,
            labels=self.labels if labels is None else (labels or None))
