"""A written rosbag2 directory rewritten the way ROS 2 Humble's rosbag2 writes it.

Humble records metadata.yaml version 5: offered QoS profiles as one YAML string with the rmw
enum numbers, and no type description hashes, custom data or distro. Its sqlite3 files are
of schema 3: no message_definitions table, no metadata table and no type hashes, so a reader
knows a message type by its name only (a vendor type is then unknown to it). Its mcap files
keep their schemas. Bags with file-compressed storage files are not rewritten (refused by
`check_layout`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import yaml

HUMBLE_METADATA_VERSION = 5
HUMBLE_SQLITE_SCHEMA = 3
HISTORY = {"system_default": 0, "keep_last": 1, "keep_all": 2, "unknown": 3}
RELIABILITY = {"system_default": 0, "reliable": 1, "best_effort": 2, "unknown": 3}
DURABILITY = {"system_default": 0, "transient_local": 1, "volatile": 2, "unknown": 3}
LIVELINESS = {"system_default": 0, "automatic": 1, "manual_by_topic": 3, "unknown": 4}
ENUMS = {"history": HISTORY, "reliability": RELIABILITY, "durability": DURABILITY,
         "liveliness": LIVELINESS}
QOS_KEYS = ("history", "depth", "reliability", "durability", "deadline", "lifespan",
            "liveliness", "liveliness_lease_duration", "avoid_ros_namespace_conventions")


def humble_qos(profiles: list[dict] | str) -> str:
    """Offered QoS profiles (a list of dicts with enum names, or the YAML of one) as the
    YAML string Humble writes, enums as numbers; '' for none."""
    items = yaml.safe_load(profiles) if isinstance(profiles, str) else profiles
    if not items:
        return ""
    def number(key: str, value):
        return ENUMS[key][value.lower()] if key in ENUMS and isinstance(value, str) else value

    rows = [{key: number(key, item[key]) for key in QOS_KEYS} for item in items]
    return yaml.safe_dump(rows, default_flow_style=False, sort_keys=False)


def humble_metadata(info: dict) -> dict:
    """A rosbag2_bagfile_information dict of a later version in Humble's version 5."""
    topics = []
    for entry in info["topics_with_message_count"]:
        meta = entry["topic_metadata"]
        topics.append({"topic_metadata": {
            "name": meta["name"], "type": meta["type"],
            "serialization_format": meta["serialization_format"],
            "offered_qos_profiles": humble_qos(meta.get("offered_qos_profiles") or [])},
            "message_count": entry["message_count"]})
    return {"version": HUMBLE_METADATA_VERSION,
            "storage_identifier": info["storage_identifier"],
            "duration": info["duration"], "starting_time": info["starting_time"],
            "message_count": info["message_count"], "topics_with_message_count": topics,
            "compression_format": info["compression_format"],
            "compression_mode": info["compression_mode"],
            "relative_file_paths": info["relative_file_paths"],
            "files": [{"path": f["path"], "starting_time": f["starting_time"],
                       "duration": f["duration"], "message_count": f["message_count"]}
                      for f in info["files"]]}


def humble_sqlite(path: Path) -> None:
    """Rewrite one sqlite3 storage file in place as schema 3."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT id, offered_qos_profiles FROM topics").fetchall()
        db.executescript("DROP TABLE IF EXISTS message_definitions;"
                         "DROP TABLE IF EXISTS metadata;"
                         "ALTER TABLE topics DROP COLUMN type_description_hash;")
        db.executemany("UPDATE topics SET offered_qos_profiles = ? WHERE id = ?",
                       [(humble_qos(qos), topic_id) for topic_id, qos in rows])
        db.execute("UPDATE schema SET schema_version = ?, ros_distro = 'humble'",
                   (HUMBLE_SQLITE_SCHEMA,))
        db.commit()
    finally:
        db.close()


def rewrite_as_humble(bag: Path) -> None:
    """Rewrite the closed rosbag2 directory `bag` in Humble's layout."""
    meta_path = bag / "metadata.yaml"
    info = yaml.safe_load(meta_path.read_text())["rosbag2_bagfile_information"]
    if info["storage_identifier"] == "sqlite3":
        for name in info["relative_file_paths"]:
            humble_sqlite(bag / name)
    meta_path.write_text(yaml.safe_dump({"rosbag2_bagfile_information": humble_metadata(info)},
                                        default_flow_style=False, sort_keys=False))
