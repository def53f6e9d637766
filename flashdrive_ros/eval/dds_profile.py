"""Which Fast DDS profile the through-ROS replay's player and node run on: the one asked for,
the environment's, or (auto) the shipped large-image profile when the bag's camera messages
do not fit Fast DDS's default shared-memory segment."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from flashdrive_ros.paths import config_file

# read by Fast DDS when a process first starts DDS, so set before the player's first context;
# the node process inherits it
DDS_PROFILE_VARIABLES = ("FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE")
FASTDDS_DEFAULT_SEGMENT_BYTES = 512 * 1024
LARGE_IMAGES_PROFILE = "fastdds_large_images.xml"
AUTO, ENVIRONMENT = "auto", "environment"
FAST_DDS_RMWS = ("", "rmw_fastrtps_cpp", "rmw_fastrtps_dynamic_cpp")


@dataclass(frozen=True)
class DdsChoice:
    """profile: the XML file to set for the player and the node (None: leave the environment's
    DDS configuration); note: why, for the console (None: nothing to say)."""

    profile: Path | None
    note: str | None = None


def choose_dds_profile(requested: str | Path, largest_camera_bytes: int,
                       environ: dict[str, str] | os._Environ = os.environ) -> DdsChoice:
    """requested: AUTO, ENVIRONMENT or a profile file (checked by ReplayOptions)."""
    if requested == ENVIRONMENT:
        return DdsChoice(None)
    if requested != AUTO:
        return DdsChoice(Path(requested))
    if any(environ.get(name) for name in DDS_PROFILE_VARIABLES):
        return DdsChoice(None)
    if environ.get("RMW_IMPLEMENTATION", "") not in FAST_DDS_RMWS:
        return DdsChoice(None)
    if largest_camera_bytes <= FASTDDS_DEFAULT_SEGMENT_BYTES:
        return DdsChoice(None)
    profile = config_file(LARGE_IMAGES_PROFILE)
    return DdsChoice(profile, (
        f"DDS: camera messages of up to {largest_camera_bytes / 2**20:.1f} MiB do not fit Fast "
        f"DDS's default {FASTDDS_DEFAULT_SEGMENT_BYTES // 1024} KiB shared-memory segment; the "
        f"player and drive_node run on {profile} (--dds-profile {ENVIRONMENT} keeps the "
        f"environment's DDS configuration)"))


@contextmanager
def dds_profile_environment(choice: DdsChoice,
                            environ: dict[str, str] | os._Environ = os.environ) -> Iterator[None]:
    """The profile variables set to choice.profile (unchanged when None) inside the block,
    restored after it."""
    saved = {name: environ.get(name) for name in DDS_PROFILE_VARIABLES}
    if choice.profile is not None:
        for name in DDS_PROFILE_VARIABLES:
            environ[name] = str(choice.profile)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value
