"""Streaming fine-tune of an existing model directory, evaluated before and after.

    python -m flashdrive_ros.train.streaming_finetune --model-dir DIR --out OUT
        [--minutes-budget M] [--device cuda] [--smoke]

Stages: (a) streaming-aware training of the whole model (streaming_backbone.py), then (b) the
expert-only streaming fine-tune (streaming_tune.py). The input directory is the "before"
model and stays untouched. Writes OUT/model/ (the "after" model: config.json,
model.safetensors (fp16), tokenizer.json, the input's drafters and other files, a new
manifest.json), OUT/backbone_model/ (after stage (a), when it is evaluated),
OUT/train_log.jsonl, OUT/summary.json, OUT/eval.json and OUT/eval.md (held-out minADE,
decision match, accepted length and CoC tokens of every model with full and with streaming
prefill, on the same windows). The budget covers data, training and evaluation: the first
evaluation is timed and the stages get what is left after the evaluations still to come.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import torch

from flashdrive_ros.eval.held_out import held_out_drives
from flashdrive_ros.eval.model_compare import (
    CompareSettings,
    comparison_table,
    evaluate_model,
    gap_table,
    streaming_gaps,
)
from flashdrive_ros.eval.sim_source import SimDriveSource
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ActionConfig, ModelConfig
from flashdrive_ros.model.manifest import verify_manifest
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.model.weights import CONFIG_FILE, TOKENIZER_FILE
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.seeds import eval_seeds, train_seeds
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.finetune_recipe import FinetuneRecipe, cpu, smoke
from flashdrive_ros.train.generate import generate_drives
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.model_dir import write_derived_model_dir
from flashdrive_ros.train.pipeline import seed_everything
from flashdrive_ros.train.streaming_backbone import train_backbone_streaming
from flashdrive_ros.train.streaming_tune import streaming_tune

MODEL_SUBDIR = "model"
BACKBONE_SUBDIR = "backbone_model"
HEADLINE = ("minade1_6s", "minade6_6s", "decision_match_rate", "accepted_length_mean")


def action_stats(action: ActionConfig) -> dict[str, float]:
    """The model's action normalization, so training targets use the model's own space."""
    return {name: getattr(action, name)
            for name in ("accel_mean", "accel_std", "curvature_mean", "curvature_std")}


def training_windows(cfg: ModelConfig, tokenizer: TextTokenizer, train_list: list[int],
                     eval_list: list[int], seconds: float, device: torch.device,
                     workers: int | None) -> tuple[TrainSet, TrainSet]:
    """Training and held-out windows of freshly simulated drives, in the model's action
    space."""
    drives = generate_drives(train_list + eval_list, seconds, cfg, workers)
    stats = action_stats(cfg.action)
    return (TrainSet.build(cfg, tokenizer, drives[:len(train_list)], stats, device),
            TrainSet.build(cfg, tokenizer, drives[len(train_list):], stats, device))


def headline(blocks: dict[str, dict]) -> dict[str, float | None]:
    return {f"{prefill.split()[0]}_{key}": block.get(key)
            for prefill, block in blocks.items() for key in HEADLINE}


class Evaluations:
    """Held-out evaluations of this run; every result is written to OUT at once, so a run
    stopped later keeps what it measured. Falls back to eager engines if CUDA graphs fail."""

    def __init__(self, out: Path, drives: list[SimDriveSource], settings: CompareSettings,
                 log: TrainLog, summary: dict, report: dict) -> None:
        self.out = out
        self.drives = drives
        self.settings = settings
        self.log = log
        self.summary = summary
        self.report = report
        self.longest_seconds = 0.0

    def run(self, name: str, model_dir: Path) -> None:
        started = time.monotonic()
        try:
            blocks = evaluate_model(model_dir, self.drives, self.settings)
        except RuntimeError as exc:
            if self.settings.cuda_graphs is False:
                raise
            self.log.write("eval_fallback", 0, model=name, error=str(exc)[:500])
            self.settings = dataclasses.replace(self.settings, cuda_graphs=False)
            blocks = evaluate_model(model_dir, self.drives, self.settings)
        seconds = time.monotonic() - started
        self.longest_seconds = max(self.longest_seconds, seconds)
        self.report["results"][name] = blocks
        graphs = self.settings.engine_config(model_dir, True).cuda_graphs
        self.report["engines"][name] = "cuda graphs" if graphs else "eager"
        self.log.write("eval", 0, model=name, seconds=round(seconds, 1), **headline(blocks))
        self.write()

    def write(self) -> None:
        results = self.report["results"]
        self.report["streaming_minus_full"] = streaming_gaps(results)
        (self.out / "summary.json").write_text(json.dumps(self.summary, indent=2) + "\n")
        (self.out / "eval.json").write_text(json.dumps(self.report, indent=2) + "\n")
        (self.out / "eval.md").write_text(report_markdown(self.summary, self.report))


def run(model_dir: Path, out: Path, recipe: FinetuneRecipe, minutes_budget: float,
        device: torch.device, seed: int, workers: int | None, eval_eager: bool = False
        ) -> dict:
    start = time.monotonic()
    budget = minutes_budget * 60
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    log_path.unlink(missing_ok=True)
    log = TrainLog(log_path)
    seed_everything(seed)
    cuda = device.type == "cuda"

    def autocast():
        return (torch.autocast("cuda", dtype=torch.bfloat16) if cuda
                else contextlib.nullcontext())

    cache_dtype = torch.bfloat16 if cuda else torch.float32
    verify_manifest(model_dir)
    cfg = ModelConfig.load(model_dir / CONFIG_FILE)
    tokenizer = TextTokenizer.from_file(model_dir / TOKENIZER_FILE)
    settings = CompareSettings(num_samples=recipe.eval_samples, device=str(device),
                               max_windows=recipe.eval_max_windows,
                               cuda_graphs=False if eval_eager else None)
    train_list = train_seeds(recipe.train_drives, recipe.train_seed_offset)
    eval_list = eval_seeds(recipe.eval_drives)
    summary: dict = {"model_dir": str(model_dir), "device": str(device), "seed": seed,
                     "minutes_budget": minutes_budget,
                     "train_seeds": [train_list[0], train_list[-1]],
                     "eval_seeds": [eval_list[0], eval_list[-1]]}
    report: dict = {"drives": recipe.eval_drives, "seconds": recipe.eval_seconds,
                    "seeds": eval_list, "num_samples": recipe.eval_samples,
                    "max_windows_per_drive": recipe.eval_max_windows, "device": str(device),
                    "engines": {}, "results": {}}
    drives = held_out_drives(recipe.eval_drives, recipe.eval_seconds,
                             workers or os.cpu_count() or 1)
    data, eval_data = training_windows(cfg, tokenizer, train_list, eval_list,
                                       recipe.drive_seconds, device, workers)
    model = AlpamayoModel.from_dir(model_dir, device, torch.float32)
    summary.update(train_windows=len(data), eval_windows=len(eval_data))
    log.write("data", 0, train_windows=len(data), eval_windows=len(eval_data),
              held_out_drives=len(drives), seconds=round(time.monotonic() - start, 1))
    evaluations = Evaluations(out, drives, settings, log, summary, report)
    evaluations.run("before", model_dir)

    def seconds_left(evaluations_to_come: int) -> float:
        spent = time.monotonic() - start
        return (budget - spent - recipe.reserve_seconds - evaluations_to_come
                * evaluations.longest_seconds * recipe.eval_time_margin)

    train_seconds = seconds_left(recipe.evaluations_after_training)
    backbone_seconds = max(train_seconds * (1 - recipe.expert_share),
                           recipe.min_stage_seconds)
    with tf32(cuda):
        summary["backbone"] = train_backbone_streaming(
            model, data, eval_data, recipe.backbone, backbone_seconds, seed, log, device,
            autocast, cache_dtype)
    if recipe.eval_intermediate:
        path = write_derived_model_dir(model, tokenizer, model_dir, out / BACKBONE_SUBDIR)
        evaluations.run("backbone stage", path)
    expert_seconds = max(seconds_left(1), recipe.min_stage_seconds)
    with tf32(cuda):
        summary["expert"] = streaming_tune(
            model, tokenizer, data, eval_data, recipe.expert_steps, expert_seconds,
            recipe.expert_max_windows, recipe.expert_sequences, recipe.expert_samples,
            recipe.expert_lr, seed, log, device, autocast, recipe.expert_eval_sequences)
    after = write_derived_model_dir(model, tokenizer, model_dir, out / MODEL_SUBDIR)
    evaluations.write()
    evaluations.run("after", after)
    summary["seconds"] = round(time.monotonic() - start, 1)
    log.write("done", 0, seconds=summary["seconds"])
    log.close()
    evaluations.write()
    return {**summary, "evaluation": report}


@contextlib.contextmanager
def tf32(enabled: bool):
    """TF32 matmuls while training on a GPU; evaluations run in plain float32."""
    previous = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous


def report_markdown(summary: dict, report: dict) -> str:
    results = report["results"]
    stages = []
    if "backbone" in summary:
        backbone = summary["backbone"]
        stages.append(f"streaming-aware stage: {backbone['steps']} steps, "
                      f"{backbone['streaming_sequences']} streamed sequences, "
                      f"{backbone['full_prefill_windows']} full-prefill windows")
    if "expert" in summary:
        stages.append(f"expert stage: {summary['expert']['steps']} steps")
    if "seconds" in summary:
        stages.append(f"{summary['seconds']:.0f} s in all")
    head = (f"Held-out drives: seeds {report['seeds']} x {report['seconds']:g} s, "
            f"{report['num_samples']} samples per window, {report['device']}; before = "
            f"{summary['model_dir']}" + "".join(f"; {part}" for part in stages) + ".")
    return "\n".join([head, "", comparison_table(results), "",
                      "Streaming minus full prefill:", "",
                      gap_table(streaming_gaps(results)), ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="the model to fine-tune (default: the embedded model)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--minutes-budget", type=float, default=8.0,
                        help="wall time for data, both stages and every evaluation")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--recipe", choices=("gpu", "cpu", "smoke"), default="gpu",
                        help="gpu: one H200 in ~8 min; cpu: a 2-core CPU in ~an hour; "
                        "smoke: one short drive, a few steps, two windows per evaluation")
    parser.add_argument("--smoke", action="store_true", help="the same as --recipe smoke")
    parser.add_argument("--train-drives", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None,
                        help="peak learning rate of the streaming-aware stage")
    parser.add_argument("--no-intermediate-eval", action="store_true",
                        help="skip evaluating the model between the two stages")
    parser.add_argument("--eval-eager", action="store_true",
                        help="evaluate without CUDA graphs (the engine default on CUDA)")
    args = parser.parse_args(argv)
    name = "smoke" if args.smoke else args.recipe
    recipe = {"gpu": FinetuneRecipe, "cpu": cpu, "smoke": smoke}[name]()
    changes: dict = {}
    if args.train_drives is not None:
        changes["train_drives"] = args.train_drives
    if args.no_intermediate_eval:
        changes["eval_intermediate"] = False
    if args.lr is not None:
        changes["backbone"] = dataclasses.replace(recipe.backbone, lr=args.lr)
    recipe = dataclasses.replace(recipe, **changes)
    model_dir = args.model_dir or default_model_dir()
    result = run(model_dir, args.out, recipe, args.minutes_budget, torch.device(args.device),
                 args.seed, args.workers, args.eval_eager)
    print(json.dumps({k: result[k] for k in ("backbone", "expert", "seconds")}, indent=2))
    print((args.out / "eval.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
