"""Sizes of one drafter study: the GPU recipe and the CPU smoke recipe."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StudyConfig:
    """Data, per-stage step caps and time shares. Training stages stop on their step cap or
    their share of the time left after data, corpus, the engine evaluation (`eval_seconds`)
    and `reserve_seconds`, whichever comes first."""

    train_drives: int = 14
    rl_drives: int = 2
    eval_drives: int = 2
    drive_seconds: float = 30.0
    corpus_rows: int = 4096
    eval_rows: int = 512
    corpus_batch: int = 64
    corpus_max_coc_tokens: int | None = None
    block_sizes: tuple[int, ...] = (8, 16)
    sft_steps: int = 3000
    sft_batch: int = 256
    sft_lr: float = 1e-3
    rl_rows: int = 1024
    rl_steps: int = 400
    rl_prompts: int = 16
    rl_candidates: int = 64
    rl_lr: float = 1e-4
    sft_share: float = 0.22
    rl_share: float = 0.17
    eval_windows_per_drive: int = 60
    eval_seconds: float = 110.0
    warmup_windows: int = 2
    eval_max_coc_tokens: int | None = None
    budget_rows: int = 512
    reserve_seconds: float = 20.0
    workers: int | None = None
    log_every: int = 50

    def __post_init__(self) -> None:
        self.block_sizes = tuple(sorted(set(self.block_sizes)))
        if min(self.train_drives, self.rl_drives, self.eval_drives, self.corpus_rows,
               self.eval_rows, self.rl_rows,
               self.sft_steps, self.sft_batch, self.rl_steps, self.rl_prompts,
               self.eval_windows_per_drive, self.budget_rows, self.corpus_batch) < 1:
            raise ValueError("study counts must be >= 1")
        if self.warmup_windows < 0:
            raise ValueError("warmup_windows must be >= 0")
        if not self.block_sizes or self.block_sizes[0] < 2:
            raise ValueError(f"block sizes must be >= 2, got {self.block_sizes}")
        if self.rl_candidates < self.rl_prompts:
            raise ValueError("rl_candidates must be >= rl_prompts")
        if 3 * self.sft_share + 2 * self.rl_share > 1.0 + 1e-9:
            raise ValueError("three SFT and two RL shares exceed 1")
        if min(self.sft_share, self.rl_share, self.eval_seconds, self.drive_seconds) <= 0:
            raise ValueError("shares, eval_seconds and drive_seconds must be > 0")


def smoke() -> StudyConfig:
    """A few steps of everything on three short drives (CPU test)."""
    return StudyConfig(train_drives=1, rl_drives=1, eval_drives=1, drive_seconds=2.5,
                       corpus_rows=6, eval_rows=4, rl_rows=4, corpus_batch=6,
                       corpus_max_coc_tokens=12, sft_steps=2, sft_batch=4, rl_steps=1,
                       rl_prompts=2, rl_candidates=4, eval_windows_per_drive=2,
                       eval_seconds=5.0, warmup_windows=0, eval_max_coc_tokens=6,
                       budget_rows=4, reserve_seconds=0.0, workers=1, log_every=1)
