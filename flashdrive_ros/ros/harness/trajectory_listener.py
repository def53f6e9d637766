"""Keeps the newest trajectory the drive node publishes (nav_msgs/Path on ~/trajectory): its
stamp, the plan's input time, and its poses as numpy."""

from __future__ import annotations

import threading

import numpy as np
from nav_msgs.msg import Path
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from flashdrive_ros.ros import names
from flashdrive_ros.ros.convert import stamp_to_seconds

DEPTH = 10


class TrajectoryListener:
    def __init__(self, node: Node, node_name: str) -> None:
        self._lock = threading.Lock()
        self._latest: tuple[float, float, np.ndarray] | None = None
        self.received = 0
        qos = QoSProfile(depth=DEPTH, reliability=ReliabilityPolicy.RELIABLE)
        self.subscription = node.create_subscription(
            Path, names.resolved(names.TRAJECTORY_TOPIC, node_name=node_name), self._on_path,
            qos)

    def matched(self) -> bool:
        return self.subscription.get_publisher_count() > 0

    def latest(self) -> tuple[float, float, np.ndarray] | None:
        """(stamp s, waypoint spacing s, poses float64 [N, 3] x, y, yaw in the frame of the
        stamp; N = 0 when the node has no valid plan), or None before the first Path."""
        with self._lock:
            return self._latest

    def _on_path(self, msg: Path) -> None:
        poses = np.array([(p.pose.position.x, p.pose.position.y,
                           2.0 * np.arctan2(p.pose.orientation.z, p.pose.orientation.w))
                          for p in msg.poses], dtype=np.float64).reshape(-1, 3)
        stamp = stamp_to_seconds(msg.header.stamp)
        dt = (stamp_to_seconds(msg.poses[0].header.stamp) - stamp) if msg.poses else 0.0
        with self._lock:
            self._latest = (stamp, dt, poses)
            self.received += 1
