"""Decode measured at a chosen accepted length: the rounds of a trained drafter with random
weights.

A first pass runs the variant's engine over the windows and records each window's decoded
tokens (greedy). A fresh engine of the same config then runs the same windows with every
round's drafts replaced by the recorded tokens, cut so each round commits the tokens of the
pattern (`engine/accept_pattern.py`); the drafter of the given block size still runs every
round, so draft, verify and commit cost what they cost with a trained drafter.
"""

from __future__ import annotations

import dataclasses
import gc
import time

import numpy as np
import torch

from flashdrive_ros.bench.engine_run import engine_config, engine_work, summarize, timed_windows
from flashdrive_ros.bench.shapes import Parts
from flashdrive_ros.bench.work import Work
from flashdrive_ros.engine.accept_pattern import AcceptPatternProposer, expected_rounds
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.speculative import Proposer
from flashdrive_ros.engine.types import Plan, Window
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.drafter import Drafter


class PatternEngine(Engine):
    """An engine whose rounds draft `recorded` (set before each window) at `accepted_length`
    tokens per round."""

    accepted_length: float = 1.0
    recorded: tuple[int, ...] = ()

    def window_proposer(self) -> Proposer | None:
        base = super().window_proposer()
        if base is None:
            raise ValueError("decode at a chosen acceptance needs speculative decoding")
        return AcceptPatternProposer(base, self.recorded, self.accepted_length,
                                     self.model.cfg.text.vocab_size, self.device)


def parts_at_block(parts: Parts, block_size: int, seed: int) -> Parts:
    """`parts` with a drafter of `block_size` (random weights, same device and dtype)."""
    if block_size == parts.cfg.drafter.block_size:
        return parts
    cfg = dataclasses.replace(parts.cfg, drafter=dataclasses.replace(
        parts.cfg.drafter, block_size=block_size))
    weight = next(parts.drafter.parameters())
    torch.manual_seed(seed)
    with torch.device(weight.device):
        drafter = Drafter(cfg.drafter, cfg.text).to(weight.dtype).eval()
    return Parts(cfg, parts.model, drafter, parts.tokenizer)


def release(device: str) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def record_greedy(parts: Parts, cfg: EngineConfig, seed: int, warmup: int, windows: int,
                  deadline: float | None) -> tuple[list[Plan], dict[int, list[int]]]:
    """Plans of the timed windows and every window's decoded tokens, by sequence."""
    recorder = Engine(parts.model, parts.tokenizer, parts.drafter, cfg)
    recorded: dict[int, list[int]] = {}

    def record(window: Window) -> Plan:
        plan = recorder.step(window)
        recorded[window.sequence] = list(recorder.previous_coc)
        return plan

    return timed_windows(record, parts, seed, warmup, windows, deadline), recorded


def run_pattern(parts: Parts, cfg: EngineConfig, accepted_length: float,
                recorded: dict[int, list[int]], seed: int, warmup: int, windows: int,
                samples: int) -> tuple[list[Plan], Work]:
    engine = PatternEngine(parts.model, parts.tokenizer, parts.drafter, cfg)
    engine.accepted_length = accepted_length

    def step(window: Window) -> Plan:
        engine.recorded = tuple(recorded[window.sequence])
        return engine.step(window)

    plans = timed_windows(step, parts, seed, warmup, windows, None)
    rounds = float(np.mean([len(p.accepted_lengths) for p in plans]))
    return plans, engine_work(engine, samples, cfg.max_coc_tokens, rounds)


def run_at_acceptance(parts: Parts, overrides: dict, accepted_length: float, block_size: int,
                      device: str, dtype: str, samples: int, coc_tokens: int, warmup: int,
                      windows: int, seed: int, backend: str = "torch",
                      deadline: float | None = None) -> tuple[dict, Work, ModelConfig]:
    """The variant's stage summary at `accepted_length` (block `block_size`) with the
    accepted length measured and the rounds against the pattern's, its work, and the model
    config with that block size."""
    parts = parts_at_block(parts, block_size, seed)
    cfg = engine_config(overrides, device, dtype, samples, coc_tokens, seed, backend)
    if not cfg.speculative:
        raise ValueError("decode at a chosen acceptance needs speculative decoding")
    half = None if deadline is None else (time.monotonic() + deadline) / 2
    timed, recorded = record_greedy(parts, cfg, seed, warmup, windows, half)
    release(device)
    plans, work = run_pattern(parts, cfg, accepted_length, recorded, seed, warmup, len(timed),
                              samples)
    release(device)
    result = summarize(plans, cfg)
    same = sum(p.coc_token_ids == r.coc_token_ids for p, r in zip(plans, timed, strict=True))
    result["at_acceptance"] = {"target_accepted_length": accepted_length,
                               "block_size": block_size,
                               "measured_accepted_length": result["accepted_length_mean"],
                               "rounds_mean": work.rounds,
                               "pattern_rounds": expected_rounds(accepted_length, block_size,
                                                                 coc_tokens - 1),
                               "same_coc_as_recorded": same / len(plans)}
    return result, work, parts.cfg
