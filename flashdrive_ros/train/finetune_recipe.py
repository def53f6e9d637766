"""Sizes of a streaming fine-tune run: the GPU recipe, a 2-core CPU recipe and the CPU smoke
recipe."""

from __future__ import annotations

from dataclasses import dataclass, field

from flashdrive_ros.train.streaming_backbone import BackboneStreamingConfig


@dataclass
class FinetuneRecipe:
    """Data, held-out evaluation and stage sizes; both stages also stop on their time share.

    Training drives are the training seeds from `train_seed_offset`; held-out losses use the
    first `eval_drives` evaluation seeds at `drive_seconds`, the held-out bags the same seeds
    at `eval_seconds`. expert_share: the expert-only stage's part of the training time.
    eval_time_margin: the evaluations still to come are budgeted at this multiple of the
    first one's duration.
    """

    train_drives: int = 30
    train_seed_offset: int = 0
    drive_seconds: float = 30.0
    eval_drives: int = 2
    eval_seconds: float = 25.0
    eval_samples: int = 6
    eval_max_windows: int | None = None
    eval_intermediate: bool = True
    backbone: BackboneStreamingConfig = field(default_factory=BackboneStreamingConfig)
    expert_steps: int = 400
    expert_max_windows: int = 8
    expert_sequences: int = 4
    expert_samples: int = 16
    expert_lr: float = 1e-4
    expert_eval_sequences: int = 32
    expert_share: float = 0.15
    eval_time_margin: float = 1.3
    reserve_seconds: float = 25.0
    min_stage_seconds: float = 5.0

    def __post_init__(self) -> None:
        counts = {"train_drives": self.train_drives, "eval_drives": self.eval_drives,
                  "eval_samples": self.eval_samples, "expert_steps": self.expert_steps,
                  "expert_max_windows": self.expert_max_windows,
                  "expert_sequences": self.expert_sequences,
                  "expert_samples": self.expert_samples,
                  "expert_eval_sequences": self.expert_eval_sequences}
        for name, value in counts.items():
            if value < 1:
                raise ValueError(f"FinetuneRecipe.{name} must be >= 1, got {value}")
        if self.train_seed_offset < 0:
            raise ValueError(f"train_seed_offset must be >= 0, got {self.train_seed_offset}")
        if not (self.drive_seconds > 0 and self.eval_seconds > 0):
            raise ValueError("drive_seconds and eval_seconds must be > 0")
        if self.eval_max_windows is not None and self.eval_max_windows < 1:
            raise ValueError(f"eval_max_windows must be >= 1 or None, got "
                             f"{self.eval_max_windows}")
        if not 0 < self.expert_share < 1:
            raise ValueError(f"expert_share must be in (0, 1), got {self.expert_share}")
        if self.eval_time_margin < 1 or self.reserve_seconds < 0 or \
                self.min_stage_seconds <= 0:
            raise ValueError("need eval_time_margin >= 1, reserve_seconds >= 0 and "
                             "min_stage_seconds > 0")
        if not self.expert_lr > 0:
            raise ValueError(f"expert_lr must be > 0, got {self.expert_lr}")

    @property
    def evaluations_after_training(self) -> int:
        return 2 if self.eval_intermediate else 1


def smoke() -> FinetuneRecipe:
    return FinetuneRecipe(
        train_drives=1, drive_seconds=3.0, eval_drives=1, eval_seconds=8.5, eval_samples=2,
        eval_max_windows=2,
        backbone=BackboneStreamingConfig(steps=2, streaming_sequences=2,
                                         full_prefill_windows=2, min_windows=2, max_windows=3,
                                         eval_rows=2, eval_length=3, eval_batch=2,
                                         log_every=1),
        expert_steps=1, expert_max_windows=2, expert_sequences=1, expert_samples=2,
        expert_eval_sequences=1, reserve_seconds=0.0)


def cpu() -> FinetuneRecipe:
    """A run sized for a 2-core CPU within about an hour: fewer, shorter streamed sequences
    and smaller batches (more optimizer steps for the time), one held-out drive of 20 s."""
    return FinetuneRecipe(
        train_drives=8, eval_drives=1, eval_seconds=20.0, eval_intermediate=False,
        backbone=BackboneStreamingConfig(streaming_sequences=6, full_prefill_windows=6,
                                         min_windows=2, max_windows=8, eval_rows=16,
                                         eval_length=6, eval_batch=8, log_every=5),
        expert_steps=200, expert_sequences=2, expert_eval_sequences=8)
