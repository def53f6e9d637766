"""What the scene probes (lamp_probe, lead_probe, lane_probe, fork_probe) share: their common
options (lists of numbers in a range among them), the decision a CoC names, the held-out seeds
they run on, the engine they plan with (one sample, no streaming, greedy decoding, so a plan
depends on its window alone), the report they write (`run_probe`) and its table cells for
figures that may be missing (`table_cell`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.labels import DECISION_WORDS
from flashdrive_ros.sim.seeds import EVAL_SEEDS, is_eval_seed

DECISION_OF_WORD = {word: decision for decision, word in DECISION_WORDS.items()}


def coc_decision(coc: str) -> str:
    """The decision a CoC names by its first word ("none" when it names none)."""
    word = coc.split(maxsplit=1)[:1]
    return DECISION_OF_WORD.get(word[0] if word else "", "none")


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-dir", default=None, help="model directory (default: embedded)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--drives", type=int, default=16)
    parser.add_argument("--first-seed", type=int, default=EVAL_SEEDS.start + 100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")


def float_values(name: str, low: float, high: float) -> Callable[[str], tuple[float, ...]]:
    """An argparse type: comma-separated numbers, each finite and in [low, high]."""
    def parse(text: str) -> tuple[float, ...]:
        try:
            values = tuple(float(v) for v in text.split(","))
        except ValueError:
            values = ()
        if not values or any(not (np.isfinite(v) and low <= v <= high) for v in values):
            raise argparse.ArgumentTypeError(f"{name} takes values in [{low:g}, {high:g}], "
                                             f"got {text}")
        return values
    return parse


def table_cell(value: float | None, spec: str) -> str:
    """A markdown table cell: the value in `spec` format, "-" where there is none."""
    return "-" if value is None else format(value, spec)


def held_out_seeds(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    """The drives' seeds; a parser error when they leave the held-out range or the drive
    length is not positive."""
    seeds = list(range(args.first_seed, args.first_seed + args.drives))
    if args.drives < 1 or not (is_eval_seed(seeds[0]) and is_eval_seed(seeds[-1])):
        parser.error(f"seeds {args.first_seed} .. {args.first_seed + args.drives - 1} leave "
                     f"the held-out range")
    if not args.seconds > 0:
        parser.error("--seconds must be > 0")
    return seeds


def load_probe_engine(args: argparse.Namespace):
    """(model directory, engine), or None after printing why the model did not load."""
    import torch

    from flashdrive_ros.engine.engine import Engine

    model_dir = Path(args.model_dir) if args.model_dir else default_model_dir()
    torch.manual_seed(0)
    try:
        return model_dir, Engine.load(model_dir, EngineConfig(
            num_samples=1, streaming=False, speculative=False, device=args.device))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def write_probe_report(out: Path, json_name: str, markdown_name: str, payload: dict,
                       text: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / json_name).write_text(json.dumps(payload, indent=2) + "\n")
    (out / markdown_name).write_text(text)


def run_probe(parser: argparse.ArgumentParser, args: argparse.Namespace,
              seed_rows: Callable[[object, int], list[dict]],
              summarize: Callable[[list[dict]], list[dict]],
              markdown: Callable[[list[dict], str, list[int]], str],
              json_name: str, markdown_name: str) -> int:
    """With the probe's parsed options, plan every held-out seed's rows (`seed_rows(engine,
    seed)`), write `json_name` (model, seeds, summary, rows) and `markdown_name` in --out and
    print the markdown; the exit status (2 when the model does not load)."""
    seeds = held_out_seeds(parser, args)
    loaded = load_probe_engine(args)
    if loaded is None:
        return 2
    model_dir, engine = loaded
    rows = [row for seed in seeds for row in seed_rows(engine, seed)]
    summary = summarize(rows)
    text = markdown(summary, str(model_dir), seeds)
    write_probe_report(args.out, json_name, markdown_name,
                       {"model_dir": str(model_dir), "seeds": seeds, "summary": summary,
                        "rows": rows}, text)
    print(text)
    return 0
