"""Drafters measured inside the real engine on held-out windows: tokens committed per
speculative round (accepted length), the wall time of each proposal and of each verify
forward, their ratio c (drafter / target cost on this device) and the speedup L / (1 + c)
that an accepted length L implies when a verify forward costs one decode step.

Timed calls are synchronised (CUDA) and run eagerly (no CUDA graphs). The same windows, in
drive order, go through every setting; a setting stops early when its time runs out.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.decoding import Target, TargetStep
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.speculative import Proposal, ProposalRequest
from flashdrive_ros.engine.types import Window
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.drafter_file import AnyDrafter, build_drafter
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.streaming_tune import window_of


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class TimedProposer:
    """A proposer whose every `propose` call is timed (seconds in `seconds`)."""

    def __init__(self, inner, device: torch.device) -> None:
        self.inner = inner
        self.device = device
        self.block_size = inner.block_size
        self.context_len = inner.context_len
        self.feature_layers = inner.feature_layers
        self.seconds: list[float] = []

    def propose(self, request: ProposalRequest) -> Proposal:
        synchronize(self.device)
        start = time.perf_counter()
        proposal = self.inner.propose(request)
        synchronize(self.device)
        self.seconds.append(time.perf_counter() - start)
        return proposal


class TimedTarget(Target):
    """A `Target` timing its verify forwards (`run_tokens` over exactly a block)."""

    def __init__(self, target: Target, block_size: int, device: torch.device) -> None:
        super().__init__(target.backbone, target.lm_head, target.feature_layers)
        self.block_size = block_size
        self.device = device
        self.seconds: list[float] = []

    def run_tokens(self, token_ids: list[int], cache, start_position: int) -> TargetStep:
        if len(token_ids) != self.block_size:
            return super().run_tokens(token_ids, cache, start_position)
        synchronize(self.device)
        start = time.perf_counter()
        step = super().run_tokens(token_ids, cache, start_position)
        synchronize(self.device)
        self.seconds.append(time.perf_counter() - start)
        return step


@dataclass(frozen=True)
class Setting:
    """One engine configuration to measure."""

    name: str
    drafter: str
    block_size: int
    streaming: bool


def heldout_windows(data: TrainSet, per_drive: int) -> list[list[Window]]:
    """The first `per_drive` consecutive windows of every drive of `data`."""
    drives = []
    for drive in sorted(set(data.drive_of.tolist())):
        rows = [int(r) for r in (data.drive_of == drive).nonzero()[0][:per_drive]]
        drives.append([window_of(data, row) for row in rows])
    return drives


def resized(drafter: AnyDrafter, block_size: int) -> AnyDrafter:
    """The same weights proposing blocks of `block_size`."""
    cfg = dataclasses.replace(drafter.cfg, block_size=block_size)
    out = build_drafter(cfg, drafter.text_cfg)
    out.load_state_dict(drafter.state_dict())
    weight = next(drafter.parameters())
    return out.to(device=weight.device, dtype=weight.dtype).eval()


@torch.no_grad()
def measure_setting(model: AlpamayoModel, tokenizer: TextTokenizer, drafter: AnyDrafter,
                    setting: Setting, drives: list[list[Window]], device: torch.device,
                    seconds: float, warmup_windows: int = 2,
                    max_coc_tokens: int | None = None) -> dict:
    """Accepted length, timings and the CoC of every window measured (after
    `warmup_windows` synthetic windows, untimed; CoC capped at `max_coc_tokens`, None = the
    model's limit). At least one window is measured, two when streaming (the first window of
    a drive is a full prefill)."""
    cfg = EngineConfig(streaming=setting.streaming, cuda_graphs=False, device=str(device),
                       dtype="float32", max_coc_tokens=max_coc_tokens)
    engine = Engine(model, tokenizer, resized(drafter, setting.block_size), cfg)
    engine.warmup(warmup_windows)
    proposer = TimedProposer(engine.proposer, device)
    target = TimedTarget(engine.target, setting.block_size, device)
    engine.proposer, engine.target = proposer, target
    accepted: list[int] = []
    cocs: list[list[int]] = []
    full_prefills = 0
    least = 2 if setting.streaming else 1
    start = time.monotonic()
    for windows in drives:
        engine.reset()
        for window in windows:
            if len(cocs) >= least and time.monotonic() - start > seconds:
                break
            plan = engine.step(window)
            accepted += plan.accepted_lengths
            cocs.append(list(plan.coc_token_ids))
            full_prefills += plan.full_prefill
    draft_ms = 1e3 * sum(proposer.seconds) / max(len(proposer.seconds), 1)
    verify_ms = 1e3 * sum(target.seconds) / max(len(target.seconds), 1)
    length = sum(accepted) / max(len(accepted), 1)
    cost = draft_ms / verify_ms if verify_ms > 0 else float("nan")
    return {**dataclasses.asdict(setting), "windows": len(cocs), "rounds": len(accepted),
            "full_prefills": full_prefills, "accepted_length": length,
            "tokens_per_window": sum(len(c) for c in cocs) / max(len(cocs), 1),
            "draft_ms": draft_ms, "verify_ms": verify_ms, "cost_ratio": cost,
            "speedup": length / (1.0 + cost), "seconds": round(time.monotonic() - start, 2),
            "cocs": cocs}


def same_cocs(results: list[dict]) -> bool:
    """Whether every result's CoCs agree on the windows all of them measured."""
    common = min(len(r["cocs"]) for r in results)
    first = results[0]["cocs"][:common]
    return all(r["cocs"][:common] == first for r in results[1:])
