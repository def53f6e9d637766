"""The drafter's training corpus: the trained target's own greedy CoC on training windows,
with the features of the last min(context_len, prompt length) prompt tokens."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import DrafterConfig
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.drafter_data import DraftCorpus
from flashdrive_ros.train.greedy_corpus import greedy_rows


@torch.no_grad()
def build_draft_corpus(model: AlpamayoModel, data: TrainSet, rows: torch.Tensor,
                       drafter: DrafterConfig, device: torch.device,
                       autocast: Callable[[], contextlib.AbstractContextManager],
                       batch_size: int, feature_dtype: torch.dtype,
                       max_new_tokens: int | None = None) -> DraftCorpus:
    """max_new_tokens: CoC cap of the greedy decode (None: the model's max_coc_tokens)."""
    model.eval()
    n = data.prompt_len
    c = min(drafter.context_len, n)
    cot_end = data.tokenizer.token_id("cot_end")
    max_new = max_new_tokens or model.cfg.prompt.max_coc_tokens
    ids, feats, pos, lens = [], [], [], []
    for start in range(0, len(rows), batch_size):
        batch = data.batch(rows[start:start + batch_size], device, with_coc=False)
        with autocast():
            embeds, visual_mask, deepstack = model.vlm.embed(
                batch.input_ids, batch.pixel_patches, batch.grid_thw, data.image_token_id)
            out = greedy_rows(model.vlm.language_model, model.vlm.lm_head, embeds,
                              batch.positions, visual_mask, deepstack,
                              drafter.target_layer_ids, c, max_new, cot_end)
        ids.append(torch.cat([batch.input_ids[:, n - c:], out.tokens], dim=1))
        feats.append(out.features.to(feature_dtype))
        pos.append(out.positions)
        lens.append(out.lengths + c)
    lengths = torch.cat(lens)
    keep = lengths >= c + 2
    if not bool(keep.any()):
        raise RuntimeError("the target ends every CoC at once: no drafter training blocks")
    return DraftCorpus(torch.cat(ids)[keep], torch.cat(feats)[keep],
                       torch.cat(pos, dim=1)[:, keep], lengths[keep], prompt_len=n,
                       context_len=c, windows=rows.to(keep.device)[keep])
