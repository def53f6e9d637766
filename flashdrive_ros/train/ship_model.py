"""Ship a training run's model directory as the embedded default: its model files and the
run's summary copied, the speculative drafter (`drafter.safetensors`) set to the block size it
decodes with, the manifest rewritten, the size limit checked.

    python -m flashdrive_ros.train.ship_model --run-dir out/retrain --to models/default
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path

from flashdrive_ros.model.drafter_name import DRAFTER_FILE, MROPE_DRAFTER_FILE
from flashdrive_ros.model.drafter_weights import read_drafter_file, save_drafter_tensors
from flashdrive_ros.model.manifest import MANIFEST_FILE, write_manifest

SUMMARY_FILE = "train_summary.json"
DRAFTER_BLOCK = 16
SIZE_LIMIT_BYTES = 24_000_000  # the model files without the comparison drafter


def set_drafter_block(path: Path, block_size: int) -> None:
    """Rewrite the block size stored in a drafter file's config (weights unchanged)."""
    tensors, cfg = read_drafter_file(path)
    if cfg is None:
        raise ValueError(f"{path} holds no drafter config to change")
    save_drafter_tensors(tensors, dataclasses.replace(cfg, block_size=block_size), path)


def ship(run_dir: Path, target: Path, drafter_block: int = DRAFTER_BLOCK) -> dict:
    """Replace `target`'s files with the run's model; returns the new manifest."""
    model = run_dir / "model"
    if not (model / "config.json").is_file():
        raise FileNotFoundError(f"{model} holds no model (config.json missing)")
    if not (run_dir / "summary.json").is_file():
        raise FileNotFoundError(f"{run_dir} holds no summary.json")
    files = [p for p in sorted(model.iterdir()) if p.is_file() and p.name != MANIFEST_FILE]
    target.mkdir(parents=True, exist_ok=True)
    for old in target.iterdir():
        if old.is_file():
            old.unlink()
    for path in files:
        shutil.copyfile(path, target / path.name)
    shutil.copyfile(run_dir / "summary.json", target / SUMMARY_FILE)
    if (target / DRAFTER_FILE).is_file():
        set_drafter_block(target / DRAFTER_FILE, drafter_block)
    size = sum(p.stat().st_size for p in target.iterdir()
               if p.name not in (MROPE_DRAFTER_FILE, SUMMARY_FILE))
    if size > SIZE_LIMIT_BYTES:
        raise ValueError(f"model files take {size} bytes, over the {SIZE_LIMIT_BYTES} limit")
    return write_manifest(target)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run-dir", required=True, help="training run (model/ and summary.json)")
    p.add_argument("--to", required=True, help="model directory to replace")
    p.add_argument("--drafter-block", type=int, default=DRAFTER_BLOCK,
                   help="block size of the shipped drafter")
    args = p.parse_args(argv)
    if args.drafter_block < 2:
        p.error("--drafter-block must be >= 2")
    manifest = ship(Path(args.run_dir), Path(args.to), args.drafter_block)
    print(f"shipped {len(manifest['files'])} files to {args.to}")


if __name__ == "__main__":
    main()
