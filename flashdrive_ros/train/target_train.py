"""Target training: CoC next-token loss plus flow matching on the normalized actions.

One teacher-forced backbone pass over prompt + ground-truth CoC (ending `<|cot_end|>`
`<|traj_future_start|>`) gives the CoC logits and the KV the action expert reads; the expert
sees exactly prompt + CoC + `<|traj_future_start|>` of its own window. Flow matching:
x0 ~ N(0, I), x1 = data actions, t ~ U(0, 1), x_t = t x1 + (1 - t) x0, target v = x1 - x0.
`DecisionFocus` weighs the CoC tokens that decide the decision and draws rare decisions more
often; the held-out metrics add the share of windows whose deciding tokens are all right
(`decision_acc`, also per decision).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.flow import interpolate
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.train.batched_expert import batched_velocity
from flashdrive_ros.sim.labels import DECISIONS
from flashdrive_ros.train.dataset import IGNORE, TrainBatch, TrainSet
from flashdrive_ros.train.decision_focus import PLAIN, DecisionFocus, row_weights
from flashdrive_ros.train.grad_cache import GradKVCache
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.schedule import Progress

Autocast = Callable[[], contextlib.AbstractContextManager]


def run_backbone(model: AlpamayoModel, batch: TrainBatch, image_token_id: int,
                 cache_dtype: torch.dtype, grad: bool = True):
    """Teacher-forced pass over the batch rows -> (BackboneOutput, cache holding their KV)."""
    vlm = model.vlm
    cfg = model.cfg.text
    embeds, visual_mask, deepstack = vlm.embed(batch.input_ids, batch.pixel_patches,
                                               batch.grid_thw, image_token_id)
    b, t = batch.input_ids.shape
    cache_cls = GradKVCache if grad else KVCache
    cache = cache_cls(cfg.num_hidden_layers, b, cfg.num_key_value_heads, t, cfg.head_dim,
                      dtype=cache_dtype, device=batch.input_ids.device)
    out = vlm.language_model(embeds, batch.positions, cache,
                             torch.arange(t, device=batch.input_ids.device),
                             visual_mask=visual_mask, deepstack=deepstack)
    return out, cache


def coc_loss(model: AlpamayoModel, hidden: torch.Tensor, labels: torch.Tensor,
             weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy, token accuracy) over the CoC positions; labels: [B, T]; weights:
    [B, T] per-position loss weights (None: plain mean), the loss is their weighted mean."""
    keep = labels != IGNORE
    logits = model.vlm.logits(hidden[keep]).float()  # logits: [N_coc, V]
    target = labels[keep]
    acc = (logits.argmax(-1) == target).float().mean()
    if weights is None:
        return F.cross_entropy(logits, target), acc
    w = weights[keep].float()  # w: [N_coc]
    return (F.cross_entropy(logits, target, reduction="none") * w).sum() / w.sum(), acc


def decision_weights(decisive: torch.Tensor, token_weight: float) -> torch.Tensor:
    """decisive: [B, T] bool -> [B, T] float: token_weight there, 1 elsewhere."""
    return 1.0 + (token_weight - 1.0) * decisive.float()


def decision_hits(model: AlpamayoModel, hidden: torch.Tensor, labels: torch.Tensor,
                  decisive: torch.Tensor) -> torch.Tensor:
    """[B] bool: every deciding CoC token of the row is the argmax of its logits."""
    mask = decisive & (labels != IGNORE)
    wrong = torch.zeros(mask.shape, dtype=torch.bool, device=mask.device)
    wrong[mask] = model.vlm.logits(hidden[mask]).argmax(-1) != labels[mask]
    return ~wrong.any(dim=1)


def flow_loss(model: AlpamayoModel, cache, batch: TrainBatch, generator: torch.Generator
              ) -> torch.Tensor:
    return flow_matching_loss(model, cache, batch.actions, batch.seq_lens, generator)


def flow_matching_loss(model: AlpamayoModel, cache, actions: torch.Tensor,
                       prefix_lens: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """actions: [B, N_wp, 2] normalized targets; row b's expert reads cache row b's first
    prefix_lens[b] slots ([B] long); one noise draw and time per row."""
    x1 = actions
    x0 = torch.randn(x1.shape, generator=generator, device=x1.device, dtype=x1.dtype)
    t = torch.rand(x1.shape[0], generator=generator, device=x1.device, dtype=x1.dtype)
    x_t, target = interpolate(x1, x0, t)
    v = batched_velocity(model.expert, model.action_in_proj, model.action_out_proj, x_t, t,
                         cache, prefix_lens)
    return F.mse_loss(v.float(), target.float())


def target_step_losses(model: AlpamayoModel, batch: TrainBatch, image_token_id: int,
                       cache_dtype: torch.dtype, generator: torch.Generator, grad: bool = True,
                       token_weight: float = 1.0) -> dict[str, torch.Tensor]:
    """coc_loss weighs the deciding tokens `token_weight` times; decision_hit: [B] bool."""
    out, cache = run_backbone(model, batch, image_token_id, cache_dtype, grad)
    weights = None if token_weight == 1.0 else decision_weights(batch.decisive, token_weight)
    ce, acc = coc_loss(model, out.hidden, batch.labels, weights)
    with torch.no_grad():
        hits = decision_hits(model, out.hidden, batch.labels, batch.decisive)
    fm = flow_loss(model, cache, batch, generator)
    return {"coc_loss": ce, "coc_acc": acc, "flow_loss": fm, "decision_hit": hits}


@torch.no_grad()
def evaluate_target(model: AlpamayoModel, data: TrainSet, rows: torch.Tensor,
                    device: torch.device, autocast: Autocast, cache_dtype: torch.dtype,
                    seed: int, batch_size: int = 32) -> dict[str, float]:
    """Plain (unweighted) mean losses, token accuracy, decision_acc and decision_acc_<name>
    per decision present among `rows`."""
    model.eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    totals: dict[str, float] = {}
    hits = []
    count = 0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        batch = data.batch(chunk, device)
        with autocast():
            losses = target_step_losses(model, batch, data.image_token_id, cache_dtype, gen,
                                        grad=False)
        hits.append(losses.pop("decision_hit").cpu())
        for k, v in losses.items():
            totals[k] = totals.get(k, 0.0) + float(v) * len(chunk)
        count += len(chunk)
    model.train()
    metrics = {k: v / max(count, 1) for k, v in totals.items()}
    if hits:
        hit = torch.cat(hits).float()
        decision = torch.as_tensor(data.decision[rows.cpu().numpy()])
        metrics["decision_acc"] = float(hit.mean())
        for i, name in enumerate(DECISIONS):
            if bool((decision == i).any()):
                metrics[f"decision_acc_{name}"] = float(hit[decision == i].mean())
    return metrics


def train_target(model: AlpamayoModel, data: TrainSet, eval_data: TrainSet, steps: int,
                 seconds: float | None, batch_size: int,
                 lr: float, seed: int, log: TrainLog, device: torch.device,
                 autocast: Autocast, cache_dtype: torch.dtype, flow_weight: float = 1.0,
                 eval_rows: int = 512, log_every: int = 25,
                 focus: DecisionFocus = PLAIN) -> dict[str, float]:
    """Rows are drawn with `row_weights(decision, focus.balance)`; eval rows uniformly."""
    gen = torch.Generator(device=device).manual_seed(seed)
    pick_gen = torch.Generator().manual_seed(seed)
    draw_weights = row_weights(data.decision, focus.balance)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.05, betas=(0.9, 0.95))
    progress = Progress(steps, seconds)
    model.train()
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    while not progress.done():
        for group in opt.param_groups:
            group["lr"] = lr * progress.lr_factor()
        rows = (torch.randint(len(data), (batch_size,), generator=pick_gen)
                if focus.balance == 0.0 else
                torch.multinomial(draw_weights, batch_size, replacement=True,
                                  generator=pick_gen))
        batch = data.batch(rows, device)
        with autocast():
            losses = target_step_losses(model, batch, data.image_token_id, cache_dtype, gen,
                                        token_weight=focus.token_weight)
        hit = losses.pop("decision_hit")
        loss = losses["coc_loss"] + flow_weight * losses["flow_loss"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step = progress.step
        progress.step += 1
        if step % log_every == 0 or progress.done():
            last = {k: float(v.detach()) for k, v in losses.items()}
            last["decision_acc"] = float(hit.float().mean())
            first = first or dict(last)
            log.write("target", step, **last, grad_norm=float(norm),
                      lr=opt.param_groups[0]["lr"])
    rows = torch.randperm(len(eval_data), generator=pick_gen)[:eval_rows]
    metrics = evaluate_target(model, eval_data, rows, device, autocast, cache_dtype, seed + 1)
    log.write("target_eval", progress.step, **metrics)
    model.eval()
    return {"steps": progress.step, **{f"first_{k}": v for k, v in first.items()},
            **{f"final_{k}": v for k, v in last.items()},
            **{f"eval_{k}": v for k, v in metrics.items()}}
