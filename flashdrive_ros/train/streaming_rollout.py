"""Streaming prefill of many sequences at once, for training.

A sequence is a run of L consecutive windows of one drive. B sequences of the same L stream
together through one `StreamingKVCache` of batch B: every row gets the same plan at every
window (a full prefill at the first, then the same ring shift), so the engine's own plans,
slot layout, positions and attention masks serve all rows; only token ids and pixels differ
per row. `roll` runs windows 0 .. L-2 without gradients. `last_window` then computes what
streaming inference computes fresh at window L-1 (each view's newest frame block under the
streaming mask, then the tail; a full prefill when L = 1) and writes the ground-truth CoC
after the prompt as decoding writes its tokens, with gradients, reading the reused KV
detached. The cache keeps its writes out of place (`GradKVCache`) so gradients reach the
recomputed keys and values the CoC and the action expert read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from flashdrive_ros.engine.streaming import PrefillPlan, StreamingKVCache, prompt_geometry
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.backbone import BackboneOutput
from flashdrive_ros.model.positions import text_positions
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.grad_cache import GradKVCache


@dataclass
class StreamedWindow:
    """The last window of B streamed sequences, CoC teacher-forced after the prompt.

    prompt_last: [B, H] final hidden at the prompt's last token (it predicts the first CoC
    token). coc_hidden: [B, W, H] final hidden of the CoC tokens. coc_ids: [B, W] (padded
    after coc_lens). coc_lens: [B]. prefix_lens: [B] prompt + CoC slots the expert reads.
    plan: the last window's prefill plan.
    """

    prompt_last: torch.Tensor
    coc_hidden: torch.Tensor
    coc_ids: torch.Tensor
    coc_lens: torch.Tensor
    prefix_lens: torch.Tensor
    cache: GradKVCache
    plan: PrefillPlan


class StreamingRollout:
    def __init__(self, model: AlpamayoModel, data: TrainSet, cache_dtype: torch.dtype,
                 device: torch.device) -> None:
        cfg = model.cfg
        image_size = (cfg.prompt.image_height, cfg.prompt.image_width)
        self.model = model
        self.data = data
        self.device = device
        self.cache_dtype = cache_dtype
        self.layout, positions = prompt_geometry(data.builder, data.image_token_id, cfg.vision,
                                                 image_size)
        self.positions = positions.to(device)  # [3, 1, N]
        self.capacity = self.layout.prompt_length + data.coc_ids.shape[1]

    def new_state(self, batch: int) -> StreamingKVCache:
        t = self.model.cfg.text
        cache = GradKVCache(t.num_hidden_layers, batch, t.num_key_value_heads, self.capacity,
                            t.head_dim, self.cache_dtype, self.device)
        return StreamingKVCache(cache)

    def prefill(self, state: StreamingKVCache, rows: torch.Tensor
                ) -> tuple[PrefillPlan, BackboneOutput]:
        """Plans window `rows` ([B] long, one row per sequence) from the state and runs the
        plan's queries through the backbone into the state's cache."""
        data, vlm = self.data, self.model.vlm
        rows = rows.cpu()
        ids, _, _ = data.token_rows(rows, with_coc=False)  # ids: [B, N]
        stamps = data.frame_stamps[data.frame_index[rows[0]].numpy()]  # stamps: [F]
        plan = state.plan(self.layout, ids[0].tolist(),
                          np.tile(stamps, (self.layout.num_views, 1)))
        patches, grid = data.frame_pixels(rows, plan.frames_to_encode, self.device)
        image_embeds, deepstack = vlm.visual(patches, grid)
        order = plan.query_order.to(self.device)
        ids = ids.to(self.device)
        embeds, visual_mask, deepstack = vlm.place_images(ids[:, order], image_embeds,
                                                          deepstack, data.image_token_id)
        positions = self.positions.expand(3, ids.shape[0], -1)  # positions: [3, B, N]
        state.begin(plan, positions)
        out = vlm.language_model(embeds, positions[:, :, order], state.cache,
                                 plan.query_slots.to(self.device),
                                 attn_mask=state.attention_mask(plan), visual_mask=visual_mask,
                                 deepstack=deepstack)
        state.finish(plan)
        return plan, out

    @torch.no_grad()
    def roll(self, ends: torch.Tensor, length: int) -> StreamingKVCache:
        """Streams windows ends - length + 1 .. ends - 1 of every sequence without gradients;
        ends: [B] rows of the sequences' last windows."""
        if length < 1:
            raise ValueError(f"a sequence has at least one window, got length {length}")
        state = self.new_state(ends.shape[0])
        for k in range(length - 1):
            plan, _ = self.prefill(state, ends - (length - 1) + k)
            if plan.full != (k == 0):
                raise RuntimeError(f"window {k} of the sequences planned "
                                   f"{'a full' if plan.full else 'a streaming'} prefill "
                                   f"({plan.reason or 'consecutive frames'})")
        return state

    def last_window(self, state: StreamingKVCache, ends: torch.Tensor) -> StreamedWindow:
        """The prefill of window `ends` ([B]) and its ground-truth CoC, with gradients."""
        data, backbone = self.data, self.model.vlm.language_model
        plan, out = self.prefill(state, ends)
        rows = ends.cpu()
        lens = data.coc_lens[rows]
        width = int(lens.max())
        coc = data.coc_ids[rows, :width].to(self.device)  # coc: [B, W]
        n = self.layout.prompt_length
        slots = torch.arange(n, n + width, device=self.device)
        start = int(self.positions.max()) + 1
        positions = text_positions(start, width, coc.shape[0], self.device)  # [3, B, W]
        coc_out = backbone(backbone.embed_tokens(coc), positions, state.cache, slots)
        lens = lens.to(self.device)
        return StreamedWindow(out.hidden[:, -1], coc_out.hidden, coc, lens, n + lens,
                              state.cache, plan)

    def stream(self, ends: torch.Tensor, length: int) -> StreamedWindow:
        return self.last_window(self.roll(ends, length), ends)
