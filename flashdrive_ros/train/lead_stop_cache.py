"""Lead-stop forks of many training seeds written as a drive cache that a training run takes
with `--extra-drives`: the forks the action expert needs in numbers (docs/MODEL.md, "The fork
probe"), made apart from the run so that their data time does not come out of its call.

    python -m flashdrive_ros.train.lead_stop_cache --out out/lead_stop_drives \\
        --seeds 120 --seed-offset 1024 --per-drive 3 --workers 16
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.lead_stops import LeadStops
from flashdrive_ros.sim.seeds import train_seeds
from flashdrive_ros.train.drive_cache import INDEX, save_drives_with_coverage
from flashdrive_ros.train.generate import lead_stop_drives
from flashdrive_ros.train.recipe import Recipe
from flashdrive_ros.train.run_options import add_on_off, on_off


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="drive cache folder to write")
    p.add_argument("--model-dir", type=Path, default=None,
                   help="model whose camera inputs the frames are rendered for (default: the "
                        "embedded one)")
    p.add_argument("--seeds", type=int, required=True,
                   help="training seeds whose drives are forked")
    p.add_argument("--seed-offset", type=int, required=True,
                   help="first of them (index into the training seed range; keep it apart "
                        "from the training run's own --train-seed-offset range)")
    p.add_argument("--per-drive", type=int, default=3, help="forks drawn per seed's drive")
    p.add_argument("--seconds", type=float, default=Recipe.drive_seconds,
                   help="length of the seed drives the forks are placed in")
    add_on_off(p, "--contrast", LeadStops.contrast, "the forks' contrasts (LeadStops.contrast)")
    add_on_off(p, "--moving-twin", LeadStops.moving_twin,
               "each fork also as its moving twin (LeadStops.moving_twin)")
    add_on_off(p, "--matched-twin", LeadStops.matched_twin,
               "each fork also as its matched twin (LeadStops.matched_twin)")
    add_on_off(p, "--standing-lead-label", True,
               "label a standing binding lead a reason to stop (Recipe.standing_lead_label)")
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    args = p.parse_args(argv)
    model_dir = args.model_dir or default_model_dir()
    try:
        if args.seeds < 1 or args.seconds <= 0:
            raise ValueError("--seeds must be >= 1 and --seconds > 0")
        spec = LeadStops(per_drive=args.per_drive, **{name: value for name, value in (
            ("contrast", on_off(args.contrast)), ("moving_twin", on_off(args.moving_twin)),
            ("matched_twin", on_off(args.matched_twin)))
            if value is not None})
        if not spec.enabled:
            raise ValueError("--per-drive must be >= 1")
        seeds = train_seeds(args.seeds, args.seed_offset)
        cfg = ModelConfig.load(Path(model_dir) / "config.json")
    except (FileNotFoundError, ValueError) as exc:
        p.error(str(exc))
    if (args.out / INDEX).exists():
        p.error(f"{args.out} already holds a drive cache")
    standing = on_off(args.standing_lead_label) is not False
    start = time.monotonic()
    drives = lead_stop_drives(seeds, args.seconds, cfg, spec, Recipe().noise, args.workers,
                              standing, report=lambda line: print(line, flush=True))
    if not drives:
        print(f"error: no lead stop found in the drives of seeds {seeds[0]}..{seeds[-1]}",
              file=sys.stderr)
        return 1
    print(save_drives_with_coverage(
        drives, args.out, cfg.prompt.num_frames, cfg.action.num_history,
        f"lead stops {dataclasses.asdict(spec)}, seeds {seeds[0]}..{seeds[-1]}, standing-lead "
        f"label {'on' if standing else 'off'}"))
    print(f"{len(drives)} forks, {sum(d.num_steps for d in drives)} frames (seeds "
          f"{seeds[0]}..{seeds[-1]}) in {time.monotonic() - start:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
