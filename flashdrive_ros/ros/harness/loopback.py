"""An rclpy context confined to this machine: localhost-only discovery and a domain id of
its own, for tests and local replays that must not meet other ROS graphs."""

from __future__ import annotations

import os

DOMAIN_ID_FIRST = 20
DOMAIN_ID_COUNT = 200


def process_domain_id(pid: int | None = None) -> int:
    """A DDS domain id in [20, 220) derived from the process id."""
    return DOMAIN_ID_FIRST + (os.getpid() if pid is None else pid) % DOMAIN_ID_COUNT


def local_context(domain_id: int | None = None, args: list[str] | None = None):
    """Initialize and return a new rclpy Context with localhost discovery on `domain_id`
    (default: derived from the pid). Shut it down with `context.shutdown()`."""
    import rclpy

    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    context = rclpy.Context()
    rclpy.init(args=args, context=context,
               domain_id=process_domain_id() if domain_id is None else domain_id)
    return context
