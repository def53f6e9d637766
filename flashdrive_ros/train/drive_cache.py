"""Generated drives on disk, so a resumed training run reads back the drives it trained on.

One safetensors file per drive (frames, stamps, poses, speed, decision, expert_future, scene
and the contrast arrays) and `index.json` (file, seed, scenario, dt, CoC sentences, tags and
contrast CoC sentences per drive, in order). A cache written before contrasts reads back
without any.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.numpy import load_file, save_file

from flashdrive_ros.train.coverage import coverage, markdown
from flashdrive_ros.train.drive import Drive

INDEX = "index.json"
ARRAYS = ("frames", "stamps", "poses", "speed", "decision", "expert_future", "scene")
CONTRAST_ARRAYS = ("contrast_step", "contrast_decision", "contrast_future")


def save_drives(drives: list[Drive], folder: Path) -> None:
    """Writes `drives` (in order) under `folder`, replacing an earlier cache there."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, drive in enumerate(drives):
        name = f"drive_{i:04d}.safetensors"
        save_file({key: getattr(drive, key) for key in ARRAYS + CONTRAST_ARRAYS},
                  str(folder / name))
        entries.append({"file": name, "seed": drive.seed, "scenario": drive.scenario,
                        "dt": drive.dt, "coc": drive.coc, "tags": drive.tags,
                        "contrast_coc": drive.contrast_coc})
    (folder / INDEX).write_text(json.dumps(entries) + "\n")


def save_drives_with_coverage(drives: list[Drive], folder: Path, num_frames: int,
                              num_history: int, heading: str = "") -> str:
    """`save_drives`, then the drives' coverage table (markdown, returned) as
    folder/coverage.md under `heading`."""
    save_drives(drives, folder)
    table = markdown(coverage(drives, num_frames, num_history))
    (folder / "coverage.md").write_text(f"{heading}\n\n{table}" if heading else table)
    return table


def load_drives(folder: Path) -> list[Drive]:
    index = folder / INDEX
    if not index.is_file():
        raise FileNotFoundError(f"no drive cache at {folder} ({INDEX} missing)")
    drives = []
    for entry in json.loads(index.read_text()):
        arrays = load_file(str(folder / entry["file"]))
        missing = set(ARRAYS) - set(arrays)
        if missing:
            raise ValueError(f"{entry['file']} lacks {sorted(missing)}")
        contrast = {key: arrays[key] for key in CONTRAST_ARRAYS if key in arrays}
        if contrast:
            contrast["contrast_coc"] = list(entry["contrast_coc"])
        drives.append(Drive(int(entry["seed"]), entry["scenario"], float(entry["dt"]),
                            coc=list(entry["coc"]), tags=list(entry["tags"]),
                            **{key: arrays[key] for key in ARRAYS}, **contrast))
    return drives
