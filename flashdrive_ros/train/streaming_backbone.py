"""Streaming-aware fine-tuning of the whole model (vision encoder, backbone, lm_head, expert).

Each optimizer step draws `streaming_sequences` sequences of L consecutive windows (L drawn
uniformly from [min_windows, max_windows], one L per step) and `full_prefill_windows` single
windows. A sequence streams through the engine's prefill without gradients up to its last
window; that window is recomputed as streaming inference recomputes it, with gradients,
reading the reused KV detached (`StreamingRollout`). A single window is a full prefill. Both
get the same loss: CoC next-token cross-entropy on the ground-truth CoC written after the
prompt, plus flow matching of the action expert reading that cache (one noise draw per row).
The loss is the mean over all rows of the step.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.train.dataset import IGNORE, TrainSet
from flashdrive_ros.train.decision_focus import PLAIN, DecisionFocus
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.schedule import Progress
from flashdrive_ros.train.streaming_rollout import StreamedWindow, StreamingRollout
from flashdrive_ros.train.streaming_tune import sequence_ends
from flashdrive_ros.train.flow_matching_loss import flow_matching_loss
from flashdrive_ros.train.target_losses import coc_loss

Autocast = Callable[[], contextlib.AbstractContextManager]


@dataclass(frozen=True)
class BackboneStreamingConfig:
    """Sizes of the streaming-aware stage; it stops at `steps` or its time share.

    eval_length: the window count of the held-out streaming sequences.
    """

    steps: int = 100_000
    streaming_sequences: int = 32
    full_prefill_windows: int = 32
    min_windows: int = 2
    max_windows: int = 24
    lr: float = 1e-4
    weight_decay: float = 0.01
    flow_weight: float = 1.0
    train_vision: bool = True
    eval_rows: int = 128
    eval_length: int = 16
    eval_batch: int = 32
    log_every: int = 10

    def __post_init__(self) -> None:
        counts = {"steps": self.steps, "eval_rows": self.eval_rows,
                  "eval_batch": self.eval_batch, "log_every": self.log_every}
        for name, value in counts.items():
            if value < 1:
                raise ValueError(f"BackboneStreamingConfig.{name} must be >= 1, got {value}")
        if min(self.streaming_sequences, self.full_prefill_windows) < 0 or \
                self.streaming_sequences + self.full_prefill_windows < 1:
            raise ValueError("streaming_sequences and full_prefill_windows must be >= 0 and "
                             "not both 0")
        if not 2 <= self.min_windows <= self.max_windows:
            raise ValueError(f"need 2 <= min_windows <= max_windows, got {self.min_windows}, "
                             f"{self.max_windows}")
        if self.eval_length < 2:
            raise ValueError(f"eval_length must be >= 2, got {self.eval_length}")
        if not (self.lr > 0 and self.weight_decay >= 0 and self.flow_weight >= 0):
            raise ValueError("lr must be > 0, weight_decay and flow_weight >= 0")

    @property
    def full_prefill_share(self) -> float:
        return self.full_prefill_windows / (self.streaming_sequences
                                            + self.full_prefill_windows)


def window_losses(model: AlpamayoModel, window: StreamedWindow, actions: torch.Tensor,
                  generator: torch.Generator, weights: torch.Tensor | None = None
                  ) -> dict[str, torch.Tensor]:
    """CoC cross-entropy and token accuracy over the CoC, flow-matching loss of the expert
    reading the window's cache; actions: [B, N_wp, 2] normalized targets; weights: [B, W]
    CoC loss weights per CoC column (None: plain mean)."""
    hidden = torch.cat([window.prompt_last[:, None], window.coc_hidden[:, :-1]], dim=1)
    width = window.coc_ids.shape[1]
    valid = torch.arange(width, device=hidden.device)[None, :] < window.coc_lens[:, None]
    labels = window.coc_ids.masked_fill(~valid, IGNORE)  # labels: [B, W]
    ce, acc = coc_loss(model, hidden, labels, weights)
    fm = flow_matching_loss(model, window.cache, actions, window.prefix_lens, generator)
    return {"coc_loss": ce, "coc_acc": acc, "flow_loss": fm}


class SequenceSampler:
    """Rows that end a run of L consecutive windows of one drive, per L."""

    def __init__(self, data: TrainSet, lengths: range) -> None:
        every = torch.arange(len(data))
        self.ends = {length: sequence_ends(data, every, length) for length in lengths}
        self.ends = {length: ends for length, ends in self.ends.items() if len(ends)}
        if not self.ends:
            raise ValueError(f"no drive has {lengths.start} consecutive windows")
        self.lengths = sorted(self.ends)

    def draw(self, count: int, length: int, generator: torch.Generator) -> torch.Tensor:
        ends = self.ends[length]
        return ends[torch.randint(len(ends), (count,), generator=generator)]

    def draw_length(self, generator: torch.Generator) -> int:
        return self.lengths[int(torch.randint(len(self.lengths), (1,), generator=generator))]


def _step_losses(model: AlpamayoModel, rollout: StreamingRollout, ends: torch.Tensor,
                 length: int, generator: torch.Generator, autocast: Autocast,
                 focus: DecisionFocus = PLAIN) -> dict[str, torch.Tensor]:
    """focus: the CoC loss weights of the deciding tokens and the side words."""
    with autocast():
        window = rollout.stream(ends, length)
        actions = rollout.data.actions[ends.cpu()].to(rollout.device)
        width = window.coc_ids.shape[1]
        weights = None if focus.plain_loss else focus.loss_weights(
            rollout.data.decisive_mask(ends, width).to(rollout.device),
            rollout.data.side_mask(ends, width).to(rollout.device))
        return window_losses(model, window, actions, generator, weights)


@torch.no_grad()
def held_out_losses(model: AlpamayoModel, rollout: StreamingRollout, cfg: BackboneStreamingConfig,
                    seed: int, autocast: Autocast) -> dict[str, float]:
    """Mean losses of full-prefill windows (`full_*`) and of `eval_length`-window streaming
    sequences (`streaming_*`) at fixed held-out rows and noise."""
    pick = torch.Generator().manual_seed(seed)
    noise = torch.Generator(device=rollout.device).manual_seed(seed)
    out: dict[str, float] = {}
    for prefix, lengths in (("full", range(1, 2)),
                            ("streaming", range(cfg.eval_length, cfg.eval_length + 1))):
        sampler = SequenceSampler(rollout.data, lengths)
        length = sampler.lengths[0]
        totals: dict[str, float] = {}
        done = 0
        while done < cfg.eval_rows:
            count = min(cfg.eval_batch, cfg.eval_rows - done)
            ends = sampler.draw(count, length, pick)
            for name, value in _step_losses(model, rollout, ends, length, noise,
                                            autocast).items():
                totals[name] = totals.get(name, 0.0) + float(value) * count
            done += count
        out.update({f"{prefix}_{name}": value / done for name, value in totals.items()})
    return out


def trainable_parameters(model: AlpamayoModel, train_vision: bool
                         ) -> list[torch.nn.Parameter]:
    """Sets requires_grad on every parameter but the vision encoder's unless `train_vision`;
    returns those that train."""
    for p in model.parameters():
        p.requires_grad_(True)
    for p in model.vlm.visual.parameters():
        p.requires_grad_(train_vision)
    return [p for p in model.parameters() if p.requires_grad]


def train_backbone_streaming(model: AlpamayoModel, data: TrainSet, eval_data: TrainSet,
                             cfg: BackboneStreamingConfig, seconds: float | None, seed: int,
                             log: TrainLog, device: torch.device, autocast: Autocast,
                             cache_dtype: torch.dtype, focus: DecisionFocus = PLAIN
                             ) -> dict[str, float]:
    """focus: the CoC loss weights of training steps (held-out losses stay plain means)."""
    rollout = StreamingRollout(model, data, cache_dtype, device)
    eval_rollout = StreamingRollout(model, eval_data, cache_dtype, device)
    lengths = range(cfg.min_windows, cfg.max_windows + 1)
    sampler = SequenceSampler(data, lengths)
    singles = SequenceSampler(data, range(1, 2))
    before = held_out_losses(model, eval_rollout, cfg, seed + 1, autocast)
    log.write("stream_backbone_eval", 0, **before)
    params = trainable_parameters(model, cfg.train_vision)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                            betas=(0.9, 0.95))
    pick = torch.Generator().manual_seed(seed)
    noise = torch.Generator(device=device).manual_seed(seed)
    progress = Progress(cfg.steps, seconds)
    rows_per_step = cfg.streaming_sequences + cfg.full_prefill_windows
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    sequences = windows_prefilled = 0
    started = time.monotonic()
    model.train()
    while not progress.done():
        for group in opt.param_groups:
            group["lr"] = cfg.lr * progress.lr_factor()
        opt.zero_grad(set_to_none=True)
        length = sampler.draw_length(pick)
        record: dict[str, float] = {}
        parts = (("stream", cfg.streaming_sequences, sampler, length),
                 ("full", cfg.full_prefill_windows, singles, 1))
        for name, count, source, run in parts:
            if count == 0:
                continue
            losses = _step_losses(model, rollout, source.draw(count, run, pick), run, noise,
                                  autocast, focus)
            loss = losses["coc_loss"] + cfg.flow_weight * losses["flow_loss"]
            (loss * (count / rows_per_step)).backward()
            record.update({f"{name}_{k}": float(v.detach()) for k, v in losses.items()})
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step = progress.step
        progress.step += 1
        sequences += cfg.streaming_sequences
        windows_prefilled += cfg.streaming_sequences * length + cfg.full_prefill_windows
        if step % cfg.log_every == 0 or progress.done():
            last = dict(record)
            first = first or dict(last)
            elapsed = max(time.monotonic() - started, 1e-9)
            log.write("stream_backbone", step, **last, windows=length,
                      grad_norm=float(norm), lr=opt.param_groups[0]["lr"],
                      sequences_per_s=round(sequences / elapsed, 1))
    model.eval()
    after = held_out_losses(model, eval_rollout, cfg, seed + 1, autocast)
    log.write("stream_backbone_eval", progress.step, **after)
    for p in model.parameters():
        p.requires_grad_(True)
    if not all(math.isfinite(v) for v in after.values()):
        raise FloatingPointError(f"held-out losses after the streaming-aware stage are not "
                                 f"finite: {after}")
    return {"steps": progress.step, "streaming_sequences": sequences,
            "full_prefill_windows": progress.step * cfg.full_prefill_windows,
            "windows_prefilled": windows_prefilled,
            "full_prefill_share": cfg.full_prefill_share,
            "seconds": round(time.monotonic() - started, 1),
            **{f"first_{k}": v for k, v in first.items()},
            **{f"final_{k}": v for k, v in last.items()},
            **{f"eval_before_{k}": v for k, v in before.items()},
            **{f"eval_after_{k}": v for k, v in after.items()}}
