"""Closed-loop drives of a model, labelled by the expert, written as a drive cache that a
training run takes with `--extra-drives` (DAgger-style data).

    python -m flashdrive_ros.train.policy_drives --model-dir models/default \\
        --out out/policy_drives --drives 16 --workers 16
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.seeds import train_seeds
from flashdrive_ros.train.drive_cache import save_drives_with_coverage
from flashdrive_ros.train.generate import generate_drives
from flashdrive_ros.train.policy_drive import PolicySpec
from flashdrive_ros.train.recipe import Recipe

SEED_OFFSET = 50_000  # policy drives take training seeds apart from the recipe's drives


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", type=Path, default=None,
                   help="model that drives (default: the embedded one)")
    p.add_argument("--out", type=Path, required=True, help="drive cache folder to write")
    p.add_argument("--drives", type=int, default=16)
    p.add_argument("--seconds", type=float, default=Recipe.drive_seconds)
    p.add_argument("--seed-offset", type=int, default=SEED_OFFSET,
                   help="first training seed (index into the training seed range)")
    p.add_argument("--latency-ms", type=float, default=PolicySpec.latency_ms)
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    args = p.parse_args(argv)
    model_dir = args.model_dir or default_model_dir()
    try:
        if args.drives < 1 or args.seconds <= 0:
            raise ValueError("--drives must be >= 1 and --seconds > 0")
        policy = PolicySpec(str(model_dir), latency_ms=args.latency_ms)
        seeds = train_seeds(args.drives, args.seed_offset)
    except (FileNotFoundError, ValueError) as exc:
        p.error(str(exc))
    if (args.out / "index.json").exists():
        p.error(f"{args.out} already holds a drive cache")
    cfg = ModelConfig.load(Path(model_dir) / "config.json")
    start = time.monotonic()
    drives = generate_drives(seeds, args.seconds, cfg, args.workers, Recipe().noise,
                             policy=policy)
    print(save_drives_with_coverage(drives, args.out, cfg.prompt.num_frames,
                                    cfg.action.num_history))
    print(f"{len(drives)} drives (seeds {seeds[0]}..{seeds[-1]}) in "
          f"{time.monotonic() - start:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
