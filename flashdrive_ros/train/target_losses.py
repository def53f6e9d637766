"""The target stage's losses on a batch: CoC next-token loss plus flow matching on the
normalized actions.

One teacher-forced backbone pass over prompt + ground-truth CoC (ending `<|cot_end|>`
`<|traj_future_start|>`) gives the CoC logits and the KV the action expert reads; the expert
sees exactly prompt + CoC + `<|traj_future_start|>` of its own window. Flow matching:
x0 ~ N(0, I), x1 = data actions, t ~ U(0, 1), x_t = t x1 + (1 - t) x0, target v = x1 - x0.
`DecisionFocus` weighs the CoC tokens that decide the decision; `decision_hits` tells the
windows whose deciding tokens are all the argmax. With a `SceneReadout` its loss on the
hidden state at the last prompt token joins (train/scene_readout.py). Rows left out of
`trained` add no CoC or flow loss; rows with a blind expert (`expert_blind`) keep the
backbone's whole pass, but their action expert does not read the image slots: their plan has
only the ego history and the CoC (whose keys and values read the cameras) to go on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.train.dataset import IGNORE, TrainBatch
from flashdrive_ros.train.decision_focus import PLAIN, DecisionFocus
from flashdrive_ros.train.flow_matching_loss import flow_matching_loss
from flashdrive_ros.train.grad_cache import GradKVCache
from flashdrive_ros.train.scene_readout import SceneReadout, readout_losses


def merged_grid(grid_thw: torch.Tensor) -> torch.Tensor:
    """grid_thw: [N_img, 3] on the host -> [M, 3]: consecutive images of one size as one row
    of their summed temporal slices. The vision encoder attends within each slice and repeats
    a size's position tables per slice, so its output is the same, with one table per row
    instead of one per image (at batch 32, 512 images)."""
    rows: list[list[int]] = []
    for t, h, w in grid_thw.tolist():
        if rows and rows[-1][1:] == [h, w]:
            rows[-1][0] += t
        else:
            rows.append([t, h, w])
    return torch.tensor(rows, dtype=grid_thw.dtype).reshape(-1, 3)


def run_backbone(model: AlpamayoModel, batch: TrainBatch, image_token_id: int,
                 cache_dtype: torch.dtype, grad: bool = True,
                 output_layers: tuple[int, ...] = ()):
    """Teacher-forced pass over the batch rows -> (BackboneOutput, with the hidden state
    after each decoder layer in `output_layers`; cache holding their KV)."""
    vlm = model.vlm
    cfg = model.cfg.text
    embeds, visual_mask, deepstack = vlm.embed(batch.input_ids, batch.pixel_patches,
                                               merged_grid(batch.grid_thw), image_token_id)
    b, t = batch.input_ids.shape
    cache_cls = GradKVCache if grad else KVCache
    cache = cache_cls(cfg.num_hidden_layers, b, cfg.num_key_value_heads, t, cfg.head_dim,
                      dtype=cache_dtype, device=batch.input_ids.device)
    out = vlm.language_model(embeds, batch.positions, cache,
                             torch.arange(t, device=batch.input_ids.device),
                             visual_mask=visual_mask, deepstack=deepstack,
                             output_layers=output_layers)
    return out, cache


def coc_loss(model: AlpamayoModel, hidden: torch.Tensor, labels: torch.Tensor,
             weights: torch.Tensor | None = None, start: int | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(cross-entropy, token accuracy) over the CoC positions; labels: [B, T]; weights:
    [B, T] per-position loss weights (None: plain mean), the loss is their weighted mean.
    `start`: no label lies before this column; the columns from it on are projected whole
    and masked, which needs no read-back of the label count from the device."""
    if start is not None:
        return _coc_loss_from(model, hidden[:, start:], labels[:, start:],
                              None if weights is None else weights[:, start:])
    keep = labels != IGNORE
    logits = model.vlm.logits(hidden[keep]).float()  # logits: [N_coc, V]
    target = labels[keep]
    acc = (logits.argmax(-1) == target).float().mean()
    if weights is None:
        return F.cross_entropy(logits, target), acc
    w = weights[keep].float()  # w: [N_coc]
    return (F.cross_entropy(logits, target, reduction="none") * w).sum() / w.sum(), acc


def _coc_loss_from(model: AlpamayoModel, hidden: torch.Tensor, labels: torch.Tensor,
                   weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden: [B, W, H]; labels, weights: [B, W]; masked means over the labelled columns."""
    keep = (labels != IGNORE).float()  # keep: [B, W]
    logits = model.vlm.logits(hidden).float()  # logits: [B, W, V]
    target = labels.clamp_min(0)
    acc = ((logits.argmax(-1) == target).float() * keep).sum() / keep.sum().clamp_min(1.0)
    ce = F.cross_entropy(logits.transpose(1, 2), target, reduction="none")  # ce: [B, W]
    w = keep if weights is None else weights.float() * keep
    return (ce * w).sum() / w.sum().clamp_min(1e-6), acc


def decision_hits(model: AlpamayoModel, hidden: torch.Tensor, labels: torch.Tensor,
                  decisive: torch.Tensor, start: int | None = None) -> torch.Tensor:
    """[B] bool: every deciding CoC token of the row is the argmax of its logits; `start`
    as in `coc_loss`."""
    if start is not None:
        mask = decisive[:, start:] & (labels[:, start:] != IGNORE)  # mask: [B, W]
        guess = model.vlm.logits(hidden[:, start:]).argmax(-1)  # guess: [B, W]
        return ~(mask & (guess != labels[:, start:])).any(dim=1)
    mask = decisive & (labels != IGNORE)
    wrong = torch.zeros(mask.shape, dtype=torch.bool, device=mask.device)
    wrong[mask] = model.vlm.logits(hidden[mask]).argmax(-1) != labels[mask]
    return ~wrong.any(dim=1)


def flow_loss(model: AlpamayoModel, cache, batch: TrainBatch, generator: torch.Generator,
              draws: int = 1, trained: torch.Tensor | None = None,
              hidden_slots: torch.Tensor | None = None) -> torch.Tensor:
    return flow_matching_loss(model, cache, batch.actions, batch.seq_lens, generator, draws,
                              batch.seq_bounds, trained, hidden_slots)


def image_slots(batch: TrainBatch, image_token_id: int, rows: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: the image token slots of the windows `rows` ([B] bool) picks."""
    return (batch.input_ids == image_token_id) & rows[:, None]


def target_step_losses(model: AlpamayoModel, batch: TrainBatch, image_token_id: int,
                       cache_dtype: torch.dtype, generator: torch.Generator, grad: bool = True,
                       focus: DecisionFocus = PLAIN, flow_draws: int = 1,
                       readout: SceneReadout | None = None, trained: torch.Tensor | None = None,
                       expert_blind: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """coc_loss weighs the CoC tokens by `focus.loss_weights`; decision_hit: [B] bool; without
    grad also side_hit: [B] bool, every side word of the row is its argmax; with `readout`
    also readout_loss, lamp_hit, gap_hit, motion_hit and bend_hit [B] (`readout_losses`).
    trained: [B] bool, the rows whose CoC and flow losses count (None: all; the readout counts
    every row). expert_blind: [B] bool, the rows whose action expert does not read the image
    slots (None: none)."""
    out, cache = run_backbone(model, batch, image_token_id, cache_dtype, grad)
    weights = focus.loss_weights(batch.decisive, batch.sided)
    if trained is not None:
        rows = trained[:, None].float().expand(batch.labels.shape)  # rows: [B, T]
        weights = rows if weights is None else weights * rows
    ce, acc = coc_loss(model, out.hidden, batch.labels, weights, batch.coc_start)
    with torch.no_grad():
        hits = {"decision_hit": decision_hits(model, out.hidden, batch.labels, batch.decisive,
                                              batch.coc_start)}
        if not grad:
            hits["side_hit"] = decision_hits(model, out.hidden, batch.labels, batch.sided,
                                             batch.coc_start)
    if readout is not None:
        hits |= readout_losses(readout, out.hidden[:, batch.coc_start], batch.scene)
    hidden = None if expert_blind is None else image_slots(batch, image_token_id, expert_blind)
    fm = flow_loss(model, cache, batch, generator, flow_draws, trained, hidden)
    return {"coc_loss": ce, "coc_acc": acc, "flow_loss": fm, **hits}
