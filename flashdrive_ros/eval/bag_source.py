"""What a bag path names, as the files a reader opens: a closed rosbag2 directory
(metadata.yaml), or the storage files of a recording that was never closed (no
metadata.yaml, or MCAP files cut off without their footer), read directly, cut-off files
through recovered copies in a temporary directory."""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from flashdrive_ros.eval.errors import BagNotFound, CorruptBag
from flashdrive_ros.eval.mcap_recovery import Recovery, is_cut_off, recover

STORAGE_SUFFIXES = (".mcap", ".db3")


def _file_order(path: Path) -> tuple:
    """Split files in recording order: bag_2.mcap before bag_10.mcap."""
    return tuple(int(part) if part.isdigit() else part
                 for part in re.split(r"(\d+)", path.name))


@dataclass
class BagSource:
    """`files` of the bag: the rosbag2 directory, or storage files in recording order, of
    which `cut_off` MCAP files are read through recovered copies (`reader_paths()`, in a
    temporary directory until `cleanup()` or the end of a with-block); `notes` say what is
    read in place of a closed bag."""
    path: Path
    files: list[Path]
    cut_off: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    workdir: tempfile.TemporaryDirectory | None = None
    recovered: dict[Path, Recovery] = field(default_factory=dict)

    def reader_paths(self) -> list[Path]:
        """The paths a reader opens; recovers the cut-off files (once until cleanup())."""
        if not self.cut_off:
            return list(self.files)
        if self.workdir is None:
            self.workdir = tempfile.TemporaryDirectory(prefix="flashdrive_recovered_")
            for original in self.cut_off:
                try:
                    recovery = recover(original, Path(self.workdir.name) / original.name)
                except (OSError, ValueError) as exc:
                    self.cleanup()
                    raise CorruptBag(f"cannot recover {original}: {exc}") from None
                self.recovered[original] = recovery
        return [self.recovered[f].copy if f in self.recovered else f for f in self.files]

    def all_notes(self) -> list[str]:
        """`notes`, and what each recovered copy kept (after reader_paths())."""
        return self.notes + [r.note() for r in self.recovered.values()]

    def __enter__(self) -> BagSource:
        return self

    def __exit__(self, *exc_info) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        if self.workdir is not None:
            self.workdir.cleanup()
            self.workdir = None
        self.recovered = {}


def _storage_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted((p for p in path.iterdir() if p.suffix in STORAGE_SUFFIXES), key=_file_order)


def bag_source(path: str | Path) -> BagSource:
    """The BagSource of a rosbag2 directory or of one storage file (.mcap, .db3)."""
    path = Path(path)
    if not path.exists():
        raise BagNotFound(f"bag not found: {path}")
    if path.is_file() and path.suffix not in STORAGE_SUFFIXES:
        raise CorruptBag(f"{path} is neither a rosbag2 directory nor a .mcap or .db3 file")
    if path.is_file() and (path.parent / "metadata.yaml").is_file():
        path = path.parent
    files = _storage_files(path)
    cut_off = [f for f in files if f.suffix == ".mcap" and is_cut_off(f)]
    has_metadata = path.is_dir() and (path / "metadata.yaml").is_file()
    if not cut_off and has_metadata:
        return BagSource(path, [path])
    if not files:
        raise CorruptBag(f"{path} holds no metadata.yaml and no .mcap or .db3 file: not a "
                         f"rosbag2 directory")
    notes = ([] if has_metadata else
             [f"{path}: no metadata.yaml (the recording was not closed); read its "
              f"{len(files)} storage file(s) directly"])
    return BagSource(path, files, cut_off, notes)
