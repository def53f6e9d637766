"""Sizes of one training run: the full GPU recipe and the CPU smoke recipe."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from flashdrive_ros.model.config import ModelConfig, PromptConfig, embedded, tiny


@dataclass
class Recipe:
    """Data, vocabulary and per-stage step caps; stages also stop on their time share."""

    preset: str = "embedded"
    train_drives: int = 56
    eval_drives: int = 8
    drive_seconds: float = 30.0
    bpe_tokens: int = 1024
    target_steps: int = 6000
    target_batch: int = 32
    target_lr: float = 6e-4
    target_eval_rows: int = 512
    flow_weight: float = 1.0
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
    target_share: float = 0.62
    draft_share: float = 0.11
    stream_share: float = 0.1
    reserve_seconds: float = 45.0

    def __post_init__(self) -> None:
        if self.preset not in ("embedded", "smoke"):
            raise ValueError(f"preset must be embedded|smoke, got {self.preset!r}")
        if min(self.train_drives, self.eval_drives, self.target_steps, self.draft_steps,
               self.stream_steps, self.target_batch, self.draft_batch) < 1:
            raise ValueError("recipe counts must be >= 1")
        if self.target_share + 2 * self.draft_share + self.stream_share > 1.0:
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
                  stream_samples=4, stream_eval_sequences=2, reserve_seconds=0.0)
