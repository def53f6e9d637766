"""Times one engine variant over sliding windows after warm-up (StageTimer, CUDA events)."""

from __future__ import annotations

import numpy as np

from flashdrive_ros.bench.shapes import Parts
from flashdrive_ros.bench.stats import percentiles, stage_summary
from flashdrive_ros.bench.windows import SlidingWindows
from flashdrive_ros.bench.work import Work, full_prefill_keys
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine


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


def run_engine(parts: Parts, overrides: dict, device: str, dtype: str, samples: int,
               coc_tokens: int, warmup: int, windows: int, seed: int,
               backend: str = "torch") -> tuple[dict, Work]:
    cfg = EngineConfig(device=device, dtype=dtype, num_samples=samples,
                       max_coc_tokens=coc_tokens, seed=seed, backend=backend,
                       **{"coc_reuse": False, **overrides})
    engine = Engine(parts.model, parts.tokenizer, parts.drafter, cfg)
    drive = SlidingWindows(parts.cfg, seed)
    for window in drive.take(warmup):
        engine.step(window)
    plans = [engine.step(window) for window in drive.take(windows)]
    rounds = [len(p.accepted_lengths) for p in plans]
    result = {
        "engine_config": cfg.to_dict(),
        "stages": stage_summary([p.timings_ms for p in plans]),
        "windows": len(plans),
        "full_prefills": sum(p.full_prefill for p in plans),
        "coc_tokens": percentiles([float(p.tokens_generated) for p in plans]),
        "speculative_rounds": percentiles([float(r) for r in rounds]),
        "accepted_length_mean": float(np.mean([p.accepted_length_mean for p in plans])),
    }
    return result, engine_work(engine, samples, coc_tokens, float(np.mean(rounds)))
