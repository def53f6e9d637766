"""Action-aware RL post-training of a drafter (GRPO), the target frozen.

Each step: blocks (one random anchor per corpus row) where the greedy drafter gets at least
one position wrong; per block `rollouts` rollouts, stochastic only at those positions
(rl_rollouts.py); per rollout a contaminated CoC (the target's greedy CoC with the rollout's
tokens at its first `contaminate_first` rejected positions) whose trajectory the target's
expert plans from the same noise as the greedy CoC's (action_reward.py). Reward =
-w_traj * mean squared waypoint distance (m^2) to the greedy CoC's trajectory
+ w_text * share of stochastic positions drawn right. Loss = group-relative policy gradient on
the stochastic positions + beta * KL(policy || frozen SFT drafter) on the anchor set (grpo.py:
"static" or "policy"). One on-policy update per batch, so no ratio clipping.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from flashdrive_ros.engine.flow_cached import FlowSchedule
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.drafter_file import AnyDrafter
from flashdrive_ros.train.action_reward import coc_trajectories, trajectory_error
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.drafter_data import DraftBatch, DraftCorpus
from flashdrive_ros.train.drafter_train import draft_batch, draft_logits
from flashdrive_ros.train.grpo import (
    ANCHORS,
    anchor_positions,
    group_advantages,
    kl_to_reference,
    policy_loss,
)
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.rl_rollouts import (
    contaminated_cocs,
    first_rejected,
    rejected_positions,
    sample_rollouts,
    token_match,
    wrong_positions,
)
from flashdrive_ros.train.schedule import Progress

Autocast = Callable[[], contextlib.AbstractContextManager]


@dataclass
class RLConfig:
    anchor: str = "static"
    rollouts: int = 5
    contaminate_first: int = 2
    w_traj: float = 1.0
    w_text: float = 1.0
    beta: float = 0.02
    lr: float = 1e-4
    prompts: int = 16
    candidates: int = 64
    steps: int = 400
    block_sizes: tuple[int, ...] = (8,)

    def __post_init__(self) -> None:
        self.block_sizes = tuple(self.block_sizes)
        if self.anchor not in ANCHORS:
            raise ValueError(f"anchor must be one of {ANCHORS}, got {self.anchor!r}")
        if self.rollouts < 2:
            raise ValueError("group-relative advantages need rollouts >= 2")
        if min(self.contaminate_first, self.prompts, self.steps) < 1:
            raise ValueError("contaminate_first, prompts and steps must be >= 1")
        if self.candidates < self.prompts:
            raise ValueError("candidates must be >= prompts")
        if min(self.w_traj, self.w_text, self.beta) < 0 or self.lr <= 0:
            raise ValueError("reward weights and beta must be >= 0, lr > 0")
        if not self.block_sizes or min(self.block_sizes) < 2:
            raise ValueError("block_sizes must be >= 2")


@dataclass
class RLTarget:
    """What the rewards read: the frozen target, the training windows behind the corpus rows,
    the flow schedule, the cache dtype and the special token ids."""

    model: AlpamayoModel
    data: TrainSet
    schedule: FlowSchedule
    cache_dtype: torch.dtype
    cot_end_id: int
    future_start_id: int


def rollout_sequences(corpus: DraftCorpus, batch: DraftBatch, tokens: torch.Tensor,
                      substitute: torch.Tensor, target: RLTarget) -> list[list[list[int]]]:
    """Per block: greedy CoC then the contaminated CoC of each rollout."""
    stored = corpus.context_len
    out = []
    for b in range(tokens.shape[0]):
        row = int(batch.rows[b])
        coc = corpus.ids[row, stored:int(corpus.lengths[row])].tolist()
        block_start = int(batch.anchors[b]) - stored + 1
        out.append(contaminated_cocs(coc, block_start, batch.labels[b].tolist(), tokens[b],
                                     substitute[b], target.cot_end_id, target.future_start_id))
    return out


def pick_blocks(policy: AnyDrafter, corpus: DraftCorpus, rows: torch.Tensor, cfg: RLConfig,
                block_size: int, embed_tokens: nn.Embedding, lm_head: nn.Module,
                generator: torch.Generator, autocast: Autocast) -> DraftBatch | None:
    """Up to cfg.prompts blocks with a wrong greedy draft among cfg.candidates random ones."""
    device = corpus.ids.device
    pick = rows.to(device)[torch.randint(len(rows), (cfg.candidates,), generator=generator,
                                         device=device)]
    batch = draft_batch(policy, corpus, pick, block_size, generator)
    with torch.no_grad(), autocast():
        logits = draft_logits(policy, batch, embed_tokens, lm_head)
    keep = wrong_positions(logits, batch.labels).any(-1).nonzero()[:, 0][:cfg.prompts]
    if keep.numel() == 0:
        return None
    return batch.select(keep)


def rl_step(policy: AnyDrafter, reference: AnyDrafter, corpus: DraftCorpus, batch: DraftBatch,
            cfg: RLConfig, target: RLTarget, embed_tokens: nn.Embedding, lm_head: nn.Module,
            generator: torch.Generator, autocast: Autocast) -> tuple[torch.Tensor, dict]:
    """The loss of one batch of blocks and what to log."""
    with autocast():
        logits = draft_logits(policy, batch, embed_tokens, lm_head).float()  # [B, P, V]
    with torch.no_grad(), autocast():
        ref_logits = draft_logits(reference, batch, embed_tokens, lm_head).float()
    labels = batch.labels
    stochastic = wrong_positions(logits.detach(), labels)
    tokens = sample_rollouts(torch.softmax(logits.detach(), -1), labels, stochastic,
                             cfg.rollouts, generator)  # tokens: [B, R, P]
    substitute = first_rejected(rejected_positions(tokens, labels), cfg.contaminate_first)
    sequences = rollout_sequences(corpus, batch, tokens, substitute, target)
    windows = corpus.windows[batch.rows]
    a = target.model.cfg.action
    noise = torch.randn(windows.shape[0], a.num_waypoints, a.action_dim, generator=generator,
                        device=generator.device).to(labels.device)
    with autocast():
        xy = coc_trajectories(target.model, target.data, windows, sequences, noise,
                              target.schedule, target.cache_dtype, target.future_start_id)
    error = torch.where(substitute.any(-1), trajectory_error(xy), torch.zeros(()).to(xy))
    match = token_match(tokens, labels, stochastic)
    rewards = -cfg.w_traj * error + cfg.w_text * match  # rewards: [B, R]
    advantages = group_advantages(rewards)
    anchors = anchor_positions(cfg.anchor, ref_logits, logits.detach(), labels)
    kl = kl_to_reference(logits, ref_logits, anchors)
    loss = policy_loss(logits, tokens, stochastic, advantages) + cfg.beta * kl
    stats = {"reward": float(rewards.mean()), "traj_err_m2": float(error.mean()),
             "match": float(match.mean()), "kl": float(kl.detach()),
             "stochastic": float(stochastic.float().sum(-1).mean()),
             "anchors": float(anchors.float().sum(-1).mean())}
    return loss, stats


def rl_post_train(sft: AnyDrafter, corpus: DraftCorpus, train_rows: torch.Tensor,
                  target: RLTarget, embed_tokens: nn.Embedding, lm_head: nn.Module,
                  cfg: RLConfig, seed: int, log: TrainLog, stage: str, autocast: Autocast,
                  seconds: float | None = None, log_every: int = 10
                  ) -> tuple[AnyDrafter, dict[str, float]]:
    """A copy of `sft` post-trained by RL (sft itself is the frozen reference)."""
    if corpus.windows is None:
        raise ValueError("RL needs the corpus rows' windows (build_draft_corpus keeps them)")
    device = corpus.ids.device
    reference = sft.eval().requires_grad_(False)
    policy = copy.deepcopy(sft).requires_grad_(True).train()
    gen = torch.Generator(device=device).manual_seed(seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=0.0,
                            betas=(0.9, 0.95))
    progress = Progress(cfg.steps, seconds)
    totals: dict[str, float] = {}
    updates = skipped = 0
    while not progress.done():
        step = progress.step
        progress.step += 1
        size = cfg.block_sizes[int(torch.randint(len(cfg.block_sizes), (1,), generator=gen,
                                                 device=device))]
        batch = pick_blocks(policy, corpus, train_rows, cfg, size, embed_tokens, lm_head, gen,
                            autocast)
        if batch is None:
            skipped += 1
            continue
        for group in opt.param_groups:
            group["lr"] = cfg.lr * progress.lr_factor()
        loss, stats = rl_step(policy, reference, corpus, batch, cfg, target, embed_tokens,
                              lm_head, gen, autocast)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        opt.step()
        updates += 1
        for name, value in stats.items():
            totals[name] = totals.get(name, 0.0) + value
        if step % log_every == 0 or progress.done():
            log.write(stage, step, loss=float(loss.detach()), block=size, **stats)
    policy.eval()
    means = {f"mean_{k}": v / max(updates, 1) for k, v in totals.items()}
    return policy, {"steps": progress.step, "updates": updates, "skipped": skipped, **means}
