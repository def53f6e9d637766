"""The data of a new training run: simulator drives (noisy, some disturbed), kept on disk for a
later run of the same recipe when asked, and the recipe's extra drives, their coverage table
(DIR/coverage.md, checked against the recipe's minimum per decision) and the BPE tokenizer
trained on their CoC sentences and the fixed prompt texts."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.prompt import CAMERA_DISPLAY_NAMES, INSTRUCTION_TEXT, SYSTEM_TEXT
from flashdrive_ros.model.tokenizer import (
    ALPAMAYO_SPECIAL_NAMES,
    QWEN_SPECIALS,
    TextTokenizer,
    build_tokenizer,
)
from flashdrive_ros.sim.seeds import eval_seeds, is_eval_seed, train_seeds
from flashdrive_ros.train.coverage import check_coverage, coverage, markdown
from flashdrive_ros.train.drive import Drive
from flashdrive_ros.train.drive_cache import load_drives, save_drives
from flashdrive_ros.train.generate import (
    drive_jobs,
    drive_plan,
    is_disturbed,
    lamp_pair_plan,
    lane_fork_plan,
    lead_stop_plan,
    light_branch_plan,
)
from flashdrive_ros.train.job_graph import run_plans
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.recipe import Recipe


def tokenizer_corpus(cocs: list[str]) -> list[str]:
    """CoC sentences plus the fixed prompt texts, so both compress to few tokens."""
    prompt_texts = [SYSTEM_TEXT, INSTRUCTION_TEXT, "system\n", "user\n", "assistant\n"]
    prompt_texts += [f"{name}: frame 0 " for name in CAMERA_DISPLAY_NAMES.values()]
    prompt_texts += [f"frame {i} " for i in range(8)]
    return cocs + prompt_texts * max(1, len(cocs) // 50)


def train_tokenizer(cocs: list[str], bpe_tokens: int, num_traj_tokens: int) -> TextTokenizer:
    added = len(QWEN_SPECIALS) + num_traj_tokens + len(ALPAMAYO_SPECIAL_NAMES) - 1
    return build_tokenizer(tokenizer_corpus(cocs), added + 256 + bpe_tokens, num_traj_tokens)


def load_extra_drives(folder: Path, cfg: ModelConfig,
                      run_seeds: frozenset[int] = frozenset()) -> list[Drive]:
    """The drives of a drive cache, checked against the model's inputs, the held-out seeds and
    `run_seeds` (the seeds the run simulates itself, which a cache must not repeat)."""
    drives = load_drives(folder)
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    for drive in drives:
        if tuple(drive.frames.shape[2:4]) != size or drive.frames.shape[1] != len(
                cfg.prompt.camera_names):
            raise ValueError(f"{folder}: drive of seed {drive.seed} has frames "
                             f"{tuple(drive.frames.shape[1:4])}, the model takes "
                             f"{len(cfg.prompt.camera_names)} cameras at {size}")
        if is_eval_seed(drive.seed):
            raise ValueError(f"{folder}: seed {drive.seed} is a held-out seed")
        if drive.seed in run_seeds:
            raise ValueError(f"{folder}: seed {drive.seed} is also one of the run's own "
                             "training seeds; move --train-seed-offset past the cache's seeds")
    return drives


def lead_stop_seeds(recipe: Recipe) -> list[int]:
    """The training seeds whose drives the run's lead stops fork."""
    count = recipe.lead_stops.seeds or recipe.train_drives
    return train_seeds(count, recipe.train_seed_offset)


SIMULATED_FIELDS = ("preset", "train_drives", "train_seed_offset", "eval_drives", "drive_seconds",
                    "noise", "disturbed_share", "disturbance", "plan_futures", "light_branches",
                    "lead_stops", "lane_forks", "lamp_pairs", "standing_lead_label")
SIMULATED_JSON = "simulated.json"
FORK_COUNTS = {"light_branches": "light_branch_drives", "lead_stops": "lead_stop_drives",
               "lane_forks": "lane_fork_drives", "lamp_pairs": "lamp_pair_drives"}


@dataclasses.dataclass
class SimulatedDrives:
    """The drives a recipe simulates: training drives (plain, disturbed and the forks, in
    order), held-out evaluation drives, and how many of each kind."""

    train: list[Drive]
    eval: list[Drive]
    counts: dict


def simulated_recipe(recipe: Recipe) -> dict:
    """The recipe's fields that decide its simulated drives (JSON form)."""
    return json.loads(json.dumps({name: (dataclasses.asdict(value)
                                         if dataclasses.is_dataclass(value) else value)
                                  for name in SIMULATED_FIELDS
                                  for value in (getattr(recipe, name),)}))


def simulate_drives(recipe: Recipe, workers: int | None, log: TrainLog,
                    start: float) -> SimulatedDrives:
    """The recipe's simulator drives, made on `workers` processes."""
    probe = recipe.model_config(4096)
    train_list = train_seeds(recipe.train_drives, recipe.train_seed_offset)
    eval_list = eval_seeds(recipe.eval_drives)
    standing = recipe.standing_lead_label
    train_jobs = drive_jobs(train_list, recipe.drive_seconds, probe, recipe.noise,
                            recipe.disturbance, recipe.disturbed_share,
                            plan_futures=recipe.plan_futures, standing_lead=standing)
    seconds, noise = recipe.drive_seconds, recipe.noise
    plans = [drive_plan(train_jobs + drive_jobs(eval_list, seconds, probe,
                                                standing_lead=standing))]
    if recipe.light_branches.enabled:
        plans.append(light_branch_plan(train_list, seconds, probe, recipe.light_branches, noise,
                                       standing))
    if recipe.lead_stops.enabled:
        plans.append(lead_stop_plan(lead_stop_seeds(recipe), seconds, probe,
                                    recipe.lead_stops, noise, standing))
    if recipe.lane_forks.enabled:
        plans.append(lane_fork_plan(train_list, probe, recipe.lane_forks, noise, standing))
    if recipe.lamp_pairs.enabled:
        plans.append(lamp_pair_plan(train_list, seconds, probe, recipe.lamp_pairs, noise,
                                    standing))
    results, times = run_plans(plans, workers, report=lambda line: print(line, flush=True))
    made = dict(zip((plan.name for plan in plans), results))
    for name, done in times.items():
        log.write("data_plan", 0, plan=name, found_s=round(done.found_s, 1),
                  made_s=round(done.made_s, 1), results=len(made[name]))
    own, eval_drives = made["drives"][:len(train_jobs)], made["drives"][len(train_jobs):]
    forks = {count: made.get(name, []) for name, count in FORK_COUNTS.items()}
    counts = {"disturbed_drives": sum(is_disturbed(seed, recipe.disturbed_share)
                                      for seed in train_list),
              **{count: len(drives) for count, drives in forks.items()}}
    train = own + [d for drives in forks.values() for d in drives]
    log.write("simulated", 0, drives=len(train) + len(eval_drives),
              seconds=round(time.monotonic() - start, 1))
    return SimulatedDrives(train, eval_drives, counts)


def save_simulated(folder: Path, simulated: SimulatedDrives, recipe: Recipe, seed: int) -> None:
    """`simulated` under `folder` (a drive cache) with the recipe fields and seed that made
    them, so that a later run of the same data reads them back instead of simulating."""
    save_drives(simulated.train + simulated.eval, folder)
    (folder / SIMULATED_JSON).write_text(json.dumps(
        {"recipe": simulated_recipe(recipe), "seed": seed, "train": len(simulated.train),
         "counts": simulated.counts}, indent=2) + "\n")


def load_simulated(folder: Path, recipe: Recipe, seed: int) -> SimulatedDrives:
    """The drives that `save_simulated` wrote under `folder`, refused unless the recipe fields
    and seed that made them are `recipe`'s and `seed`."""
    meta_path = folder / SIMULATED_JSON
    if not meta_path.is_file():
        raise FileNotFoundError(f"no simulated drives at {folder} ({SIMULATED_JSON} missing; "
                                f"write them with --stages data)")
    meta = json.loads(meta_path.read_text())
    wanted = simulated_recipe(recipe)
    differ = sorted(name for name in SIMULATED_FIELDS
                    if meta["recipe"].get(name) != wanted[name])
    if differ or meta["seed"] != seed:
        raise ValueError(f"{folder} holds the drives of another recipe: it differs in "
                         f"{differ + ([] if meta['seed'] == seed else ['seed'])}")
    drives = load_drives(folder)
    if len(drives) != meta["train"] + recipe.eval_drives:
        raise ValueError(f"{folder} holds {len(drives)} drives, its {SIMULATED_JSON} "
                         f"{meta['train']} training and {recipe.eval_drives} held-out ones")
    return SimulatedDrives(drives[:meta["train"]], drives[meta["train"]:], meta["counts"])


def assemble_data(out: Path, recipe: Recipe, simulated: SimulatedDrives, log: TrainLog,
                  start: float, cache: Path | None, tokenizer: TextTokenizer | None = None):
    """A new run's data from its simulated drives and the recipe's extra drives -> (tokenizer,
    train drives, eval drives, summary); the drives are also written to `cache` when given.
    `tokenizer`: the run's tokenizer (a warm start's) instead of one trained on these
    drives."""
    probe = recipe.model_config(4096)
    train_list = train_seeds(recipe.train_drives, recipe.train_seed_offset)
    eval_list = eval_seeds(recipe.eval_drives)
    stop_list = lead_stop_seeds(recipe) if recipe.lead_stops.enabled else []
    extra = [] if recipe.extra_drives is None else load_extra_drives(
        Path(recipe.extra_drives), probe, frozenset(train_list + stop_list))
    train_drives, eval_drives = simulated.train + extra, simulated.eval
    drives = train_drives + eval_drives
    frames = sum(d.num_steps for d in drives)
    log.write("data", 0, drives=len(drives), frames=frames,
              seconds=round(time.monotonic() - start, 1),
              scenarios=len({s for d in drives for s in d.scenario.split(",")}))
    if cache is not None:
        written = time.monotonic()
        save_drives(drives, cache)
        log.write("drive_cache", 0, folder=str(cache),
                  bytes=sum(f.stat().st_size for f in cache.iterdir()),
                  seconds=round(time.monotonic() - written, 1))
    table = coverage(train_drives, probe.prompt.num_frames, probe.action.num_history)
    (out / "coverage.md").write_text(markdown(table))
    log.write("coverage", 0, windows=table["windows"],
              **{k: v["windows"] for k, v in table["decision"].items()})
    check_coverage(table, recipe.min_decision_windows)

    if tokenizer is None:
        cocs = [c for d in train_drives for c in d.coc]
        tokenizer = train_tokenizer(cocs, recipe.bpe_tokens, probe.action.num_traj_tokens)
    summary: dict = {"train_seeds": [train_list[0], train_list[-1]],
                     "eval_seeds": [eval_list[0], eval_list[-1]],
                     "drive_seconds": recipe.drive_seconds,
                     "noise": dataclasses.asdict(recipe.noise),
                     "disturbance": dataclasses.asdict(recipe.disturbance),
                     "light_branches": dataclasses.asdict(recipe.light_branches),
                     "lead_stops": dataclasses.asdict(recipe.lead_stops),
                     "lane_forks": dataclasses.asdict(recipe.lane_forks),
                     "lamp_pairs": dataclasses.asdict(recipe.lamp_pairs),
                     **simulated.counts,
                     "standing_lead_label": recipe.standing_lead_label,
                     "extra_drives": len(extra), "train_drive_count": len(train_drives),
                     "coverage": table}
    return tokenizer, train_drives, eval_drives, summary


def fresh_data(out: Path, recipe: Recipe, workers: int | None, log: TrainLog, start: float,
               cache: Path | None, tokenizer: TextTokenizer | None = None):
    """`assemble_data` of the recipe's drives simulated now."""
    return assemble_data(out, recipe, simulate_drives(recipe, workers, log, start), log, start,
                         cache, tokenizer)
