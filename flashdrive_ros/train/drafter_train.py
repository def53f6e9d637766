"""Supervised drafter training on cached target features (target frozen).

The drafter (DFlash or EAGLE-3) reuses the target's frozen `embed_tokens` and `lm_head`; only
its own weights learn. Cross-entropy on the K - 1 drafted positions of each block: DFlash
drafts them in one forward from [anchor, masks]; the EAGLE-3 chain is fed the known tokens
with its own hidden states (training-time test), so its leading correct drafts are those of
its greedy chain. With several block sizes, each step draws one (DFlash); the EAGLE-3 chain,
causal, always trains at the largest. The metric reported besides the loss is the block
acceptance length (1 + leading correct drafts, as greedy verification would accept) on
held-out rows, per block size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from flashdrive_ros.model.drafter_file import AnyDrafter
from flashdrive_ros.model.eagle_drafter import EagleDrafter
from flashdrive_ros.train.drafter_data import IGNORE, DraftBatch, DraftCorpus, sample_blocks
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.schedule import Progress

Autocast = Callable[[], contextlib.AbstractContextManager]


def block_filler_id(drafter: AnyDrafter) -> int:
    """Block ids after the anchor: the DFlash mask token (id = vocabulary size); the EAGLE-3
    chain reads only the anchor, the same id serves."""
    return drafter.vocab_size


def draft_logits(drafter: AnyDrafter, batch: DraftBatch, embed_tokens: nn.Embedding,
                 lm_head: nn.Module) -> torch.Tensor:
    """Teacher-forced draft logits [B, K - 1, V]."""
    positions = batch.positions_for(drafter.cfg.rotary)
    if isinstance(drafter, EagleDrafter):
        return drafter.teacher_forced_logits(batch.context, batch.context_ids,
                                             batch.block_ids[:, 0], batch.labels, positions,
                                             embed_tokens, lm_head, batch.context_mask)
    return drafter.propose_logits(batch.context, batch.block_ids, positions, embed_tokens,
                                  lm_head, batch.context_mask)


def block_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE)


def acceptance_length(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[B]: 1 + the number of leading drafts equal to the labels (ignored labels stop it)."""
    hit = (logits.argmax(-1) == labels) & (labels != IGNORE)
    return 1 + hit.long().cumprod(dim=1).sum(dim=1)


def draft_batch(drafter: AnyDrafter, corpus: DraftCorpus, rows: torch.Tensor, block_size: int,
                generator: torch.Generator) -> DraftBatch:
    return sample_blocks(corpus, rows, block_size, block_filler_id(drafter), generator,
                         drafter.cfg.context_len)


@torch.no_grad()
def evaluate_drafter(drafter: AnyDrafter, corpus: DraftCorpus, rows: torch.Tensor,
                     embed_tokens: nn.Embedding, lm_head: nn.Module, seed: int,
                     autocast: Autocast, block_size: int | None = None, repeats: int = 4,
                     batch_size: int = 256) -> dict[str, float]:
    drafter.eval()
    block_size = block_size or drafter.cfg.block_size
    gen = torch.Generator(device=corpus.ids.device).manual_seed(seed)
    losses, accepted = [], []
    for _ in range(repeats):
        for start in range(0, len(rows), batch_size):
            batch = draft_batch(drafter, corpus, rows[start:start + batch_size], block_size,
                                gen)
            with autocast():
                logits = draft_logits(drafter, batch, embed_tokens, lm_head)
            losses.append(float(block_loss(logits, batch.labels)))
            accepted.append(acceptance_length(logits, batch.labels).float())
    drafter.train()
    return {"loss": sum(losses) / max(len(losses), 1),
            "accept_len": float(torch.cat(accepted).mean()) if accepted else 0.0}


def train_drafter(drafter: AnyDrafter, corpus: DraftCorpus, train_rows: torch.Tensor,
                  eval_rows: torch.Tensor, embed_tokens: nn.Embedding, lm_head: nn.Module,
                  steps: int, batch_size: int, lr: float, seed: int, log: TrainLog,
                  stage: str, autocast: Autocast, seconds: float | None = None,
                  log_every: int = 50, block_sizes: tuple[int, ...] | None = None
                  ) -> dict[str, float]:
    """Returns {"steps", "first_loss", "final_loss", "eval_loss", "eval_accept_len"} (eval at
    the config's block size) and "eval_accept_len_block{K}" for every K in block_sizes."""
    device = corpus.ids.device
    sizes = tuple(block_sizes or (drafter.cfg.block_size,))
    sizes_for_steps = (max(sizes),) if isinstance(drafter, EagleDrafter) else sizes
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
        size = sizes_for_steps[int(torch.randint(len(sizes_for_steps), (1,), generator=gen,
                                                 device=device))]
        batch = draft_batch(drafter, corpus, train_rows.to(device)[pick], size, gen)
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
            log.write(stage, step, loss=last, accept_len=acc, block=size,
                      lr=opt.param_groups[0]["lr"])
    out = {"steps": progress.step, "first_loss": first, "final_loss": last}
    for size in dict.fromkeys((drafter.cfg.block_size, *sizes)):
        metrics = evaluate_drafter(drafter, corpus, eval_rows, embed_tokens, lm_head, seed + 1,
                                   autocast, size)
        log.write(f"{stage}_eval", progress.step, block=size, loss=metrics["loss"],
                  accept_len=metrics["accept_len"])
        if size == drafter.cfg.block_size:
            out.update(eval_loss=metrics["loss"], eval_accept_len=metrics["accept_len"])
        out[f"eval_accept_len_block{size}"] = metrics["accept_len"]
    return out
