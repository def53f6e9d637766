"""Times one engine variant over sliding windows after warm-up (StageTimer, CUDA events);
with a deadline, fewer timed windows where the warm-up rate says the rest would not fit."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from flashdrive_ros.bench.shapes import Parts
from flashdrive_ros.bench.stats import percentiles, stage_summary
from flashdrive_ros.bench.windows import SlidingWindows
from flashdrive_ros.bench.work import Work, full_prefill_keys
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.types import Plan, Window

MIN_WINDOWS = 3


class OverBudget(Exception):
    """Not even MIN_WINDOWS timed windows fit before the deadline."""


def engine_work(engine: Engine, samples: int, coc_tokens: int, rounds: float) -> Work:
    layout, cfg = engine.frame_layout, engine.cfg
    if cfg.streaming:
        queries = layout.newest_frames_and_tail()  # [T] prompt indices
        images, tokens, keys = layout.num_views, len(queries), int((queries + 1).sum())
    else:
        images = layout.num_views * layout.num_frames
        tokens, keys = layout.prompt_length, full_prefill_keys(layout.prompt_length)
    return Work(images=images, prompt_length=layout.prompt_length, prefill_tokens=tokens,
                prefill_keys=keys, decode="speculative" if cfg.speculative else "autoregressive",
                coc_tokens=coc_tokens, rounds=rounds, hf_new_tokens=0,
                velocity_calls=cfg.flow_schedule.num_velocity_calls, samples=samples)


def engine_config(overrides: dict, device: str, dtype: str, samples: int, coc_tokens: int,
                  seed: int, backend: str) -> EngineConfig:
    return EngineConfig(device=device, dtype=dtype, num_samples=samples,
                        max_coc_tokens=coc_tokens, seed=seed, backend=backend,
                        **{"coc_reuse": False, **overrides})


def timed_windows(step: Callable[[Window], Plan], parts: Parts, seed: int, warmup: int,
                  windows: int, deadline: float | None) -> list[Plan]:
    """Plans of `windows` timed windows after `warmup` untimed ones; with a deadline
    (time.monotonic()), as many as the last warm-up window's time says fit, at least
    MIN_WINDOWS (else OverBudget)."""
    drive = SlidingWindows(parts.cfg, seed)
    for window in drive.take(warmup):
        started = time.monotonic()
        step(window)
        window_s = time.monotonic() - started
    if deadline is not None:
        fit = int((deadline - time.monotonic()) / max(window_s, 1e-6))
        if fit < min(MIN_WINDOWS, windows):
            raise OverBudget(f"{min(MIN_WINDOWS, windows)} windows of {window_s:.2f} s do "
                             f"not fit in the {max(deadline - time.monotonic(), 0):.0f} s left")
        windows = min(windows, fit)
    return [step(window) for window in drive.take(windows)]


def summarize(plans: list[Plan], cfg: EngineConfig) -> dict:
    rounds = [len(p.accepted_lengths) for p in plans]
    return {
        "engine_config": cfg.to_dict(),
        "stages": stage_summary([p.timings_ms for p in plans]),
        "windows": len(plans),
        "full_prefills": sum(p.full_prefill for p in plans),
        "coc_tokens": percentiles([float(p.tokens_generated) for p in plans]),
        "speculative_rounds": percentiles([float(r) for r in rounds]),
        "accepted_length_mean": float(np.mean([p.accepted_length_mean for p in plans])),
    }


def run_engine(parts: Parts, overrides: dict, device: str, dtype: str, samples: int,
               coc_tokens: int, warmup: int, windows: int, seed: int,
               backend: str = "torch", deadline: float | None = None) -> tuple[dict, Work]:
    cfg = engine_config(overrides, device, dtype, samples, coc_tokens, seed, backend)
    engine = Engine(parts.model, parts.tokenizer, parts.drafter, cfg)
    plans = timed_windows(engine.step, parts, seed, warmup, windows, deadline)
    rounds = float(np.mean([len(p.accepted_lengths) for p in plans]))
    return summarize(plans, cfg), engine_work(engine, samples, coc_tokens, rounds)
