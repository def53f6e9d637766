"""An rclpy context confined to this machine: localhost-only discovery and a domain id of
its own, for tests and local replays that must not meet other ROS graphs."""

from __future__ import annotations

import os

DOMAIN_ID_FIRST = 20
DOMAIN_ID_COUNT = 200
DOMAIN_ID_ENV = "FLASHDRIVE_LOOPBACK_DOMAIN_ID"


def loopback_domain_id() -> int:
    """The DDS domain id of this process's loopback graphs: $FLASHDRIVE_LOOPBACK_DOMAIN_ID
    where set (a test harness gives each test a domain of its own; child processes inherit
    it), else one in [20, 220) derived from the process id."""
    chosen = os.environ.get(DOMAIN_ID_ENV, "")
    if not chosen:
        return DOMAIN_ID_FIRST + os.getpid() % DOMAIN_ID_COUNT
    if not chosen.isdigit() or not DOMAIN_ID_FIRST <= int(chosen) < DOMAIN_ID_FIRST + \
            DOMAIN_ID_COUNT:
        raise ValueError(f"{DOMAIN_ID_ENV}={chosen!r} is not a domain id in "
                         f"[{DOMAIN_ID_FIRST}, {DOMAIN_ID_FIRST + DOMAIN_ID_COUNT})")
    return int(chosen)


def local_context(domain_id: int | None = None, args: list[str] | None = None):
    """Initialize and return a new rclpy Context with localhost discovery on `domain_id`
    (default: loopback_domain_id()). Shut it down with `context.shutdown()`."""
    import rclpy

    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    context = rclpy.Context()
    rclpy.init(args=args, context=context,
               domain_id=loopback_domain_id() if domain_id is None else domain_id)
    return context
