"""Drafter study on a trained target (frozen): rotary variants with a whole-prompt context,
an EAGLE-3-style drafter, action-aware RL post-training, measured inside the engine.

    python -m flashdrive_ros.train.drafter_study --model-dir models/default --out DIR
        [--minutes-budget M] [--device cuda] [--smoke]

Steps: simulated drives (training seeds for the corpus, evaluation seeds held out) -> the
target's greedy CoC corpus with the features of the whole prompt -> SFT of DFlash flat,
DFlash mrope (same data, loss, seed and hyper-parameters) and EAGLE-3 -> RL of the best SFT
drafter (held-out offline acceptance at the smallest block) with the static anchor set and
with the policy anchor set -> first-layer attention budget of the DFlash drafters -> every
drafter (and the model directory's own drafter) in the engine on held-out windows at each
block size with a full prefill, and the SFT drafters streaming at the smallest block.

Writes DIR/drafter_{flat,mrope,eagle,rl_static,rl_policy}.safetensors (fp16, each with its
DrafterConfig; the measured weights are these fp16 values), DIR/study.json, DIR/study.md and
DIR/train_log.jsonl.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch

from flashdrive_ros.engine.flow_cached import FlowSchedule
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import DrafterConfig, ModelConfig
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.drafter_file import AnyDrafter, build_drafter, load_drafter
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.model.weights import TOKENIZER_FILE
from flashdrive_ros.sim.seeds import eval_seeds, train_seeds
from flashdrive_ros.train.attention_budget import attention_budget
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.draft_corpus import build_draft_corpus
from flashdrive_ros.train.drafter_data import concat_corpora
from flashdrive_ros.train.drafter_rl import RLConfig, RLTarget, rl_post_train
from flashdrive_ros.train.drafter_train import evaluate_drafter, train_drafter
from flashdrive_ros.train.engine_acceptance import (
    Setting,
    heldout_windows,
    measure_setting,
    same_cocs,
)
from flashdrive_ros.train.generate import generate_drives
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.pipeline import seed_everything
from flashdrive_ros.train.run_options import add_run_options
from flashdrive_ros.train.study_config import StudyConfig, smoke
from flashdrive_ros.train.study_report import markdown

T = TypeVar("T")
SHIPPED = "shipped"
SFT_NAMES = ("flat", "mrope", "eagle")
ACTION_STATS = ("accel_mean", "accel_std", "curvature_mean", "curvature_std")


def study_drafter_configs(base: DrafterConfig, context_len: int) -> dict[str, DrafterConfig]:
    """DFlash flat / mrope and EAGLE-3 (flat rotary, one layer) over the base drafter's size
    and target layers, all with `context_len`."""
    dflash = dataclasses.replace(base, kind="dflash", context_len=context_len)
    return {"flat": dataclasses.replace(dflash, rotary="flat"),
            "mrope": dataclasses.replace(dflash, rotary="mrope"),
            "eagle": dataclasses.replace(dflash, kind="eagle3", rotary="flat",
                                         num_hidden_layers=1)}


def round_to_half(drafter: AnyDrafter) -> AnyDrafter:
    """Parameters rounded to fp16 values (kept in their dtype): what the saved file holds."""
    with torch.no_grad():
        for p in drafter.parameters():
            p.copy_(p.half().to(p.dtype))
    return drafter.eval()


def save_half(drafter: AnyDrafter, path: Path) -> None:
    copy = build_drafter(drafter.cfg, drafter.text_cfg)
    copy.load_state_dict(drafter.state_dict())
    copy.half().save_safetensors(path)


def describe(drafter: AnyDrafter) -> dict:
    cfg = drafter.cfg
    return {"kind": cfg.kind, "rotary": cfg.rotary, "context_len": cfg.context_len,
            "layers": cfg.num_hidden_layers, "block_size": cfg.block_size,
            "params": sum(p.numel() for p in drafter.parameters())}


class Study:
    """State shared by the stages of one run."""

    def __init__(self, model_dir: Path, out: Path, cfg: StudyConfig, minutes_budget: float,
                 device: torch.device, seed: int) -> None:
        self.start = time.monotonic()
        self.model_dir = model_dir
        self.out = out
        self.cfg = cfg
        self.total_seconds = minutes_budget * 60.0
        self.device = device
        self.seed = seed
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_log.jsonl").unlink(missing_ok=True)
        self.log = TrainLog(out / "train_log.jsonl")
        cuda = device.type == "cuda"
        if cuda:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        self.cuda = cuda
        self.cache_dtype = torch.bfloat16 if cuda else torch.float32
        self.model = AlpamayoModel.from_dir(model_dir, device, torch.float32)
        self.model.requires_grad_(False)
        self.tokenizer = TextTokenizer.from_file(model_dir / TOKENIZER_FILE)
        self.embed = self.model.vlm.language_model.embed_tokens
        self.head = self.model.vlm.lm_head
        self.drafters: dict[str, AnyDrafter] = {}
        self.result: dict = {"model_dir": str(model_dir), "device": str(device), "seed": seed,
                             "config": dataclasses.asdict(cfg), "drafters": {}, "rl": {},
                             "attention_budget": {}, "engine": [], "errors": []}

    def autocast(self):
        return (torch.autocast("cuda", dtype=torch.bfloat16) if self.cuda
                else contextlib.nullcontext())

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    @property
    def mcfg(self) -> ModelConfig:
        return self.model.cfg

    def simulate_drives(self) -> None:
        cfg = self.cfg
        train_list = train_seeds(cfg.train_drives)
        rl_list = train_seeds(cfg.rl_drives, offset=cfg.train_drives)
        eval_list = eval_seeds(cfg.eval_drives)
        drives = generate_drives(train_list + rl_list + eval_list, cfg.drive_seconds,
                                 self.mcfg, cfg.workers)
        stats = {k: getattr(self.mcfg.action, k) for k in ACTION_STATS}
        split = (len(train_list), len(train_list) + len(rl_list))
        self.train_data, self.rl_data, self.eval_data = (
            TrainSet.build(self.mcfg, self.tokenizer, part, stats=stats, device=self.device)
            for part in (drives[:split[0]], drives[split[0]:split[1]], drives[split[1]:]))
        self.result.update(train_seeds=[train_list[0], train_list[-1]], rl_seeds=rl_list,
                           eval_seeds=eval_list, train_windows=len(self.train_data),
                           rl_windows=len(self.rl_data), eval_windows=len(self.eval_data))
        self.log.write("data", 0, drives=len(drives), train_windows=len(self.train_data),
                       rl_windows=len(self.rl_data), eval_windows=len(self.eval_data),
                       seconds=round(self.elapsed, 1))

    def build_corpus(self) -> None:
        cfg = self.cfg
        context = self.train_data.prompt_len + self.mcfg.prompt.max_coc_tokens
        self.configs = study_drafter_configs(self.mcfg.drafter, context)
        gen = torch.Generator().manual_seed(self.seed)
        rows = torch.randperm(len(self.train_data), generator=gen)[:cfg.corpus_rows]
        eval_rows = torch.randperm(len(self.eval_data), generator=gen)[:cfg.eval_rows]
        rl_rows = torch.randperm(len(self.rl_data), generator=gen)[:cfg.rl_rows]
        dtype = torch.bfloat16 if self.cuda else torch.float32
        flat = self.configs["flat"]
        self.train_corpus = build_draft_corpus(self.model, self.train_data, rows, flat,
                                               self.device, self.autocast, cfg.corpus_batch,
                                               dtype, cfg.corpus_max_coc_tokens)
        eval_corpus = build_draft_corpus(self.model, self.eval_data, eval_rows, flat,
                                         self.device, self.autocast, cfg.corpus_batch, dtype,
                                         cfg.corpus_max_coc_tokens)
        self.rl_corpus = build_draft_corpus(self.model, self.rl_data, rl_rows, flat,
                                            self.device, self.autocast, cfg.corpus_batch,
                                            dtype, cfg.corpus_max_coc_tokens)
        self.merged = concat_corpora(self.train_corpus, eval_corpus)
        self.train_rows = torch.arange(len(self.train_corpus))
        self.eval_rows = torch.arange(len(self.train_corpus), len(self.merged))
        lengths = self.train_corpus.lengths - self.train_corpus.context_len
        self.result.update(corpus_rows=len(self.train_corpus), corpus_eval_rows=len(eval_corpus),
                           corpus_rl_rows=len(self.rl_corpus),
                           context_len=context, prompt_len=self.train_data.prompt_len,
                           greedy_coc_len_mean=float(lengths.float().mean()))
        self.log.write("corpus", 0, rows=len(self.train_corpus), eval_rows=len(eval_corpus),
                       context=context, seconds=round(self.elapsed, 1))
        training = (self.total_seconds - self.elapsed - cfg.eval_seconds
                    - cfg.reserve_seconds)
        self.training_seconds = max(training, 5.0)

    def offline_acceptance(self, drafter: AnyDrafter) -> dict[str, float]:
        return {str(k): evaluate_drafter(drafter, self.merged, self.eval_rows, self.embed,
                                         self.head, self.seed + 1, self.autocast,
                                         k)["accept_len"] for k in self.cfg.block_sizes}

    def keep_drafter(self, name: str, drafter: AnyDrafter, training: dict) -> None:
        """Rounds the drafter to fp16 values, saves it and records its held-out offline
        acceptance per block size (of the rounded weights)."""
        round_to_half(drafter)
        save_half(drafter, self.out / f"drafter_{name}.safetensors")
        self.drafters[name] = drafter
        self.result["drafters"][name] = {**describe(drafter), "training": training,
                                         "offline": self.offline_acceptance(drafter),
                                         "file": f"drafter_{name}.safetensors"}

    def train_sft(self, name: str) -> None:
        cfg = self.cfg
        seed_everything(self.seed)
        drafter = build_drafter(self.configs[name], self.mcfg.text).to(self.device)
        training = train_drafter(drafter, self.merged, self.train_rows, self.eval_rows,
                                 self.embed, self.head, cfg.sft_steps, cfg.sft_batch, cfg.sft_lr,
                                 self.seed, self.log, f"sft_{name}", self.autocast,
                                 seconds=cfg.sft_share * self.training_seconds,
                                 log_every=cfg.log_every, block_sizes=cfg.block_sizes)
        self.keep_drafter(name, drafter, training)

    def train_rl(self, anchor: str) -> None:
        cfg = self.cfg
        smallest = str(cfg.block_sizes[0])
        sft = {n: self.result["drafters"][n]["offline"][smallest] for n in SFT_NAMES
               if n in self.drafters}
        base = max(sft, key=sft.get)
        self.result["rl_base"] = base
        seed_everything(self.seed)
        target = RLTarget(self.model, self.rl_data, FlowSchedule(), self.cache_dtype,
                          self.tokenizer.token_id("cot_end"),
                          self.tokenizer.token_id("traj_future_start"))
        rl_cfg = RLConfig(anchor=anchor, lr=cfg.rl_lr, prompts=cfg.rl_prompts,
                          candidates=cfg.rl_candidates, steps=cfg.rl_steps,
                          block_sizes=cfg.block_sizes)
        policy, stats = rl_post_train(self.drafters[base], self.rl_corpus,
                                      torch.arange(len(self.rl_corpus)),
                                      target, self.embed, self.head, rl_cfg, self.seed,
                                      self.log, f"rl_{anchor}", self.autocast,
                                      seconds=cfg.rl_share * self.training_seconds,
                                      log_every=cfg.log_every)
        self.result["rl"][f"rl_{anchor}"] = {"base": base, **dataclasses.asdict(rl_cfg),
                                             **stats}
        self.keep_drafter(f"rl_{anchor}", policy, stats)

    def load_shipped(self) -> None:
        path = self.model_dir / "drafter.safetensors"
        drafter = load_drafter(path, self.mcfg.text, self.mcfg.drafter).to(self.device).eval()
        self.drafters[SHIPPED] = drafter
        self.result["drafters"][SHIPPED] = {**describe(drafter), "file": str(path),
                                            "offline": self.offline_acceptance(drafter)}

    def measure_attention_budgets(self) -> None:
        layout = self.train_data.builder.layout
        for name, drafter in self.drafters.items():
            if not isinstance(drafter, Drafter):
                continue
            self.result["attention_budget"][name] = attention_budget(
                drafter, self.merged, self.eval_rows[:self.cfg.budget_rows], self.embed,
                self.train_data.prompt_len, self.train_data.image_token_id, layout.history,
                self.seed + 2, self.autocast, self.cfg.block_sizes[0])

    def engine_settings(self) -> list[Setting]:
        smallest = self.cfg.block_sizes[0]
        full = [Setting(f"{name}@{k}", name, k, False) for name in self.drafters
                for k in self.cfg.block_sizes]
        streaming = [Setting(f"{name}@{smallest} streaming", name, smallest, True)
                     for name in SFT_NAMES if name in self.drafters]
        return full + streaming

    def measure_in_engine(self) -> None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        drives = heldout_windows(self.eval_data, self.cfg.eval_windows_per_drive)
        settings = self.engine_settings()
        results = []
        left = self.total_seconds - self.elapsed - self.cfg.reserve_seconds
        end = self.elapsed + min(self.cfg.eval_seconds, left)
        for index, setting in enumerate(settings):
            seconds = max((end - self.elapsed) / (len(settings) - index), 0.5)
            result = self.run_stage(f"engine {setting.name}", lambda setting=setting: (
                measure_setting(self.model, self.tokenizer, self.drafters[setting.drafter],
                                setting, drives, self.device, seconds,
                                self.cfg.warmup_windows, self.cfg.eval_max_coc_tokens)))
            if result is None:
                continue
            results.append(result)
            self.log.write("engine", index, setting=setting.name, windows=result["windows"],
                           accepted_length=result["accepted_length"],
                           cost_ratio=result["cost_ratio"], speedup=result["speedup"])
            self.result["engine"] = [{k: v for k, v in r.items() if k != "cocs"}
                                     for r in results]
            self.result["same_cocs"] = {
                mode: same_cocs([r for r in results if r["streaming"] == streaming])
                for mode, streaming in (("full prefill", False), ("streaming", True))
                if any(r["streaming"] == streaming for r in results)}

    def run_stage(self, name: str, stage: Callable[[], T]) -> T | None:
        """Runs `stage` and returns its value; a failure is recorded (and printed), None is
        returned and the next stages still run. study.json and study.md are rewritten after
        every stage."""
        value = None
        try:
            value = stage()
        except Exception:
            self.result["errors"].append({"stage": name, "traceback": traceback.format_exc()})
            self.log.write("error", 0, stage=name)
            print(traceback.format_exc(), file=sys.stderr, flush=True)
        self.write_results()
        return value

    def write_results(self) -> None:
        self.result["seconds"] = round(self.elapsed, 1)
        (self.out / "study.json").write_text(json.dumps(self.result, indent=2) + "\n")
        (self.out / "study.md").write_text(markdown(self.result))


def run(model_dir: Path, out: Path, cfg: StudyConfig, minutes_budget: float,
        device: torch.device, seed: int) -> dict:
    seed_everything(seed)
    study = Study(model_dir, out, cfg, minutes_budget, device, seed)
    study.simulate_drives()
    study.build_corpus()
    for name in SFT_NAMES:
        study.run_stage(f"sft_{name}", lambda name=name: study.train_sft(name))
    for anchor in ("static", "policy"):
        study.run_stage(f"rl_{anchor}", lambda anchor=anchor: study.train_rl(anchor))
    study.run_stage("shipped", study.load_shipped)
    study.run_stage("attention_budget", study.measure_attention_budgets)
    study.measure_in_engine()
    study.write_results()
    study.log.write("done", 0, seconds=study.result["seconds"])
    study.log.close()
    return study.result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", type=Path, default=Path("models/default"))
    add_run_options(parser, minutes_budget=7.0)
    parser.add_argument("--smoke", action="store_true",
                        help="two short drives, a few steps of every stage (CPU test)")
    args = parser.parse_args(argv)
    cfg = smoke() if args.smoke else StudyConfig()
    if args.workers is not None:
        cfg.workers = args.workers
    result = run(args.model_dir, args.out, cfg, args.minutes_budget, torch.device(args.device),
                 args.seed)
    print((args.out / "study.md").read_text(), flush=True)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
