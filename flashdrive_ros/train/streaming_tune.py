"""Streaming fine-tuning of the action expert (backbone frozen).

Per sequence: a random run of consecutive windows of one drive goes through the engine's own
streaming prefill without gradients (the first window a full prefill, the rest reusing the
cache); at the last window the ground-truth CoC (through `<|traj_future_start|>`) is written
into the cache as decoding would, and the flow-matching loss of the expert reading that
streamed cache is the training signal. This teaches the expert the KV it sees at inference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.types import Window
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.flow import interpolate
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.schedule import Progress

Autocast = Callable[[], contextlib.AbstractContextManager]


def expert_parameters(model: AlpamayoModel) -> list[torch.nn.Parameter]:
    return [*model.expert.parameters(), *model.action_in_proj.parameters(),
            *model.action_out_proj.parameters()]


def window_of(data: TrainSet, row: int) -> Window:
    images = data.images(torch.tensor([row]))[0].cpu().numpy()  # [V, F, H, W, 3]
    stamps = data.frame_stamps[data.frame_index[row].numpy()]
    return Window(t0=float(stamps[-1]), images=images,
                  image_stamps=np.tile(stamps, (images.shape[0], 1)),
                  ego_history=data.history[row], speed=float(data.v0[row]),
                  sequence=int(data.step_of[row]))


def sequence_ends(data: TrainSet, rows: torch.Tensor, length: int) -> torch.Tensor:
    """Rows r of `rows` whose previous length - 1 rows are the same drive's previous steps;
    no contrast window ends one (they all come after the other windows, so none lies in
    one either)."""
    r = rows.numpy()
    start = r - (length - 1)
    ok = (start >= 0) & ~data.contrast[r]
    ok[ok] &= (data.drive_of[start[ok]] == data.drive_of[r[ok]])
    ok[ok] &= (data.step_of[r[ok]] - data.step_of[start[ok]] == length - 1)
    return rows[torch.from_numpy(ok)]


@torch.no_grad()
def stream_to(engine: Engine, data: TrainSet, rows: list[int]) -> int:
    """Streams the windows `rows` (consecutive steps), then writes the last window's
    ground-truth CoC; returns the cache length the expert reads (prompt + CoC)."""
    engine.reset()
    prefill_out = None
    for row in rows:
        window = window_of(data, row)
        prompt = engine.prompt_builder.build(
            engine.history_tokenizer.encode(window.ego_history[:, :3]).tolist())
        plan = engine.stream.plan(engine.frame_layout, prompt.token_ids, window.image_stamps)
        image_embeds, deepstack = engine.encode(window, plan)
        prefill_out = engine.prefill(prompt.token_ids, plan, image_embeds, deepstack)
    last = rows[-1]
    coc = data.coc_ids[last, :int(data.coc_lens[last])].tolist()
    engine.target.run_tokens(coc, engine.stream.cache, prefill_out.next_position)
    return engine.stream.cache.length


def streaming_flow_loss(model: AlpamayoModel, engine: Engine, actions: torch.Tensor,
                        prefix_len: int, samples: int, generator: torch.Generator
                        ) -> torch.Tensor:
    """actions: [N_wp, 2] normalized target of the last window."""
    x1 = actions.expand(samples, -1, -1)
    x0 = torch.randn(x1.shape, generator=generator, device=x1.device, dtype=x1.dtype)
    t = torch.rand(samples, generator=generator, device=x1.device, dtype=x1.dtype)
    x_t, target = interpolate(x1, x0, t)
    v = model.velocity(x_t, t, engine.stream.cache, prefix_len)
    return F.mse_loss(v.float(), target.float())


def streaming_tune(model: AlpamayoModel, tokenizer: TextTokenizer, data: TrainSet,
                   eval_data: TrainSet, steps: int,
                   seconds: float | None, max_windows: int, sequences_per_step: int,
                   samples: int, lr: float, seed: int, log: TrainLog, device: torch.device,
                   autocast: Autocast, eval_sequences: int = 32, log_every: int = 10
                   ) -> dict[str, float]:
    engine = Engine(model, tokenizer, None,
                    EngineConfig(mode="flashdrive", speculative=False, cuda_graphs=False,
                                 device=str(device)))
    for p in model.parameters():
        p.requires_grad_(False)
    params = expert_parameters(model)
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    gen = torch.Generator(device=device).manual_seed(seed)
    rng = np.random.default_rng(seed)
    progress = Progress(steps, seconds)

    def one(source: TrainSet) -> torch.Tensor:
        length = int(rng.integers(1, max_windows + 1))
        ends = sequence_ends(source, torch.arange(len(source)), length)
        if len(ends) == 0:
            length, ends = 1, source.own_rows()
        end = int(ends[int(rng.integers(len(ends)))])
        with autocast():
            prefix = stream_to(engine, source, list(range(end - length + 1, end + 1)))
            return streaming_flow_loss(model, engine, source.actions[end].to(device), prefix,
                                       samples, gen)

    first = last = float("nan")
    model.eval()
    while not progress.done():
        for group in opt.param_groups:
            group["lr"] = lr * progress.lr_factor()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(sequences_per_step):
            loss = one(data) / sequences_per_step
            loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step = progress.step
        progress.step += 1
        last = total
        first = total if step == 0 else first
        if step % log_every == 0 or progress.done():
            log.write("streaming", step, flow_loss=total, lr=opt.param_groups[0]["lr"])
    with torch.no_grad():
        eval_losses = [float(one(eval_data)) for _ in range(min(len(eval_data), eval_sequences))]
    eval_loss = float(np.mean(eval_losses)) if eval_losses else float("nan")
    log.write("streaming_eval", progress.step, flow_loss=eval_loss)
    for p in model.parameters():
        p.requires_grad_(True)
    engine.reset()
    return {"steps": progress.step, "first_flow_loss": first, "final_flow_loss": last,
            "eval_flow_loss": eval_loss}
