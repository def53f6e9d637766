"""End-to-end training of the embedded default model.

data (parallel simulator drives with sensor noise; coverage table) -> tokenizer (BPE on the
CoC corpus + Alpamayo specials) -> target (CoC + flow matching) -> streaming-aware training
of the whole model -> drafters (flat and mrope, on the target's greedy CoC) -> streaming
fine-tune of the action expert -> model directory.

    python -m flashdrive_ros.train.pipeline --out DIR [--minutes-budget M] [--device cuda]
    python -m flashdrive_ros.train.pipeline --out DIR1 --stages target --target-minutes T
    python -m flashdrive_ros.train.pipeline --resume DIR1 --out DIR2
    python -m flashdrive_ros.train.pipeline --out DIR0 --stages data [recipe options]
    python -m flashdrive_ros.train.pipeline --out DIR --drives-from DIR0 [the same options]

The second form trains only the target, over a schedule of T minutes that may span calls,
stops when its call's time is up and writes DIR1/resume/ (checkpoint.py; the drives are
cached in DIR1/resume/drives/); the third goes on from it (again with --stages target, or to
the end, running the later stages on the final target). The fourth only simulates the
recipe's drives into DIR0/drives/ (no model, no GPU work); the fifth is a run of the same
recipe that reads them from there instead of simulating them (its extra drives are read as
usual), so that a call can spend its time on training.

Writes DIR/model/ (config.json, model.safetensors (fp16), tokenizer.json, drafter.safetensors
(flat rotary, as config.json says) and drafter_mrope.safetensors), DIR/train_log.jsonl and
DIR/summary.json (with the coverage table, also in DIR/coverage.md). Training seeds come
from seeds.TRAIN_SEEDS, evaluation drives from seeds.EVAL_SEEDS.
"""

from __future__ import annotations

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
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.drafter_name import DRAFTER_FILE, MROPE_DRAFTER_FILE
from flashdrive_ros.model.manifest import write_manifest
from flashdrive_ros.model.tokenizer import (
    TextTokenizer,
)
from flashdrive_ros.model.weights import save_model_dir
from flashdrive_ros.sim.labels import DECISIONS
from flashdrive_ros.train.checkpoint import (
    RESUME_SUBDIR,
    load_weights,
    read_checkpoint,
    save_checkpoint,
)
from flashdrive_ros.train.coverage import markdown
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.decision_focus import (
    decision_shares,
    drawn_share,
    hard_brakes,
    start_share,
)
from flashdrive_ros.train.draft_corpus import build_draft_corpus
from flashdrive_ros.train.drafter_data import concat_corpora
from flashdrive_ros.train.drafter_train import train_drafter
from flashdrive_ros.train.drive_cache import load_drives
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.model_dir import half_copy
from flashdrive_ros.train.pipeline_args import STAGES, parse_args
from flashdrive_ros.train.recipe import Recipe, recipe_from_dict
from flashdrive_ros.train.rng_state import restore_rng, rng_state
from flashdrive_ros.train.run_data import (
    assemble_data,
    fresh_data,
    load_simulated,
    save_simulated,
    simulate_drives,
)
from flashdrive_ros.train.scene_readout import scene_class_counts
from flashdrive_ros.train.streaming_backbone import train_backbone_streaming
from flashdrive_ros.train.streaming_tune import streaming_tune
from flashdrive_ros.train.target_train import TargetTrainer
from flashdrive_ros.train.warm_start import warm_start

MODEL_SUBDIR = "model"
DRIVES_SUBDIR = "drives"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run(out: Path, recipe: Recipe, minutes_budget: float, device: torch.device, seed: int,
        workers: int | None, stages: str = "all", resume: Path | None = None,
        target_call_steps: int | None = None, drives_from: Path | None = None) -> dict:
    """`stages` "target": stop after the target stage (or when this call's time is up, or
    after `target_call_steps` steps in this call) and write a checkpoint under out/resume;
    `resume`: the run directory of such a call, whose recipe, seed, drives, tokenizer,
    weights and training state this call goes on with. `stages` "data": simulate the
    recipe's drives into out/drives and stop; `drives_from`: the run directory of such a
    call, whose drives this run reads instead of simulating them."""
    if stages not in STAGES:
        raise ValueError(f"stages must be one of {STAGES}, got {stages!r}")
    if stages == "data":
        return _simulate_only(out, recipe, seed, workers)
    start = time.monotonic()
    deadline = start + minutes_budget * 60
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.jsonl"
    log_path.unlink(missing_ok=True)
    log = TrainLog(log_path)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    def autocast():
        return (torch.autocast("cuda", dtype=torch.bfloat16) if cuda
                else contextlib.nullcontext())

    cache_dtype = torch.bfloat16 if cuda else torch.float32
    paused = None
    if resume is None:
        warm = warm_start(recipe)
        seed_everything(seed)
        cache = (out / RESUME_SUBDIR / DRIVES_SUBDIR
                 if stages == "target" or recipe.target_minutes is not None else None)
        tokenizer = None if warm is None else warm.tokenizer
        if drives_from is None:
            tokenizer, train_drives, eval_drives, summary = fresh_data(
                out, recipe, workers, log, start, cache, tokenizer)
        else:
            simulated = load_simulated(drives_from / DRIVES_SUBDIR, recipe, seed)
            log.write("drives_from", 0, run_dir=str(drives_from),
                      seconds=round(time.monotonic() - start, 1))
            tokenizer, train_drives, eval_drives, summary = assemble_data(
                out, recipe, simulated, log, start, cache, tokenizer)
            summary["drives_from"] = str(drives_from)
        cfg = recipe.model_config(tokenizer.vocab_size)
        if warm is not None:
            summary["init_from"] = warm.summary()
    else:
        paused = read_checkpoint(resume / RESUME_SUBDIR)
        meta, tokenizer, _ = paused
        recipe, seed = recipe_from_dict(meta["recipe"]), int(meta["seed"])
        warm = warm_start(recipe)
        cfg = ModelConfig.from_dict(meta["config"])
        cache = Path(meta["drive_cache"])
        drives = load_drives(cache)
        train_drives, eval_drives = drives[:meta["train_drives"]], drives[meta["train_drives"]:]
        summary = meta["summary"]
        (out / "coverage.md").write_text(markdown(summary["coverage"]))
        log.write("resume", int(meta["target"]["step"]), run_dir=str(resume),
                  resumed_stage=meta["stage"], drives=len(drives),
                  seconds=round(time.monotonic() - start, 1))
        del drives
    data = TrainSet.build(cfg, tokenizer, train_drives, device=device,
                          stats=None if warm is None else warm.action_stats)
    cfg.action = dataclasses.replace(cfg.action, **data.stats)
    data.cfg = cfg
    eval_data = TrainSet.build(cfg, tokenizer, eval_drives, stats=data.stats, device=device)
    del train_drives, eval_drives
    if resume is None:
        log.write("tokenizer", 0, vocab=tokenizer.vocab_size, prompt_tokens=data.prompt_len,
                  train_windows=len(data), eval_windows=len(eval_data),
                  coc_tokens_mean=float(data.coc_lens.float().mean()))
        brakes = hard_brakes(data.v0, data.future, cfg.action.dt)
        summary.update({
            "config": cfg.name, "vocab": cfg.text.vocab_size, "train_windows": len(data),
            "eval_windows": len(eval_data), "device": str(device),
            "decision_focus": {**dataclasses.asdict(recipe.decision),
                               "drawn_share": decision_shares(
                                   data.decision, data.v0, recipe.decision, DECISIONS, brakes,
                                   data.lamp_pair),
                               "start_from_rest_share": start_share(
                                   data.decision, data.v0, recipe.decision, brakes,
                                   data.lamp_pair),
                               "hard_brake_windows_share": round(float(brakes.mean()), 4),
                               "hard_brake_share": drawn_share(
                                   brakes, data.decision, data.v0, recipe.decision, brakes,
                                   data.lamp_pair),
                               "lamp_pair_share": drawn_share(
                                   data.lamp_pair, data.decision, data.v0, recipe.decision,
                                   brakes, data.lamp_pair),
                               "contrast_windows": int(data.contrast.sum()),
                               "contrast_share": drawn_share(
                                   data.contrast, data.decision, data.v0, recipe.decision,
                                   brakes, data.lamp_pair),
                               "decisive_tokens_mean": float(
                                   data.decisive_lens.float().mean()),
                               "side_word_windows_share": round(float(
                                   data.side_cols.any(dim=1).float().mean()), 4)},
            "scene_classes": scene_class_counts(data.scene)})

    remaining = max(minutes_budget * 60 - (time.monotonic() - start) - recipe.reserve_seconds,
                    1.0)
    model = AlpamayoModel(cfg).to(device)
    params = sum(p.numel() for p in model.parameters())
    log.write("model", 0, params=params, vocab=cfg.text.vocab_size)
    if warm is not None and paused is None:
        warm.load_model(model)
        log.write("init_from", 0, path=str(warm.path))
    summary["params"] = params
    target_seconds = (recipe.target_minutes * 60 if recipe.target_minutes is not None
                      else recipe.target_share * remaining)
    trainer = TargetTrainer(model, data, recipe.target_steps, target_seconds,
                            recipe.target_batch, recipe.target_lr, seed, log, device, autocast,
                            cache_dtype, recipe.flow_weight, focus=recipe.decision,
                            flow_draws=recipe.flow_draws,
                            history_dropout=recipe.history_dropout,
                            scene_weight=recipe.scene_weight,
                            readout_blind=recipe.readout_blind,
                            expert_blind=recipe.expert_blind)
    stage = "target"
    if paused is not None:
        meta, _, tensors = paused
        load_weights(model, resume / RESUME_SUBDIR)
        trainer.load_state(tensors, meta["target"])
        restore_rng(tensors, meta["rng"], device)
        stage = meta["stage"]
    summary.setdefault("calls", []).append({"stages": stages, "resumed_from": (
        str(resume) if resume else None), "target_step_at_start": trainer.progress.step})
    if stage == "target":
        stop_at = (deadline - recipe.reserve_seconds if stages == "target" else
                   None if recipe.target_minutes is None else
                   deadline - recipe.reserve_seconds - recipe.later_minutes * 60)
        if trainer.run(stop_at, target_call_steps):
            summary["target"] = trainer.finish(eval_data, recipe.target_eval_rows, seed)
            stage = "later"
    summary["calls"][-1]["target_step_at_end"] = trainer.progress.step
    if stages == "target" or stage == "target":
        summary["calls"][-1]["seconds"] = round(time.monotonic() - start, 1)
        _pause(out, model, tokenizer, trainer, recipe, cfg, seed, stage, cache, summary, device)
        summary["paused_in"] = stage
        return _close(out, log, summary, start)

    later = max(deadline - time.monotonic() - recipe.reserve_seconds, 1.0)
    scale = later / (1.0 - recipe.target_share)
    summary["streaming_backbone"] = train_backbone_streaming(
        model, data, eval_data, recipe.backbone, recipe.backbone_share * scale, seed, log,
        device, autocast, cache_dtype, focus=recipe.decision)

    if cfg.drafter is None:
        raise ValueError(f"preset {recipe.preset!r} has no drafter section")
    gen = torch.Generator().manual_seed(seed)
    own = data.own_rows()
    train_rows = own[torch.randperm(len(own), generator=gen)[:recipe.draft_rows]]
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
        if warm is not None:
            dcfg = warm.drafter_config(dcfg)
        drafter = Drafter(dcfg, cfg.text).to(device)
        if warm is not None:
            summary["init_from"][f"drafter_{rotary}"] = warm.load_drafter(drafter)
        frozen = [p.requires_grad for p in model.parameters()]
        for p in model.parameters():
            p.requires_grad_(False)
        summary[f"drafter_{rotary}"] = _train_drafter_on(
            drafter, corpus, eval_corpus, embed, head, recipe, seed, log, rotary, autocast,
            recipe.draft_share * scale)
        for p, flag in zip(model.parameters(), frozen):
            p.requires_grad_(flag)
        drafters[rotary] = drafter
    del corpus, eval_corpus

    summary["streaming"] = streaming_tune(
        model, tokenizer, data, eval_data, recipe.stream_steps, recipe.stream_share * scale,
        recipe.stream_max_windows, recipe.stream_sequences, recipe.stream_samples,
        recipe.stream_lr, seed, log, device, autocast, recipe.stream_eval_sequences)

    model_dir = out / MODEL_SUBDIR
    cfg.drafter = dataclasses.replace(cfg.drafter, rotary="flat")
    save_model_dir(half_copy(model), cfg, tokenizer, model_dir)
    half_copy(drafters["flat"]).save_safetensors(model_dir / DRAFTER_FILE)
    half_copy(drafters["mrope"]).save_safetensors(model_dir / MROPE_DRAFTER_FILE)
    write_manifest(model_dir)
    sizes = {f.name: f.stat().st_size for f in sorted(model_dir.iterdir()) if f.is_file()}
    summary["files_bytes"] = sizes
    summary["model_dir_bytes_with_one_drafter"] = sum(
        v for k, v in sizes.items() if k != MROPE_DRAFTER_FILE)
    return _close(out, log, summary, start)


def _pause(out: Path, model: AlpamayoModel, tokenizer: TextTokenizer, trainer: TargetTrainer,
           recipe: Recipe, cfg: ModelConfig, seed: int, stage: str, cache: Path,
           summary: dict, device: torch.device) -> None:
    """Checkpoint under out/resume: `stage` "target" goes on training the target, "later"
    runs the stages after it."""
    tensors, target = trainer.state()
    rng_tensors, rng = rng_state(device)
    meta = {"stage": stage, "seed": seed, "recipe": dataclasses.asdict(recipe),
            "config": cfg.to_dict(), "drive_cache": str(cache.resolve()),
            "train_drives": summary.get("train_drive_count", recipe.train_drives),
            "target": target, "rng": rng,
            "summary": summary}
    save_checkpoint(out / RESUME_SUBDIR, model, tokenizer, {**tensors, **rng_tensors}, meta)


def _simulate_only(out: Path, recipe: Recipe, seed: int, workers: int | None) -> dict:
    start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    log = TrainLog(out / "train_log.jsonl")
    seed_everything(seed)
    simulated = simulate_drives(recipe, workers, log, start)
    save_simulated(out / DRIVES_SUBDIR, simulated, recipe, seed)
    drives = simulated.train + simulated.eval
    summary = {"calls": [{"stages": "data"}], **simulated.counts,
               "train_drive_count": len(simulated.train), "eval_drive_count": len(simulated.eval),
               "frames": sum(d.num_steps for d in drives)}
    return _close(out, log, summary, start)


def _close(out: Path, log: TrainLog, summary: dict, start: float) -> dict:
    seconds = round(time.monotonic() - start, 1)
    summary["calls"][-1]["seconds"] = seconds
    summary["seconds"] = round(sum(call["seconds"] for call in summary["calls"]), 1)
    log.write("done", 0, seconds=seconds)
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
    args, recipe = parse_args(argv)
    try:
        summary = run(args.out, recipe, args.minutes_budget, torch.device(args.device),
                      args.seed, args.workers, args.stages, args.resume,
                      args.target_call_steps, args.drives_from)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: summary[k] for k in ("target", "streaming_backbone", "drafter_flat",
                                              "drafter_mrope", "streaming", "calls",
                                              "seconds") if k in summary}, indent=2))
    if summary.get("paused_in") == "target" and args.stages == "all":
        print(f"error: the target schedule did not end in this call; go on with --resume "
              f"{args.out}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
