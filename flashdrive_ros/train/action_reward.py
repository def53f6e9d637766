"""Trajectories the target plans after a given CoC, for action-aware drafter rewards.

Per window: one prefill of the prompt (images, history), its KV copied to each of the
window's CoC sequences, the sequences written after it in one teacher-forced pass, then the
flow-matching expert (cached-velocity Euler, the engine's schedule) from the same noise for
every sequence of a window, so sequences differ only by their CoC. The unicycle integration
from the window's fitted v0 turns actions into (x, y) waypoints.
"""

from __future__ import annotations

import torch

from flashdrive_ros.engine.flow_cached import FlowSchedule, euler_cached
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions
from flashdrive_ros.train.batched_expert import batched_velocity
from flashdrive_ros.train.dataset import TrainSet


def repeat_cache(cache: KVCache, times: int, capacity: int) -> KVCache:
    """Every batch row of `cache` `times` times in a row ([B] -> [B * times]), its valid
    slots copied into a new cache of `capacity` slots."""
    n = cache.length
    layers, batch, heads, _, dim = cache.k.shape
    out = KVCache(layers, batch * times, heads, capacity, dim, cache.k.dtype, cache.k.device)
    out.k[:, :, :, :n] = cache.k[:, :, :, :n].repeat_interleave(times, dim=1)
    out.v[:, :, :, :n] = cache.v[:, :, :, :n].repeat_interleave(times, dim=1)
    out.positions[:, :, :n] = cache.positions[:, :, :n].repeat_interleave(times, dim=1)
    out.length = n
    return out


@torch.no_grad()
def coc_trajectories(model: AlpamayoModel, data: TrainSet, windows: torch.Tensor,
                     sequences: list[list[list[int]]], noise: torch.Tensor,
                     schedule: FlowSchedule, cache_dtype: torch.dtype,
                     pad_id: int) -> torch.Tensor:
    """windows: [B] rows of `data`; sequences[b]: S token lists (each a CoC ending
    <|cot_end|> <|traj_future_start|>); noise: [B, N_wp, 2] -> (x, y) [B, S, N_wp, 2]."""
    device = noise.device
    vlm = model.vlm
    text = model.cfg.text
    b = windows.shape[0]
    s = len(sequences[0])
    if len(sequences) != b or any(len(group) != s for group in sequences):
        raise ValueError(f"need {s} sequences for each of the {b} windows")
    batch = data.batch(windows, device, with_coc=False)
    n = batch.input_ids.shape[1]
    embeds, visual_mask, deepstack = vlm.embed(batch.input_ids, batch.pixel_patches,
                                               batch.grid_thw, data.image_token_id)
    width = max(len(seq) for group in sequences for seq in group)
    prompt_cache = KVCache(text.num_hidden_layers, b, text.num_key_value_heads, n,
                           text.head_dim, cache_dtype, device)
    vlm.language_model(embeds, batch.positions, prompt_cache, torch.arange(n, device=device),
                       visual_mask=visual_mask, deepstack=deepstack)
    cache = repeat_cache(prompt_cache, s, n + width)
    ids = torch.full((b * s, width), pad_id, dtype=torch.long, device=device)
    lengths = torch.zeros(b * s, dtype=torch.long, device=device)
    for row, seq in enumerate(seq for group in sequences for seq in group):
        ids[row, :len(seq)] = torch.tensor(seq, device=device)
        lengths[row] = len(seq)
    start = batch.positions.amax(dim=(0, 2)).repeat_interleave(s) + 1  # start: [B * S]
    vlm.language_model(vlm.language_model.embed_tokens(ids), text_positions(start, width),
                       cache, torch.arange(n, n + width, device=device))
    prefix = n + lengths  # prefix: [B * S]
    x0 = noise.repeat_interleave(s, dim=0)  # x0: [B * S, N_wp, 2]

    def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return batched_velocity(model.expert, model.action_in_proj, model.action_out_proj,
                                x, t, cache, prefix).to(x.dtype)

    actions = euler_cached(velocity, x0, schedule)
    v0 = torch.as_tensor(data.v0[windows.cpu().numpy()], dtype=torch.float64, device=device)
    xy = model.trajectories(actions.float(), v0.repeat_interleave(s))[..., :2]
    return xy.view(b, s, *xy.shape[1:]).float()


def trajectory_error(xy: torch.Tensor) -> torch.Tensor:
    """xy: [B, 1 + R, N_wp, 2] (greedy first) -> [B, R] mean squared waypoint distance (m^2)
    of each rollout's trajectory from the greedy CoC's."""
    return (xy[:, 1:] - xy[:, :1]).pow(2).sum(-1).mean(-1)
