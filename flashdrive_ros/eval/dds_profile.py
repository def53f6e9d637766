"""Which Fast DDS profile the through-ROS replay's player and node run on: the one asked for,
the environment's, or (auto) the shipped large-image profile when the bag's camera messages
do not fit Fast DDS's default shared-memory segment and /dev/shm has room for it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from flashdrive_ros.paths import config_file

# read by Fast DDS when a process first starts DDS, so set before the player's first context;
# the node process inherits it
DDS_PROFILE_VARIABLES = ("FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE")
FASTDDS_DEFAULT_SEGMENT_BYTES = 512 * 1024
LARGE_IMAGES_PROFILE = "fastdds_large_images.xml"
AUTO, ENVIRONMENT = "auto", "environment"
SHM_DIR = "/dev/shm"
SHM_PARTICIPANTS = 2
FAST_DDS_RMWS = ("", "rmw_fastrtps_cpp", "rmw_fastrtps_dynamic_cpp")


@dataclass(frozen=True)
class DdsChoice:
    """profile: the XML file to set for the player and the node (None: leave the environment's
    DDS configuration); note: why, for the console (None: nothing to say)."""

    profile: Path | None
    note: str | None = None


def segment_bytes(profile: Path) -> int:
    """The largest shared-memory segment_size a Fast DDS XML profile sets (0: none)."""
    sizes = [int(el.text) for el in ElementTree.parse(profile).iter()
             if el.tag.rsplit("}", 1)[-1] == "segment_size" and el.text]
    return max(sizes, default=0)


def shm_free_bytes() -> int:
    try:
        return shutil.disk_usage(SHM_DIR).free
    except OSError:
        return 0


def choose_dds_profile(requested: str | Path, largest_camera_bytes: int,
                       environ: dict[str, str] | os._Environ = os.environ,
                       shm_free: Callable[[], int] = shm_free_bytes) -> DdsChoice:
    """requested: AUTO, ENVIRONMENT or a profile file (checked by ReplayOptions). AUTO takes
    the large-image profile only where /dev/shm has room for a segment per participant
    (the player's and the node's)."""
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
    too_large = (f"DDS: camera messages of up to {largest_camera_bytes / 2**20:.1f} MiB do not "
                 f"fit Fast DDS's default {FASTDDS_DEFAULT_SEGMENT_BYTES // 1024} KiB "
                 f"shared-memory segment")
    needed = SHM_PARTICIPANTS * segment_bytes(profile)
    if (free := shm_free()) < needed:
        return DdsChoice(None, (
            f"{too_large}, and {SHM_DIR} has {free / 2**20:.0f} MiB free where {profile} needs "
            f"{needed / 2**20:.0f} MiB ({SHM_PARTICIPANTS} participants): camera frames will "
            f"be lost; give it more shared memory (e.g. docker run --shm-size=1g) or pass "
            f"--dds-profile XML"))
    return DdsChoice(profile, (
        f"{too_large}; the player and drive_node run on {profile} (--dds-profile "
        f"{ENVIRONMENT} keeps the environment's DDS configuration)"))


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
