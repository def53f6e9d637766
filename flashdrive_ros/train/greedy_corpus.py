"""Batched greedy CoC decoding of the trained target, keeping the drafter's features.

All prompts of a batch have the same length, so every row writes its t-th generated token at
the same cache slot. Rows keep decoding after their `<|cot_end|>`; those tokens are cut. The
stop rule is the engine's: generation ends with `<|cot_end|>` or after max_new_tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from flashdrive_ros.model.backbone import TextBackbone
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions


@dataclass
class GreedyRows:
    """tokens: [B, M] generated ids (padded with cot_end); lengths: [B] through <|cot_end|>
    (or M); features: [B, C + M, L * H] of the last C prompt tokens and every generated token;
    positions: [3, B, C + M] their 3D positions."""

    tokens: torch.Tensor
    lengths: torch.Tensor
    features: torch.Tensor
    positions: torch.Tensor


@torch.no_grad()
def greedy_rows(backbone: TextBackbone, lm_head: torch.nn.Module, inputs_embeds: torch.Tensor,
                positions: torch.Tensor, visual_mask: torch.Tensor,
                deepstack: list[torch.Tensor], feature_layers: tuple[int, ...],
                context_len: int, max_new_tokens: int, cot_end_id: int) -> GreedyRows:
    """inputs_embeds: [B, T, H] prompts; positions: [3, B, T]."""
    b, t, _ = inputs_embeds.shape
    cfg = backbone.cfg
    device = inputs_embeds.device
    cache = KVCache(cfg.num_hidden_layers, b, cfg.num_key_value_heads, t + max_new_tokens,
                    cfg.head_dim, dtype=inputs_embeds.dtype, device=device)
    out = backbone(inputs_embeds, positions, cache, torch.arange(t, device=device),
                   visual_mask=visual_mask, deepstack=deepstack, output_layers=feature_layers)
    feats = [torch.cat([out.layer_hidden[i][:, t - context_len:] for i in feature_layers], -1)]
    pos = [positions[:, :, t - context_len:]]
    token = lm_head(out.hidden[:, -1]).argmax(-1)  # token: [B]
    next_pos = positions.amax(dim=(0, 2)) + 1  # next_pos: [B]
    tokens = [token]
    for step in range(max_new_tokens - 1):
        step_pos = text_positions(next_pos + step, 1)  # [3, B, 1]
        out = backbone(backbone.embed_tokens(token[:, None]), step_pos, cache,
                       torch.tensor([t + step], device=device), output_layers=feature_layers)
        feats.append(torch.cat([out.layer_hidden[i] for i in feature_layers], -1))
        pos.append(step_pos)
        token = lm_head(out.hidden[:, -1]).argmax(-1)
        tokens.append(token)
    ids = torch.stack(tokens, dim=1)  # ids: [B, M]
    is_end = ids == cot_end_id
    first_end = torch.where(is_end.any(1), is_end.float().argmax(1),
                            torch.full((b,), max_new_tokens - 1, device=device))
    lengths = first_end.long() + 1
    after = torch.arange(max_new_tokens, device=device)[None, :] >= lengths[:, None]
    ids = ids.masked_fill(after, cot_end_id)
    last_step_pos = text_positions(next_pos + max_new_tokens - 1, 1)
    feats.append(torch.zeros_like(feats[-1][:, -1:]))
    pos.append(last_step_pos)
    return GreedyRows(ids, lengths, torch.cat(feats, dim=1), torch.cat(pos, dim=2))
