"""manifest.json of a model directory: every file's sha256 and size, written once and checked
at load; a missing, resized, altered or unlisted weights file is refused with its name."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from flashdrive_ros.model.weights import WeightsError

MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 1
CHUNK_BYTES = 1 << 20
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _model_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.rglob("*")
                  if p.is_file() and p.name != MANIFEST_FILE)


def write_manifest(model_dir: str | Path) -> dict:
    """Write model_dir/manifest.json listing every other file; returns it."""
    model_dir = Path(model_dir)
    files = {p.relative_to(model_dir).as_posix(): {"sha256": sha256_of(p),
                                                   "size": p.stat().st_size}
             for p in _model_files(model_dir)}
    manifest = {"version": MANIFEST_VERSION, "files": files}
    (model_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(model_dir: Path) -> dict[str, dict] | None:
    """The manifest's files, None when the directory has no manifest.json."""
    path = model_dir / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
        if manifest.get("version") != MANIFEST_VERSION or not isinstance(files, dict) or not all(
                isinstance(e, dict) and isinstance(e.get("sha256"), str)
                and isinstance(e.get("size"), int) for e in files.values()):
            raise ValueError("needs version 1 and files {name: {sha256, size}}")
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError) as exc:
        raise WeightsError(model_dir, [f"{MANIFEST_FILE}: unreadable ({exc})"]) from None
    return files


def verify_manifest(model_dir: str | Path, required: bool = False) -> bool:
    """Check every listed file's size and sha256, and that no weights file is unlisted.
    Returns False when there is no manifest (an error when `required`); raises WeightsError
    naming every problem."""
    model_dir = Path(model_dir)
    files = read_manifest(model_dir)
    if files is None:
        if required:
            raise WeightsError(model_dir, [f"no {MANIFEST_FILE} (write it with "
                                           f"flashdrive_ros.model.manifest.write_manifest)"])
        return False
    problems = []
    for name, entry in sorted(files.items()):
        path = model_dir / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            problems.append(f"{MANIFEST_FILE}: {name!r} is not inside the model directory")
        elif not path.is_file():
            problems.append(f"{name}: listed in {MANIFEST_FILE} but missing")
        elif path.stat().st_size != entry["size"]:
            problems.append(f"{name}: {path.stat().st_size} bytes, {MANIFEST_FILE} says "
                            f"{entry['size']} (truncated or replaced)")
        elif sha256_of(path) != entry["sha256"]:
            problems.append(f"{name}: sha256 differs from {MANIFEST_FILE} (corrupt or "
                            f"modified)")
    unlisted = [p.relative_to(model_dir).as_posix() for p in _model_files(model_dir)
                if p.suffix in WEIGHT_SUFFIXES and p.relative_to(model_dir).as_posix()
                not in files]
    problems += [f"{name}: weights file not listed in {MANIFEST_FILE}" for name in unlisted]
    if problems:
        raise WeightsError(model_dir, problems)
    return True
