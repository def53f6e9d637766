"""Target training: the loop over the target stage's steps (`TargetTrainer`), one optimizer
step (`target_step`) and the held-out evaluation, on the losses of train/target_losses.py.

`DecisionFocus` draws rare decisions more often; the held-out metrics add the share of
windows whose deciding tokens are all right (`decision_acc`, also per decision). With a
`SceneReadout` (scene_weight > 0) the metrics add `lamp_acc`, `gap_acc`, `motion_acc` and
`bend_acc` (train/scene_readout.py). Blind windows (`readout_blind`) lose their ego history
and train the readout alone: their CoC and flow losses leave them out. Windows with a blind
expert (`expert_blind`) plan without reading the image slots.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.sim.labels import DECISIONS
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.decision_focus import PLAIN, DecisionFocus, draw_weights, hard_brakes
from flashdrive_ros.train.flow_matching_loss import check_expert_blind
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.optimizer_state import load_optimizer_state, optimizer_state
from flashdrive_ros.train.scene_readout import CLASSES as SCENE_CLASSES
from flashdrive_ros.train.scene_readout import SceneReadout, check_readout_blind
from flashdrive_ros.train.target_losses import target_step_losses
from flashdrive_ros.train.schedule import Progress

Autocast = Callable[[], contextlib.AbstractContextManager]


@torch.no_grad()
def evaluate_target(model: AlpamayoModel, data: TrainSet, rows: torch.Tensor,
                    device: torch.device, autocast: Autocast, cache_dtype: torch.dtype,
                    seed: int, batch_size: int = 32, readout: SceneReadout | None = None
                    ) -> dict[str, float]:
    """Plain (unweighted) mean losses, token accuracy, decision_acc and decision_acc_<name>
    per decision present among `rows`, side_acc over the rows whose CoC names a side; with
    `readout` also lamp_acc (over the rows with a light in range), gap_acc, motion_acc
    (over the rows with a vehicle in range) and bend_acc (with a tight bend in range)."""
    model.eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    totals: dict[str, float] = {}
    hits, side_hits = [], []
    scene_hits: dict[str, list[torch.Tensor]] = {f"{r}_hit": [] for r in SCENE_CLASSES}
    count = 0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        batch = data.batch(chunk, device)
        with autocast():
            losses = target_step_losses(model, batch, data.image_token_id, cache_dtype, gen,
                                        grad=False, readout=readout)
        hits.append(losses.pop("decision_hit").cpu())
        side_hits.append(losses.pop("side_hit").cpu())
        if readout is not None:
            for name, parts in scene_hits.items():
                parts.append(losses.pop(name).cpu())
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
        sided = data.side_cols[rows.cpu()].any(dim=1)
        if bool(sided.any()):
            metrics["side_acc"] = float(torch.cat(side_hits)[sided].float().mean())
    for name, parts in scene_hits.items():
        if parts:
            metrics[name.replace("_hit", "_acc")] = float(torch.cat(parts).nanmean())
    return metrics


def target_step(model: AlpamayoModel, opt: torch.optim.Optimizer, data: TrainSet,
                rows: torch.Tensor, device: torch.device, autocast: Autocast,
                cache_dtype: torch.dtype, generator: torch.Generator, flow_weight: float,
                focus: DecisionFocus, flow_draws: int, history_kept: torch.Tensor | None = None,
                readout: SceneReadout | None = None, scene_weight: float = 0.0,
                trained: torch.Tensor | None = None, expert_blind: torch.Tensor | None = None
                ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
    """One optimizer step on the windows `rows` -> (losses, decision_hit [B], grad norm);
    nothing is read back from the device. history_kept: [B] bool, False where the window's
    ego history is dropped (TrainSet.token_rows). With `readout` (its parameters in `opt`) its
    loss joins at `scene_weight`, and losses hold lamp_acc, gap_acc, motion_acc and bend_acc
    of the batch. trained: [B] bool, the rows whose CoC and flow losses count (None: all);
    expert_blind: [B] bool, the rows whose action expert does not read the image slots."""
    batch = data.batch(rows, device, history_kept=history_kept)
    if trained is not None:
        trained = trained.to(device)
    if expert_blind is not None:
        expert_blind = expert_blind.to(device)
    with autocast():
        losses = target_step_losses(model, batch, data.image_token_id, cache_dtype, generator,
                                    focus=focus, flow_draws=flow_draws, readout=readout,
                                    trained=trained, expert_blind=expert_blind)
    hit = losses.pop("decision_hit")
    loss = losses["coc_loss"] + flow_weight * losses["flow_loss"]
    if readout is not None:
        loss = loss + scene_weight * losses["readout_loss"]
        for reading in SCENE_CLASSES:
            losses[f"{reading}_acc"] = losses.pop(f"{reading}_hit").nanmean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    params = [p for group in opt.param_groups for p in group["params"]]
    norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    return losses, hit, norm


class TargetTrainer:
    """The target stage as a loop that can stop and go on in a later process.

    `run(stop_at)` trains until the schedule (steps or seconds, whichever runs out first) ends
    or the monotonic clock passes `stop_at`; `state()` / `load_state()` carry the optimizer,
    both generators (flow draws, row picks), the schedule position and the logged metrics, so
    that a run stopped and resumed takes the same steps as one that never stopped.
    Rows are drawn with `draw_weights(decision, v0, focus, hard brakes of the futures)`.
    With `history_dropout` p each drawn window loses its ego history with probability p
    (past-motion dropout: its plan and CoC must come from the cameras); the held-out
    evaluation keeps every history. With `scene_weight` > 0 a `SceneReadout` trains beside
    the model (its weights in `state()`, not in the model); `readout_blind` q of the drawn
    windows then lose their ego history and train the readout alone, so that it must read
    the scene from the cameras. With `expert_blind` e the action expert of each drawn window
    does not read its image slots with probability e, so that its plan must follow the CoC.
    """

    def __init__(self, model: AlpamayoModel, data: TrainSet, steps: int,
                 seconds: float | None, batch_size: int, lr: float, seed: int, log: TrainLog,
                 device: torch.device, autocast: Autocast, cache_dtype: torch.dtype,
                 flow_weight: float = 1.0, log_every: int = 25, focus: DecisionFocus = PLAIN,
                 flow_draws: int = 1, history_dropout: float = 0.0,
                 scene_weight: float = 0.0, readout_blind: float = 0.0,
                 expert_blind: float = 0.0) -> None:
        if flow_draws < 1:
            raise ValueError(f"flow_draws must be >= 1, got {flow_draws}")
        if not 0.0 <= history_dropout < 1.0:
            raise ValueError(f"history_dropout must be in [0, 1), got {history_dropout}")
        if not scene_weight >= 0.0:
            raise ValueError(f"scene_weight must be >= 0, got {scene_weight}")
        check_readout_blind(readout_blind, history_dropout, scene_weight)
        check_expert_blind(expert_blind)
        self.expert_blind = expert_blind
        self.history_dropout, self.scene_weight = history_dropout, scene_weight
        self.readout_blind = readout_blind
        self.readout = (SceneReadout(model.cfg.text.hidden_size).to(device)
                        if scene_weight > 0 else None)
        self.model, self.data, self.log, self.device = model, data, log, device
        self.autocast, self.cache_dtype = autocast, cache_dtype
        self.batch_size, self.lr, self.flow_weight = batch_size, lr, flow_weight
        self.log_every, self.focus, self.flow_draws = log_every, focus, flow_draws
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.pick_gen = torch.Generator().manual_seed(seed)
        self.draw_weights = draw_weights(
            data.decision, data.v0, focus, hard_brakes(data.v0, data.future, data.cfg.action.dt),
            data.lamp_pair)
        params = [p for p in model.parameters() if p.requires_grad]
        if self.readout is not None:
            params += list(self.readout.parameters())
        self.opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.05, betas=(0.9, 0.95),
                                     fused=True)
        self.progress = Progress(steps, seconds)
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}

    def draw_rows(self) -> torch.Tensor:
        if self.focus.uniform:
            return torch.randint(len(self.data), (self.batch_size,), generator=self.pick_gen)
        return torch.multinomial(self.draw_weights, self.batch_size, replacement=True,
                                 generator=self.pick_gen)

    def draw_masks(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(history_kept, trained): [B] bool, False for the windows whose ego history this
        step drops (dropout and blind windows) and for the blind windows; None (all, no draw)
        without dropout and blind windows."""
        if self.history_dropout == 0.0 and self.readout_blind == 0.0:
            return None, None
        u = torch.rand(self.batch_size, generator=self.pick_gen)  # u: [B]
        kept = u >= self.history_dropout + self.readout_blind
        return kept, (u >= self.readout_blind if self.readout_blind > 0.0 else None)

    def draw_expert_blind(self) -> torch.Tensor | None:
        """[B] bool, the windows whose action expert this step does not read the image slots;
        None (no draw) without `expert_blind`."""
        if self.expert_blind == 0.0:
            return None
        return torch.rand(self.batch_size, generator=self.pick_gen) < self.expert_blind

    def run(self, stop_at: float | None = None, max_steps: int | None = None) -> bool:
        """Trains; True when the schedule has ended, False when stopped at `stop_at` (monotonic
        clock) or after `max_steps` steps of this call."""
        progress = self.progress
        last_step = None if max_steps is None else progress.step + max_steps
        self.model.train()
        while not progress.done():
            if ((stop_at is not None and time.monotonic() >= stop_at)
                    or (last_step is not None and progress.step >= last_step)):
                return False
            for group in self.opt.param_groups:
                group["lr"] = self.lr * progress.lr_factor()
            rows = self.draw_rows()
            history_kept, trained = self.draw_masks()
            losses, hit, norm = target_step(
                self.model, self.opt, self.data, rows, self.device, self.autocast,
                self.cache_dtype, self.gen, self.flow_weight, self.focus,
                self.flow_draws, history_kept, self.readout, self.scene_weight, trained,
                self.draw_expert_blind())
            step = progress.step
            progress.step += 1
            if step % self.log_every == 0 or progress.done():
                self.last = {k: float(v.detach()) for k, v in losses.items()}
                labelled = torch.from_numpy(~self.data.contrast[rows.numpy()])  # [B] bool
                if trained is not None:
                    labelled &= trained.cpu()
                counted = hit[labelled.to(hit.device)]
                self.last["decision_acc"] = float(counted.float().mean())
                self.first = self.first or dict(self.last)
                self.log.write("target", step, **self.last, grad_norm=float(norm),
                               lr=self.opt.param_groups[0]["lr"])
        return True

    def finish(self, eval_data: TrainSet, eval_rows: int, seed: int) -> dict[str, float]:
        """Held-out evaluation after the schedule; the stage's summary."""
        rows = torch.randperm(len(eval_data), generator=self.pick_gen)[:eval_rows]
        metrics = evaluate_target(self.model, eval_data, rows, self.device, self.autocast,
                                  self.cache_dtype, seed + 1, readout=self.readout)
        self.log.write("target_eval", self.progress.step, **metrics)
        self.model.eval()
        return {"steps": self.progress.step, "flow_draws": self.flow_draws,
                "history_dropout": self.history_dropout, "scene_weight": self.scene_weight,
                "readout_blind": self.readout_blind, "expert_blind": self.expert_blind,
                **{f"first_{k}": v for k, v in self.first.items()},
                **{f"final_{k}": v for k, v in self.last.items()},
                **{f"eval_{k}": v for k, v in metrics.items()}}

    def state(self) -> tuple[dict[str, torch.Tensor], dict]:
        """(tensors, JSON-able rest) of everything `load_state` restores."""
        tensors, opt_meta = optimizer_state(self.opt)
        tensors["rng.flow"] = self.gen.get_state()
        tensors["rng.pick"] = self.pick_gen.get_state()
        if self.readout is not None:
            for name, value in self.readout.state_dict().items():
                tensors[f"readout.{name}"] = value.detach().cpu()
        meta = {"optimizer": opt_meta, "step": self.progress.step,
                "steps": self.progress.steps, "seconds": self.progress.seconds,
                "elapsed_s": self.progress.elapsed(), "flow_device": self.gen.device.type,
                "first": self.first, "last": self.last}
        return tensors, meta

    def load_state(self, tensors: dict[str, torch.Tensor], meta: dict) -> None:
        if meta["flow_device"] != self.gen.device.type:
            raise ValueError(f"the run was trained on {meta['flow_device']}, this call runs "
                             f"on {self.gen.device.type}: its generator state does not carry")
        if self.readout is not None:
            self.readout.load_state_dict({name[len("readout."):]: value.to(self.device)
                                          for name, value in tensors.items()
                                          if name.startswith("readout.")})
        load_optimizer_state(self.opt, tensors, meta["optimizer"])
        self.gen.set_state(tensors["rng.flow"])
        self.pick_gen.set_state(tensors["rng.pick"])
        self.progress = Progress(meta["steps"], meta["seconds"], meta["step"],
                                 meta["elapsed_s"])
        self.first, self.last = dict(meta["first"]), dict(meta["last"])


def train_target(model: AlpamayoModel, data: TrainSet, eval_data: TrainSet, steps: int,
                 seconds: float | None, batch_size: int,
                 lr: float, seed: int, log: TrainLog, device: torch.device,
                 autocast: Autocast, cache_dtype: torch.dtype, flow_weight: float = 1.0,
                 eval_rows: int = 512, log_every: int = 25,
                 focus: DecisionFocus = PLAIN, flow_draws: int = 1) -> dict[str, float]:
    """The whole target stage in one go (see `TargetTrainer`); eval rows drawn uniformly."""
    trainer = TargetTrainer(model, data, steps, seconds, batch_size, lr, seed, log, device,
                            autocast, cache_dtype, flow_weight, log_every, focus, flow_draws)
    trainer.run()
    return trainer.finish(eval_data, eval_rows, seed)
