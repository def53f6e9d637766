"""Accuracy and latency of each engine variant on held-out synthetic drives, offline, all
variants on the same windows; prints the markdown table kept in docs/MODEL.md.

`python -m flashdrive_ros.eval.ablation --out DIR [--drives N] [--seconds S] [--model-dir D]
[--device cpu|cuda] [--dtype float32|bfloat16]`
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path

import torch

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.eval.bag import BagReader
from flashdrive_ros.eval.held_out import replay_planners
from flashdrive_ros.eval.topics import TopicMapping
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.drafter_name import MROPE_DRAFTER_FILE
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.model.weights import TOKENIZER_FILE
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.settings import add_setting_argument
from flashdrive_ros.sim.bag import write_bag
from flashdrive_ros.sim.seeds import eval_seeds

VARIANTS = {
    "baseline": dict(mode="baseline"),
    "flashdrive": dict(),
    "flashdrive, mrope drafter": dict(),
    "flashdrive, drafter only (no CoC reuse)": dict(coc_reuse=False),
    "flashdrive, full prefill": dict(streaming=False),
    "flashdrive, full Euler": dict(cached_velocity=False),
    "flashdrive, FP8 backbone weights": dict(backbone_weights="fp8"),
}
SAME_COC_AS = "flashdrive"
SAME_COC_KEY = f"same_coc_as_{SAME_COC_AS}"
COLUMNS = [("minADE1 @6.4 s (m)", "minade1_6s"), ("minADE6 @6.4 s (m)", "minade6_6s"),
           ("const. velocity (m)", "cv_minade_6s"), ("decision match", "decision_match_rate"),
           ("accepted length", "accepted_length_mean"), ("CoC tokens", "tokens_per_window")]


def mrope_engine(model_dir: Path, cfg: EngineConfig) -> Engine:
    model = AlpamayoModel.from_dir(model_dir, cfg.device, cfg.torch_dtype)
    drafter_cfg = dataclasses.replace(model.cfg.drafter, rotary="mrope")
    drafter = Drafter(drafter_cfg, model.cfg.text)
    drafter.load_safetensors(model_dir / MROPE_DRAFTER_FILE)
    drafter = drafter.to(device=cfg.device, dtype=cfg.torch_dtype).eval()
    return Engine(model, TextTokenizer.from_file(model_dir / TOKENIZER_FILE), drafter, cfg)


def planners(model_dir: Path, num_samples: int, device: str = "cpu",
             dtype: str = "float32") -> dict[str, Engine]:
    out = {}
    for name, overrides in VARIANTS.items():
        cfg = EngineConfig(num_samples=num_samples, device=device, dtype=dtype, **overrides)
        out[name] = (mrope_engine(model_dir, cfg) if "mrope" in name
                     else Engine.load(model_dir, cfg))
    return out


def held_out_bags(directory: Path, drives: int, seconds: float) -> list[Path]:
    """Bags of the first `drives` evaluation seeds under `directory` (written when absent)."""
    bags = []
    for seed in eval_seeds(drives):
        bag = directory / f"drive_seed{seed}_{seconds:g}s"
        if not (bag / "metadata.yaml").is_file():
            write_bag(bag, seconds, seed)
        bags.append(bag)
    return bags


def run(model_dir: Path, out: Path, drives: int, seconds: float, num_samples: int,
        device: str = "cpu", dtype: str = "float32") -> dict:
    engines = planners(model_dir, num_samples, device, dtype)
    readers = [BagReader(bag, TopicMapping()) for bag in held_out_bags(out, drives, seconds)]
    return replay_planners(engines, engines["baseline"].model.cfg, readers)


def cocs_by_window(rows: list[dict]) -> dict[tuple[float, int], str]:
    """{(t0, n): CoC} of per-window rows, n counting the earlier rows with the same t0: the
    held-out drives share the simulator's clock, so the n-th window at a t0 is drive n's."""
    seen: Counter[float] = Counter()
    out = {}
    for row in rows:
        out[(row["t0"], seen[row["t0"]])] = row["coc"]
        seen[row["t0"]] += 1
    return out


def same_coc_share(block: dict, reference: dict) -> float | None:
    """Share of the windows whose CoC equals the reference's on the same window (both blocks
    with their per-window rows, drives in the same order)."""
    ours, theirs = cocs_by_window(block["per_window"]), cocs_by_window(reference["per_window"])
    shared = ours.keys() & theirs.keys()
    return sum(ours[t] == theirs[t] for t in shared) / len(shared) if shared else None


def add_same_coc(blocks: dict) -> None:
    """SAME_COC_KEY in every block (before the per-window rows are dropped)."""
    reference = blocks[SAME_COC_AS]
    for block in blocks.values():
        block[SAME_COC_KEY] = same_coc_share(block, reference)


def table(blocks: dict) -> str:
    head = ["variant", *(c for c, _ in COLUMNS), f"same CoC as {SAME_COC_AS}",
            "decode p50 / p90 (ms)", "total p50 (ms)", "windows"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, block in blocks.items():
        cells = [name]
        for _, key in COLUMNS:
            value = block.get(key)
            cells.append("-" if value is None else f"{value:.3f}")
        same = block.get(SAME_COC_KEY)
        cells.append("-" if same is None else f"{same:.3f}")
        decode = block["latency_ms"]["decode"]
        cells.append(f"{decode['p50']:.0f} / {decode['p90']:.0f}")
        cells.append(f"{block['latency_ms']['total']['p50']:.0f}")
        cells.append(str(block["windows"]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flashdrive-ablation", description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--drives", type=int, default=3)
    p.add_argument("--seconds", type=float, default=30.0)
    add_setting_argument(p, EngineConfig, "num_samples", default=6)
    add_setting_argument(p, EngineConfig, "device")
    add_setting_argument(p, EngineConfig, "dtype")
    p.add_argument("--model-dir", default=None)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    blocks = run(Path(args.model_dir or default_model_dir()), out, args.drives, args.seconds,
                 args.num_samples, args.device, args.dtype)
    add_same_coc(blocks)
    for block in blocks.values():
        block.pop("per_window", None)
    (out / "ablation.json").write_text(json.dumps(blocks, indent=2) + "\n")
    print(table(blocks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
