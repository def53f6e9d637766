"""Supervised DFlash drafter training on cached target features (target frozen).

The drafter reuses the target's frozen `embed_tokens` and `lm_head`; only its own weights
learn. Cross-entropy on the K - 1 drafted positions of each block. The metric reported
besides the loss is the block acceptance length (1 + leading correct drafts, as greedy
verification would accept) on held-out rows.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.train.drafter_data import IGNORE, DraftBatch, DraftCorpus, sample_blocks
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.schedule import Progress


def draft_logits(drafter: Drafter, batch: DraftBatch, embed_tokens: nn.Embedding,
                 lm_head: nn.Module) -> torch.Tensor:
    positions = batch.flat_positions if drafter.cfg.rotary == "flat" else batch.mrope_positions
    return drafter.propose_logits(batch.context, batch.block_ids, positions, embed_tokens,
                                  lm_head)  # [B, K - 1, V]


def block_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE)


def acceptance_length(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[B]: 1 + the number of leading drafts equal to the labels (ignored labels stop it)."""
    hit = (logits.argmax(-1) == labels) & (labels != IGNORE)
    return 1 + hit.long().cumprod(dim=1).sum(dim=1)


@torch.no_grad()
def evaluate_drafter(drafter: Drafter, corpus: DraftCorpus, rows: torch.Tensor,
                     embed_tokens: nn.Embedding, lm_head: nn.Module, seed: int,
                     autocast: Callable[[], contextlib.AbstractContextManager],
                     repeats: int = 4, batch_size: int = 256) -> dict[str, float]:
    drafter.eval()
    gen = torch.Generator(device=corpus.ids.device).manual_seed(seed)
    losses, accepted = [], []
    for _ in range(repeats):
        for start in range(0, len(rows), batch_size):
            batch = sample_blocks(corpus, rows[start:start + batch_size],
                                  drafter.cfg.block_size, drafter.mask_token_id, gen)
            with autocast():
                logits = draft_logits(drafter, batch, embed_tokens, lm_head)
            losses.append(float(block_loss(logits, batch.labels)))
            accepted.append(acceptance_length(logits, batch.labels).float())
    drafter.train()
    return {"loss": sum(losses) / max(len(losses), 1),
            "accept_len": float(torch.cat(accepted).mean()) if accepted else 0.0}


def train_drafter(drafter: Drafter, corpus: DraftCorpus, train_rows: torch.Tensor,
                  eval_rows: torch.Tensor, embed_tokens: nn.Embedding, lm_head: nn.Module,
                  steps: int, batch_size: int, lr: float, seed: int, log: TrainLog,
                  stage: str, autocast: Callable[[], contextlib.AbstractContextManager],
                  seconds: float | None = None, log_every: int = 50) -> dict[str, float]:
    """Returns {"first_loss", "final_loss", "eval_loss", "eval_accept_len"}."""
    device = corpus.ids.device
    gen = torch.Generator(device=device).manual_seed(seed)
    opt = torch.optim.AdamW(drafter.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    progress = Progress(steps, seconds)
    drafter.train()
    first = last = float("nan")
    while not progress.done():
        for group in opt.param_groups:
            group["lr"] = lr * progress.lr_factor()
        step = progress.step
        pick = torch.randint(len(train_rows), (batch_size,), generator=gen, device=device)
        batch = sample_blocks(corpus, train_rows.to(device)[pick], drafter.cfg.block_size,
                              drafter.mask_token_id, gen)
        with autocast():
            logits = draft_logits(drafter, batch, embed_tokens, lm_head)
        loss = block_loss(logits, batch.labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        progress.step += 1
        last = float(loss.detach())
        first = last if step == 0 else first
        if step % log_every == 0 or progress.done():
            acc = float(acceptance_length(logits.detach(), batch.labels).float().mean())
            log.write(stage, step, loss=last, accept_len=acc, lr=opt.param_groups[0]["lr"])
    metrics = evaluate_drafter(drafter, corpus, eval_rows, embed_tokens, lm_head, seed + 1,
                               autocast)
    log.write(f"{stage}_eval", progress.step, loss=metrics["loss"],
              accept_len=metrics["accept_len"])
    return {"steps": progress.step, "first_loss": first, "final_loss": last,
            "eval_loss": metrics["loss"], "eval_accept_len": metrics["accept_len"]}
