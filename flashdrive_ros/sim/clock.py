"""Sim time as ROS time: header and bag stamps of a synthetic drive."""

from __future__ import annotations

SIM_EPOCH_NS = 1_700_000_000 * 1_000_000_000


def stamp_ns(t: float) -> int:
    """Bag / header time of sim time t (seconds from the start of the drive)."""
    return SIM_EPOCH_NS + int(round(t * 1e9))


def header_seconds_of(t_ns: int) -> float:
    """A header stamp in seconds as a reader computes it: sec + nanosec * 1e-9."""
    sec, nanosec = divmod(t_ns, 1_000_000_000)
    return sec + nanosec * 1e-9
