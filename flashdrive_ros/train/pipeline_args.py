"""The training pipeline's command line: its options and the recipe they give
(train/pipeline.py runs it)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from flashdrive_ros.sim.disturbance import Disturbance
from flashdrive_ros.sim.lamp_pairs import LampPairs
from flashdrive_ros.sim.lane_forks import LaneForks
from flashdrive_ros.sim.lead_stops import LeadStops
from flashdrive_ros.sim.light_branches import STAND_BACK_RELEASES, LightBranches
from flashdrive_ros.train.decision_focus import BRAKE_DROP_MPS, BRAKE_HORIZON_S, DecisionFocus
from flashdrive_ros.train.recipe import Recipe, smoke
from flashdrive_ros.train.run_options import add_on_off, add_run_options, on_off

STAGES = ("all", "target", "data")


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, Recipe]:
    """The command line -> (its options, the recipe they give)."""
    parser = argparse.ArgumentParser(
        description="End-to-end training of the embedded default model.")
    add_run_options(parser, minutes_budget=9.0)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny model, two short drives, a few steps (CPU test)")
    parser.add_argument("--train-drives", type=int, default=None)
    parser.add_argument("--train-seed-offset", type=int, default=None,
                        help="training drives are the training seeds from this index on "
                             "(default 0; give each call of a warm-start chain its own)")
    parser.add_argument("--drive-seconds", type=float, default=None)
    parser.add_argument("--target-batch", type=int, default=None,
                        help=f"windows per target step (default {Recipe.target_batch})")
    parser.add_argument("--extra-drives", default=None,
                        help="drive cache whose drives join the training drives (closed-loop "
                             "drives labelled by the expert: train/policy_drives.py; lead-stop "
                             "forks: train/lead_stop_cache.py); its seeds must lie outside "
                             "the run's own training seeds")
    parser.add_argument("--disturbed-share", type=float, default=None,
                        help=f"share of training drives driven with disturbances (default "
                             f"{Recipe.disturbed_share})")
    parser.add_argument("--lead-lag-share", type=float, default=None,
                        help=f"share of the lead cars' brakings in disturbed drives that the "
                             f"ego reacts to late, keeping its speed until it must brake hard "
                             f"(default {Disturbance.lead_lag_share}: none)")
    parser.add_argument("--early-greens", type=int, default=None,
                        help=f"forks per red-light wait of a training seed where the light "
                             f"turns green early (default {LightBranches.early_greens}; 0: "
                             f"none)")
    add_on_off(parser, "--held-red", LightBranches.held_red,
               "a fork per red-light wait where the light stays red past its green")
    add_on_off(parser, "--natural-wait", LightBranches.natural_wait,
               "each red-light wait itself as a fork, held a reaction time after its green")
    add_on_off(parser, "--stand-back", LightBranches.stand_back,
               f"a fork per red-light wait with the ego stopped {LightBranches.stand_back_m[0]:g}-"
               f"{LightBranches.stand_back_m[1]:g} m short of the line, held there a reaction "
               f"time into the green")
    parser.add_argument("--stand-back-release", choices=STAND_BACK_RELEASES, default=None,
                        help=f"with --stand-back: green holds the ego there a reaction time "
                             f"into the green, red releases it under red so that it moves up "
                             f"to the line before the green (default "
                             f"{LightBranches.stand_back_release})")
    parser.add_argument("--lead-stops", type=int, default=None,
                        help=f"forks per training drive with a car standing in the ego lane "
                             f"ahead that the ego comes up to at speed and reacts to late "
                             f"(default {LeadStops.per_drive}: none)")
    parser.add_argument("--lead-stop-seeds", type=int, default=None,
                        help="with --lead-stops: fork the drives of this many training seeds "
                             "from the seed offset on instead of those of the training drives "
                             "(default: the training drives'); a later call of a chain "
                             "starts its offset past them")
    parser.add_argument("--lane-forks", type=int, default=None,
                        help=f"forks per training seed of a {LaneForks.drive_s:g} s drive of it "
                             f"with the ego drifted towards the inside of a tight bend or "
                             f"towards a parked car being passed, the expert bringing it back "
                             f"(default {LaneForks.per_drive}: none)")
    parser.add_argument("--lamp-pairs", type=int, default=None,
                        help=f"pairs per red-light wait of a training seed of one-window "
                             f"drives that differ only in the ego's signal head, red (stay) "
                             f"and green (go), the ego moved back {LampPairs.back_m[0]:g}-"
                             f"{LampPairs.back_m[1]:g} m from where the expert waits "
                             f"(default {LampPairs.per_wait}: none)")
    add_on_off(parser, "--lead-stop-contrast", LeadStops.contrast,
               "with --lead-stops: each fork frame with the car standing ahead of a driving "
               "ego also trains the action expert on the expert's plan without the car, "
               "under that plan's CoC (same pictures, other words, other future)")
    add_on_off(parser, "--lead-stop-moving-twin", LeadStops.moving_twin,
               f"with --lead-stops: each fork also comes as a twin placed at the same frame "
               f"and gap whose car drives on at {LeadStops.twin_mps[0]:g}-"
               f"{LeadStops.twin_mps[1]:g} m/s instead of standing (the expert follows it)")
    add_on_off(parser, "--lead-stop-matched-twin", LeadStops.matched_twin,
               f"with --lead-stops: each fork also comes as a twin whose car drives at "
               f"{LeadStops.matched_share[0]:g}-{LeadStops.matched_share[1]:g} of the ego's "
               f"speed (the expert follows it gently)")
    add_on_off(parser, "--standing-lead-label", Recipe.standing_lead_label,
               "label a binding lead that stands (slower than 0.5 m/s) a reason to stop: "
               "'Stop behind the car standing still in the lane ahead' instead of 'Follow ...'")
    parser.add_argument("--decision-token-weight", type=float, default=None,
                        help=f"CoC loss weight of the tokens that decide the decision "
                             f"(default {DecisionFocus.token_weight}; 1: plain mean)")
    parser.add_argument("--decision-balance", type=float, default=None,
                        help=f"0: windows drawn uniformly, 1: every decision equally often "
                             f"(default {DecisionFocus.balance})")
    parser.add_argument("--start-weight", type=float, default=None,
                        help=f"draw weight factor of the starts from rest, windows where the "
                             f"ego stands and the label is not to stop (default "
                             f"{DecisionFocus.start_weight}: none)")
    parser.add_argument("--side-weight", type=float, default=None,
                        help=f"CoC loss weight of the words that name a side, left or right "
                             f"(default {DecisionFocus.side_weight}: none)")
    parser.add_argument("--brake-weight", type=float, default=None,
                        help=f"draw weight factor of the hard brakes, windows whose future "
                             f"slows by {BRAKE_DROP_MPS:g} m/s or more within "
                             f"{BRAKE_HORIZON_S:g} s (default {DecisionFocus.brake_weight}: "
                             f"none)")
    parser.add_argument("--flow-draws", type=int, default=None,
                        help=f"(noise, time) draws per window in the target's flow loss "
                             f"(default {Recipe.flow_draws})")
    parser.add_argument("--history-dropout", type=float, default=None,
                        help=f"share of the target stage's windows trained without their ego "
                             f"history, so that plan and CoC come from the cameras "
                             f"(default {Recipe.history_dropout}: none)")
    parser.add_argument("--scene-weight", type=float, default=None,
                        help=f"weight of the scene readout's loss (the lamp ahead and the gap "
                             f"to the vehicle ahead read where the model decides; default "
                             f"{Recipe.scene_weight}: no readout)")
    parser.add_argument("--readout-blind", type=float, default=None,
                        help=f"share of the target stage's windows that lose their ego "
                             f"history and train the scene readout alone (needs "
                             f"--scene-weight; default {Recipe.readout_blind}: none)")
    parser.add_argument("--expert-blind", type=float, default=None,
                        help=f"share of the target stage's windows whose action expert does "
                             f"not read the image slots, so that the plan follows the CoC "
                             f"(default {Recipe.expert_blind}: none)")
    parser.add_argument("--target-minutes", type=float, default=None,
                        help="target schedule length over all calls (default: its share of "
                             "one call)")
    parser.add_argument("--later-minutes", type=float, default=None,
                        help=f"with --target-minutes: minutes kept for the stages after the "
                             f"target (default {Recipe.later_minutes})")
    parser.add_argument("--init-from", default=None,
                        help="model directory of the recipe's model to start from: its "
                             "tokenizer, action normalization, weights and drafters")
    parser.add_argument("--target-lr", type=float, default=None,
                        help=f"peak learning rate of the target stage (default "
                             f"{Recipe.target_lr}; lower when fine-tuning with --init-from)")
    parser.add_argument("--stages", choices=STAGES, default="all",
                        help="target: stop after the target stage or when this call's time "
                             "is up, with a checkpoint in OUT/resume for --resume; data: only "
                             "simulate the recipe's drives into OUT/drives for --drives-from")
    parser.add_argument("--target-call-steps", type=int, default=None,
                        help="with --stages target: stop the target after this many steps "
                             "in this call")
    parser.add_argument("--resume", type=Path, default=None,
                        help="run directory of a --stages target call to go on with (its "
                             "recipe, seed, drives and state; no recipe options here)")
    parser.add_argument("--drives-from", type=Path, default=None,
                        help="run directory of a --stages data call of the same recipe and "
                             "seed whose drives this run trains on instead of simulating them")
    args = parser.parse_args(argv)
    overrides = {name: value for name, value in (
        ("train_drives", args.train_drives), ("drive_seconds", args.drive_seconds),
        ("train_seed_offset", args.train_seed_offset), ("target_batch", args.target_batch),
        ("disturbed_share", args.disturbed_share), ("flow_draws", args.flow_draws),
        ("target_minutes", args.target_minutes), ("later_minutes", args.later_minutes),
        ("extra_drives", args.extra_drives), ("init_from", args.init_from),
        ("target_lr", args.target_lr), ("history_dropout", args.history_dropout),
        ("scene_weight", args.scene_weight), ("readout_blind", args.readout_blind),
        ("expert_blind", args.expert_blind),
        ("standing_lead_label", on_off(args.standing_lead_label)))
        if value is not None}
    focus = {name: value for name, value in (
        ("token_weight", args.decision_token_weight),
        ("balance", args.decision_balance),
        ("start_weight", args.start_weight),
        ("side_weight", args.side_weight),
        ("brake_weight", args.brake_weight)) if value is not None}
    branches = {name: value for name, value in (
        ("early_greens", args.early_greens),
        ("held_red", on_off(args.held_red)),
        ("natural_wait", on_off(args.natural_wait)),
        ("stand_back", on_off(args.stand_back)),
        ("stand_back_release", args.stand_back_release))
        if value is not None}
    if args.target_call_steps is not None and (args.stages != "target"
                                               or args.target_call_steps < 1):
        parser.error("--target-call-steps takes a count >= 1 and --stages target")
    disturbance = {name: value for name, value in (
        ("lead_lag_share", args.lead_lag_share),) if value is not None}
    stops = {name: value for name, value in (
        ("per_drive", args.lead_stops), ("seeds", args.lead_stop_seeds),
        ("contrast", on_off(args.lead_stop_contrast)),
        ("moving_twin", on_off(args.lead_stop_moving_twin)),
        ("matched_twin", on_off(args.lead_stop_matched_twin)))
        if value is not None}
    lanes = {} if args.lane_forks is None else {"per_drive": args.lane_forks}
    pairs = {} if args.lamp_pairs is None else {"per_wait": args.lamp_pairs}
    if args.stages == "data" and (args.resume is not None or args.drives_from is not None):
        parser.error("--stages data simulates a new run's drives; it takes neither --resume "
                     "nor --drives-from")
    if args.drives_from is not None and args.resume is not None:
        parser.error("--resume goes on with the drives of the run it resumes; drop "
                     "--drives-from")
    if args.resume is not None and (overrides or focus or branches or disturbance or stops
                                    or lanes or pairs or args.smoke):
        parser.error("--resume takes the recipe of the run it resumes; drop the recipe "
                     "options")
    recipe = smoke() if args.smoke else Recipe()
    try:
        recipe = dataclasses.replace(
            recipe, **overrides, decision=dataclasses.replace(recipe.decision, **focus),
            light_branches=dataclasses.replace(recipe.light_branches, **branches),
            disturbance=dataclasses.replace(recipe.disturbance, **disturbance),
            lead_stops=dataclasses.replace(recipe.lead_stops, **stops),
            lane_forks=dataclasses.replace(recipe.lane_forks, **lanes),
            lamp_pairs=dataclasses.replace(recipe.lamp_pairs, **pairs))
    except ValueError as exc:
        parser.error(str(exc))
    return args, recipe
