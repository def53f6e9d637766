"""End-to-end training of the embedded default model.

data (parallel simulator drives with sensor noise; coverage table) -> tokenizer (BPE on the
CoC corpus + Alpamayo specials) -> target (CoC + flow matching) -> streaming-aware training
of the whole model -> drafters (flat and mrope, on the target's greedy CoC) -> streaming
fine-tune of the action expert -> model directory.

    python -m flashdrive_ros.train.pipeline --out DIR [--minutes-budget M] [--device cuda]

Writes DIR/model/ (config.json, model.safetensors (fp16), tokenizer.json, drafter.safetensors
(flat rotary, as config.json says) and drafter_mrope.safetensors), DIR/train_log.jsonl and
DIR/summary.json (with the coverage table, also in DIR/coverage.md). Training seeds come
from seeds.TRAIN_SEEDS, evaluation drives from seeds.EVAL_SEEDS.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.prompt import CAMERA_DISPLAY_NAMES, INSTRUCTION_TEXT, SYSTEM_TEXT
from flashdrive_ros.model.tokenizer import (ALPAMAYO_SPECIAL_NAMES, QWEN_SPECIALS, TextTokenizer,
                                            build_tokenizer)
from flashdrive_ros.model.manifest import write_manifest
from flashdrive_ros.model.weights import save_model_dir
from flashdrive_ros.sim.labels import DECISIONS
from flashdrive_ros.train.draft_corpus import build_draft_corpus
from flashdrive_ros.train.drafter_data import concat_corpora
from flashdrive_ros.train.coverage import check_coverage, coverage, markdown
from flashdrive_ros.train.decision_focus import DecisionFocus, decision_shares
from flashdrive_ros.train.drafter_train import train_drafter
from flashdrive_ros.train.generate import generate_drives, is_disturbed
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.model_dir import half_copy
from flashdrive_ros.train.recipe import Recipe, smoke
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.sim.seeds import eval_seeds, train_seeds
from flashdrive_ros.train.streaming_backbone import train_backbone_streaming
from flashdrive_ros.train.streaming_tune import streaming_tune
from flashdrive_ros.train.target_train import train_target

MODEL_SUBDIR = "model"
MROPE_DRAFTER_FILE = "drafter_mrope.safetensors"


def tokenizer_corpus(cocs: list[str]) -> list[str]:
    """CoC sentences plus the fixed prompt texts, so both compress to few tokens."""
    prompt_texts = [SYSTEM_TEXT, INSTRUCTION_TEXT, "system\n", "user\n", "assistant\n"]
    prompt_texts += [f"{name}: frame 0 " for name in CAMERA_DISPLAY_NAMES.values()]
    prompt_texts += [f"frame {i} " for i in range(8)]
    return cocs + prompt_texts * max(1, len(cocs) // 50)


def train_tokenizer(cocs: list[str], bpe_tokens: int, num_traj_tokens: int) -> TextTokenizer:
    added = len(QWEN_SPECIALS) + num_traj_tokens + len(ALPAMAYO_SPECIAL_NAMES) - 1
    return build_tokenizer(tokenizer_corpus(cocs), added + 256 + bpe_tokens, num_traj_tokens)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run(out: Path, recipe: Recipe, minutes_budget: float, device: torch.device, seed: int,
        workers: int | None) -> dict:
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    log_path.unlink(missing_ok=True)
    log = TrainLog(log_path)
    seed_everything(seed)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def autocast():
        return (torch.autocast("cuda", dtype=torch.bfloat16) if cuda
                else contextlib.nullcontext())

    cache_dtype = torch.bfloat16 if cuda else torch.float32
    probe = recipe.model_config(4096)
    train_list = train_seeds(recipe.train_drives)
    eval_list = eval_seeds(recipe.eval_drives)
    train_drives = generate_drives(train_list, recipe.drive_seconds, probe, workers,
                                   recipe.noise, recipe.disturbance, recipe.disturbed_share)
    eval_drives = generate_drives(eval_list, recipe.drive_seconds, probe, workers)
    drives = train_drives + eval_drives
    frames = sum(d.num_steps for d in drives)
    log.write("data", 0, drives=len(drives), frames=frames,
              seconds=round(time.monotonic() - start, 1),
              scenarios=len({s for d in drives for s in d.scenario.split(",")}))
    table = coverage(train_drives, probe.prompt.num_frames, probe.action.num_history)
    (out / "coverage.md").write_text(markdown(table))
    log.write("coverage", 0, windows=table["windows"],
              **{k: v["windows"] for k, v in table["decision"].items()})
    check_coverage(table, recipe.min_decision_windows)

    cocs = [c for d in train_drives for c in d.coc]
    tokenizer = train_tokenizer(cocs, recipe.bpe_tokens, probe.action.num_traj_tokens)
    cfg = recipe.model_config(tokenizer.vocab_size)
    data = TrainSet.build(cfg, tokenizer, train_drives, device=device)
    cfg.action = dataclasses.replace(cfg.action, **data.stats)
    data.cfg = cfg
    eval_data = TrainSet.build(cfg, tokenizer, eval_drives, stats=data.stats, device=device)
    del drives, train_drives, eval_drives
    log.write("tokenizer", 0, vocab=tokenizer.vocab_size, prompt_tokens=data.prompt_len,
              train_windows=len(data), eval_windows=len(eval_data),
              coc_tokens_mean=float(data.coc_lens.float().mean()))

    remaining = max(minutes_budget * 60 - (time.monotonic() - start) - recipe.reserve_seconds,
                    1.0)
    model = AlpamayoModel(cfg).to(device)
    params = sum(p.numel() for p in model.parameters())
    log.write("model", 0, params=params, vocab=cfg.text.vocab_size)
    summary: dict = {"config": cfg.name, "params": params, "vocab": cfg.text.vocab_size,
                     "train_windows": len(data), "eval_windows": len(eval_data),
                     "train_seeds": [train_list[0], train_list[-1]],
                     "eval_seeds": [eval_list[0], eval_list[-1]], "device": str(device),
                     "drive_seconds": recipe.drive_seconds,
                     "noise": dataclasses.asdict(recipe.noise),
                     "disturbance": dataclasses.asdict(recipe.disturbance),
                     "disturbed_drives": sum(is_disturbed(seed, recipe.disturbed_share)
                                             for seed in train_list),
                     "coverage": table,
                     "decision_focus": {**dataclasses.asdict(recipe.decision),
                                        "drawn_share": decision_shares(
                                            data.decision, recipe.decision.balance, DECISIONS),
                                        "decisive_tokens_mean": float(
                                            data.decisive_lens.float().mean())}}
    summary["target"] = train_target(
        model, data, eval_data, recipe.target_steps, recipe.target_share * remaining,
        recipe.target_batch, recipe.target_lr, seed, log, device, autocast, cache_dtype,
        recipe.flow_weight, recipe.target_eval_rows, focus=recipe.decision)
    summary["streaming_backbone"] = train_backbone_streaming(
        model, data, eval_data, recipe.backbone, recipe.backbone_share * remaining, seed, log,
        device, autocast, cache_dtype, token_weight=recipe.decision.token_weight)

    if cfg.drafter is None:
        raise ValueError(f"preset {recipe.preset!r} has no drafter section")
    gen = torch.Generator().manual_seed(seed)
    train_rows = torch.randperm(len(data), generator=gen)[:recipe.draft_rows]
    eval_rows = torch.randperm(len(eval_data), generator=gen)[:recipe.draft_eval_rows]
    feature_dtype = torch.bfloat16 if cuda else torch.float32
    corpus = build_draft_corpus(model, data, train_rows, cfg.drafter, device, autocast,
                                recipe.target_batch * 2, feature_dtype)
    eval_corpus = build_draft_corpus(model, eval_data, eval_rows, cfg.drafter, device,
                                     autocast, recipe.target_batch * 2, feature_dtype)
    log.write("draft_corpus", 0, rows=len(corpus), eval_rows=len(eval_corpus),
              greedy_len_mean=float((corpus.lengths - corpus.context_len).float().mean()))
    embed = model.vlm.language_model.embed_tokens
    head = model.vlm.lm_head
    drafters = {}
    for rotary in ("flat", "mrope"):
        seed_everything(seed)
        dcfg = dataclasses.replace(cfg.drafter, rotary=rotary)
        drafter = Drafter(dcfg, cfg.text).to(device)
        frozen = [p.requires_grad for p in model.parameters()]
        for p in model.parameters():
            p.requires_grad_(False)
        summary[f"drafter_{rotary}"] = _train_drafter_on(
            drafter, corpus, eval_corpus, embed, head, recipe, seed, log, rotary, autocast,
            recipe.draft_share * remaining)
        for p, flag in zip(model.parameters(), frozen):
            p.requires_grad_(flag)
        drafters[rotary] = drafter
    del corpus, eval_corpus

    summary["streaming"] = streaming_tune(
        model, tokenizer, data, eval_data, recipe.stream_steps, recipe.stream_share * remaining,
        recipe.stream_max_windows, recipe.stream_sequences, recipe.stream_samples,
        recipe.stream_lr, seed, log, device, autocast, recipe.stream_eval_sequences)

    model_dir = out / MODEL_SUBDIR
    cfg.drafter = dataclasses.replace(cfg.drafter, rotary="flat")
    save_model_dir(half_copy(model), cfg, tokenizer, model_dir)
    half_copy(drafters["flat"]).save_safetensors(model_dir / "drafter.safetensors")
    half_copy(drafters["mrope"]).save_safetensors(model_dir / MROPE_DRAFTER_FILE)
    write_manifest(model_dir)
    sizes = {f.name: f.stat().st_size for f in sorted(model_dir.iterdir()) if f.is_file()}
    summary["files_bytes"] = sizes
    summary["model_dir_bytes_with_one_drafter"] = sum(
        v for k, v in sizes.items() if k != MROPE_DRAFTER_FILE)
    summary["seconds"] = round(time.monotonic() - start, 1)
    log.write("done", 0, seconds=summary["seconds"])
    log.close()
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _train_drafter_on(drafter, corpus, eval_corpus, embed, head, recipe: Recipe, seed: int,
                      log: TrainLog, rotary: str, autocast, seconds: float) -> dict:
    merged = concat_corpora(corpus, eval_corpus)
    train_rows = torch.arange(len(corpus))
    eval_rows = torch.arange(len(corpus), len(merged))
    return train_drafter(drafter, merged, train_rows, eval_rows, embed, head, recipe.draft_steps,
                         recipe.draft_batch, recipe.draft_lr, seed, log, f"drafter_{rotary}",
                         autocast, seconds=seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--minutes-budget", type=float, default=9.0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny model, two short drives, a few steps (CPU test)")
    parser.add_argument("--train-drives", type=int, default=None)
    parser.add_argument("--drive-seconds", type=float, default=None)
    parser.add_argument("--disturbed-share", type=float, default=None,
                        help=f"share of training drives driven with disturbances (default "
                             f"{Recipe.disturbed_share})")
    parser.add_argument("--decision-token-weight", type=float, default=None,
                        help=f"CoC loss weight of the tokens that decide the decision "
                             f"(default {DecisionFocus.token_weight}; 1: plain mean)")
    parser.add_argument("--decision-balance", type=float, default=None,
                        help=f"0: windows drawn uniformly, 1: every decision equally often "
                             f"(default {DecisionFocus.balance})")
    args = parser.parse_args(argv)
    recipe = smoke() if args.smoke else Recipe()
    overrides = {name: value for name, value in (
        ("train_drives", args.train_drives), ("drive_seconds", args.drive_seconds),
        ("disturbed_share", args.disturbed_share)) if value is not None}
    focus = {name: value for name, value in (
        ("token_weight", args.decision_token_weight),
        ("balance", args.decision_balance)) if value is not None}
    try:
        recipe = dataclasses.replace(recipe, **overrides,
                                     decision=dataclasses.replace(recipe.decision, **focus))
    except ValueError as exc:
        parser.error(str(exc))
    summary = run(args.out, recipe, args.minutes_budget, torch.device(args.device), args.seed,
                  args.workers)
    print(json.dumps({k: summary[k] for k in ("target", "streaming_backbone", "drafter_flat",
                                              "drafter_mrope", "streaming", "seconds")},
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
