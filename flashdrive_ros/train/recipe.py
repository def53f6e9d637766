"""Sizes of one training run: the full GPU recipe and the CPU smoke recipe."""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field

from flashdrive_ros.model.config import ModelConfig, PromptConfig, embedded, tiny
from flashdrive_ros.sim.disturbance import Disturbance
from flashdrive_ros.sim.lamp_pairs import LampPairs
from flashdrive_ros.sim.lane_forks import LaneForks
from flashdrive_ros.sim.lead_stops import LeadStops
from flashdrive_ros.sim.light_branches import LightBranches
from flashdrive_ros.train.decision_focus import DecisionFocus
from flashdrive_ros.train.flow_matching_loss import check_expert_blind
from flashdrive_ros.train.scene_readout import check_readout_blind
from flashdrive_ros.train.sensor_noise import SensorNoise
from flashdrive_ros.train.streaming_backbone import BackboneStreamingConfig


@dataclass
class Recipe:
    """Data, vocabulary and per-stage step caps; stages also stop on their time share.

    Drives last `drive_seconds` (60 s holds every scenario block in a seeded order); training
    drives carry `noise`, and `disturbed_share` of them are driven with `disturbance` (the
    expert's way back to its course as the label); held-out drives are exact. With
    `plan_futures` a training frame's future is the expert's plan with the lights held as the
    frame shows them, not what it went on to do once a light changed (held-out drives keep
    what happened). `light_branches` adds, per red-light wait of a training seed, forks of
    its plain drive where the light turns green early or stays red (the same standing scene
    under both colours). `lead_stops` adds, per training seed, forks of its drive with a car
    standing in the ego lane ahead and the ego reacting late (with their contrasts, the same
    windows under the CoC and future of the expert without the car, when `contrast` is on).
    `lane_forks` adds, per training
    seed, forks of a longer drive of it with the ego drifted towards the inside of a tight
    bend or towards a parked car being passed and the expert's way back. `lamp_pairs` adds, per
    red-light wait of a training seed, pairs of one-window drives that differ only in the
    ego's signal head (red: stay, green: go), the ego moved back from where the expert
    waits. With `standing_lead_label`
    the run's drives label a binding lead that stands as a reason to stop instead of one to
    follow (sim/labels.py). `extra_drives`
    names a drive cache (closed-loop drives of a model labelled by the expert,
    `train/policy_drives.py`) whose drives join the training drives. A decision
    class with fewer than `min_decision_windows` training windows stops the run. `decision`
    weighs the CoC tokens that decide the decision and draws rare decisions more often
    (target stage; the streaming-aware stage takes its token weight). `flow_draws` (noise,
    time) pairs per window train the action expert on one backbone pass (loss: their mean).
    `history_dropout` is the share of the target stage's drawn windows trained without their
    ego history (past-motion dropout; the history placeholder tokens stand in its place).
    `scene_weight` > 0 trains a scene readout beside the target (the lamp ahead and the gap to
    the vehicle ahead read from the hidden state where the model decides; its loss at this
    weight, train/scene_readout.py); 0 leaves it out. `readout_blind` is the share of the drawn
    windows that lose their ego history and train the readout alone (their CoC and flow
    losses leave them out), so that it reads the scene from the cameras. `expert_blind` is
    the share of the drawn windows whose action expert does not read the image slots, so that
    their plan follows the CoC and the ego history.
    `init_from` names a model directory of the recipe's model whose tokenizer, action
    normalization and weights (drafters too) the run starts from (train/warm_start.py);
    `target_lr` is then the fine-tuning rate. Training drives are the training seeds from
    `train_seed_offset` on (a chain of warm starts gives each call drives of its own).

    Time: in one call the target trains `target_share` of the time left after the data and
    each later stage its share of the time left after the target, scaled by
    1 / (1 - target_share). `target_minutes` instead fixes the target's schedule length
    over several calls (the pipeline's --stages target / --resume); the call that runs the
    later stages then stops the target so that `later_minutes` remain for them.
    """

    preset: str = "embedded"
    train_drives: int = 56
    train_seed_offset: int = 0
    eval_drives: int = 8
    drive_seconds: float = 60.0
    min_decision_windows: int = 300
    noise: SensorNoise = field(default_factory=SensorNoise)
    disturbed_share: float = 0.5
    disturbance: Disturbance = field(default_factory=Disturbance)
    plan_futures: bool = True
    light_branches: LightBranches = field(default_factory=LightBranches)
    lead_stops: LeadStops = field(default_factory=LeadStops)
    lane_forks: LaneForks = field(default_factory=LaneForks)
    lamp_pairs: LampPairs = field(default_factory=LampPairs)
    standing_lead_label: bool = False
    extra_drives: str | None = None
    init_from: str | None = None
    bpe_tokens: int = 1024
    target_steps: int = 6000
    target_batch: int = 32
    target_lr: float = 6e-4
    target_eval_rows: int = 512
    flow_weight: float = 1.0
    flow_draws: int = 4
    history_dropout: float = 0.0
    scene_weight: float = 0.0
    readout_blind: float = 0.0
    expert_blind: float = 0.0
    decision: DecisionFocus = field(default_factory=DecisionFocus)
    draft_rows: int = 4096
    draft_eval_rows: int = 512
    draft_steps: int = 3000
    draft_batch: int = 256
    draft_lr: float = 1e-3
    stream_steps: int = 400
    stream_max_windows: int = 8
    stream_sequences: int = 4
    stream_samples: int = 16
    stream_lr: float = 1e-4
    stream_eval_sequences: int = 64
    backbone: BackboneStreamingConfig = field(default_factory=lambda: BackboneStreamingConfig(
        streaming_sequences=24, full_prefill_windows=24, max_windows=16, eval_rows=64,
        eval_length=12))
    target_share: float = 0.52
    backbone_share: float = 0.18
    draft_share: float = 0.06
    stream_share: float = 0.08
    reserve_seconds: float = 45.0
    target_minutes: float | None = None
    later_minutes: float = 4.0

    def __post_init__(self) -> None:
        if self.preset not in ("embedded", "smoke"):
            raise ValueError(f"preset must be embedded|smoke, got {self.preset!r}")
        if min(self.train_drives, self.eval_drives, self.target_steps, self.draft_steps,
               self.stream_steps, self.target_batch, self.draft_batch) < 1:
            raise ValueError("recipe counts must be >= 1")
        if self.train_seed_offset < 0:
            raise ValueError(f"train_seed_offset must be >= 0, got {self.train_seed_offset}")
        if self.min_decision_windows < 0:
            raise ValueError("min_decision_windows must be >= 0")
        if not 0.0 <= self.disturbed_share <= 1.0:
            raise ValueError(f"disturbed_share must be in [0, 1], got {self.disturbed_share}")
        if not self.target_lr > 0:
            raise ValueError(f"target_lr must be > 0, got {self.target_lr}")
        if self.flow_draws < 1:
            raise ValueError(f"flow_draws must be >= 1, got {self.flow_draws}")
        if not 0.0 <= self.history_dropout < 1.0:
            raise ValueError(f"history_dropout must be in [0, 1), got {self.history_dropout}")
        if not (math.isfinite(self.scene_weight) and self.scene_weight >= 0.0):
            raise ValueError(f"scene_weight must be finite and >= 0, got {self.scene_weight}")
        check_readout_blind(self.readout_blind, self.history_dropout, self.scene_weight)
        check_expert_blind(self.expert_blind)
        if self.target_minutes is not None and not self.target_minutes > 0:
            raise ValueError(f"target_minutes must be > 0, got {self.target_minutes}")
        if not self.later_minutes > 0:
            raise ValueError(f"later_minutes must be > 0, got {self.later_minutes}")
        if not 0.0 < self.target_share < 1.0:
            raise ValueError(f"target_share must be in (0, 1), got {self.target_share}")
        if (self.target_share + self.backbone_share + 2 * self.draft_share
                + self.stream_share > 1.0):
            raise ValueError("stage time shares exceed 1")

    def model_config(self, vocab_size: int) -> ModelConfig:
        if self.preset == "embedded":
            return embedded(vocab_size)
        cfg = tiny(vocab_size)
        cfg.name = "smoke"
        cfg.prompt = PromptConfig(image_width=32, image_height=32, max_coc_tokens=24)
        cfg.action = dataclasses.replace(cfg.action, num_traj_tokens=1000)
        return ModelConfig.from_dict(cfg.to_dict())


def smoke() -> Recipe:
    return Recipe(preset="smoke", train_drives=2, eval_drives=1, drive_seconds=2.5,
                  bpe_tokens=300, target_steps=8, target_batch=2, target_lr=3e-3,
                  target_eval_rows=4, draft_rows=8, draft_eval_rows=4, draft_steps=10,
                  draft_batch=16, stream_steps=2, stream_max_windows=2, stream_sequences=1,
                  stream_samples=4, stream_eval_sequences=2, reserve_seconds=0.0,
                  min_decision_windows=0, disturbed_share=0.5,
                  decision=DecisionFocus(balance=0.0),
                  backbone=BackboneStreamingConfig(steps=2, streaming_sequences=2,
                                                   full_prefill_windows=2, min_windows=2,
                                                   max_windows=3, eval_rows=2, eval_length=3,
                                                   eval_batch=2, log_every=1))


def recipe_from_dict(data: dict) -> Recipe:
    """The recipe that `dataclasses.asdict` (through JSON) gave; unknown keys are an error."""
    return _build(Recipe, data)


def _build(cls: type, data: dict):
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {sorted(unknown)}")
    kwargs = {}
    for name, value in data.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint):
            value = _build(hint, value)
        elif typing.get_origin(hint) is tuple:
            value = tuple(value)
        kwargs[name] = value
    return cls(**kwargs)
