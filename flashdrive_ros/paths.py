"""Where the package's installed data (launch, config, models) lives."""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = "flashdrive_ros"
_SOURCE_ROOT = Path(__file__).resolve().parents[1]


def share_dir() -> Path:
    """The package share directory: ament index, then a source checkout, then sys.prefix."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
        try:
            return Path(get_package_share_directory(PACKAGE))
        except (PackageNotFoundError, LookupError, OSError, ValueError):
            pass
    except ImportError:
        pass
    if (_SOURCE_ROOT / "package.xml").is_file() and (_SOURCE_ROOT / "models").is_dir():
        return _SOURCE_ROOT
    return Path(sys.prefix) / "share" / PACKAGE


def default_model_dir() -> Path:
    return share_dir() / "models" / "default"


def config_file(name: str) -> Path:
    return share_dir() / "config" / name
