"""Streaming prefill state (FlashDrive): keep the prompt's KV across windows, recompute only
each view's new frame blocks and the tail.

Cache layout. Slots [0, N) hold the N prompt tokens. Text tokens (system prefix, camera and
frame labels, vision markers, tail) always sit at the slot equal to their prompt index. The
image tokens of view v form a ring of F image-sized slot ranges: with ring shift s, frame f of
view v lives in the range where frame (f + s) mod F lived at the full prefill. A window whose
frames are the previous window's shifted by k (1 <= k < F: its first F - k frames are the
previous window's last F - k, by stamp) advances s by k, so its k new frames overwrite the
ranges of the k frames that drop out, and the kept frames move k frames earlier *by
re-assigning positions only*: keys are cached before RoPE, so `cache.positions` of every
prompt slot is rewritten from the new window's prompt positions and no key or value is
copied. Slots >= N hold CoC tokens and are rolled back each window.

Each slot's prompt order (`slot_order`) drives the attention mask (see masks.py). Recomputed
each streaming window, in prompt order: every token of blocks (v, F-k) .. (v, F-1) for each
view v (their labels, markers and new images) and the tail. Everything else is reused as
cached.

A full prefill (identity layout) runs on the first window, after `reset()`, after a failed
step, when streaming is switched off, on a time-base reset, when the window shares no frame
with the previous one or its frames are not the previous window's shifted (camera loss,
dropped or repeated frames, time jumps) and when the prompt before the tail or its layout
changes.

With a `SlotFeatures` store the drafter context may reach reused frames: every prefill writes
the features and ids of the tokens it runs at their slots, and the context of the last
`context_len` prompt slots is read from the store (see slot_features.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from flashdrive_ros.engine.decoding import PrefillOutput, Target, prefill
from flashdrive_ros.engine.masks import slot_mask
from flashdrive_ros.engine.slot_features import SlotFeatures
from flashdrive_ros.model.config import VisionConfig
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import prompt_positions
from flashdrive_ros.model.preprocess import preprocess_images
from flashdrive_ros.model.prompt import PromptBuilder
from flashdrive_ros.model.vlm import VLM

Span = tuple[int, int]


@dataclass(frozen=True)
class FrameLayout:
    """Where the frame blocks of a view-major prompt sit, as prompt indices.

    block_spans[v][f]: [start, end) of camera v's frame f block (label, markers, image).
    image_spans[v][f]: [start, end) of that frame's image tokens, inside its block.
    tail_start: the first tail token (history, instruction, <|cot_start|>).
    prompt_length: N, the number of prompt tokens.
    """

    block_spans: tuple[tuple[Span, ...], ...]
    image_spans: tuple[tuple[Span, ...], ...]
    tail_start: int
    prompt_length: int

    def __post_init__(self) -> None:
        blocks = tuple(tuple((int(a), int(b)) for a, b in row) for row in self.block_spans)
        images = tuple(tuple((int(a), int(b)) for a, b in row) for row in self.image_spans)
        object.__setattr__(self, "block_spans", blocks)
        object.__setattr__(self, "image_spans", images)
        if not blocks or not blocks[0]:
            raise ValueError("frame layout has no views or no frames")
        frames = len(blocks[0])
        if any(len(row) != frames for row in blocks) or len(images) != len(blocks) or any(
                len(row) != frames for row in images):
            raise ValueError("every view needs the same number of frame blocks and image spans")
        flat_blocks = [span for row in blocks for span in row]
        previous_end = 0
        for start, end in flat_blocks:
            if not previous_end <= start < end:
                raise ValueError(f"frame blocks must be non-empty, ordered and disjoint, got "
                                 f"{flat_blocks}")
            previous_end = end
        if not previous_end <= self.tail_start < self.prompt_length:
            raise ValueError(f"tail_start {self.tail_start} must lie after the last frame block "
                             f"({previous_end}) and before prompt_length {self.prompt_length}")
        sizes = {end - start for row in images for start, end in row}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"all images must have the same non-zero token count to share "
                             f"ring slots, got {sorted(sizes)}")
        for (b0, b1), (i0, i1) in zip(flat_blocks, (s for row in images for s in row)):
            if not b0 <= i0 < i1 <= b1:
                raise ValueError(f"image span {(i0, i1)} is not inside its block {(b0, b1)}")

    @property
    def num_views(self) -> int:
        return len(self.block_spans)

    @property
    def num_frames(self) -> int:
        return len(self.block_spans[0])

    @property
    def tokens_per_image(self) -> int:
        start, end = self.image_spans[0][0]
        return end - start

    @classmethod
    def from_token_ids(cls, input_ids: Sequence[int], image_token_id: int,
                       block_spans: Sequence[Sequence[Span]], tail_start: int) -> FrameLayout:
        """Finds each block's image span as its single run of `image_token_id` tokens."""
        ids = [int(t) for t in input_ids]
        image_spans = []
        for row in block_spans:
            spans = []
            for start, end in row:
                inside = [i for i in range(start, end) if ids[i] == image_token_id]
                if not inside or inside[-1] - inside[0] + 1 != len(inside):
                    raise ValueError(f"block {(start, end)} must hold one contiguous run of "
                                     f"image tokens")
                spans.append((inside[0], inside[-1] + 1))
            image_spans.append(tuple(spans))
        return cls(tuple(tuple(row) for row in block_spans), tuple(image_spans), tail_start,
                   len(ids))

    def slot_of_prompt_index(self, shift: int) -> torch.Tensor:
        """[N] long: the cache slot of every prompt token under ring shift `shift`."""
        slots = torch.arange(self.prompt_length)
        frames = self.num_frames
        for row in self.image_spans:
            for f, (start, end) in enumerate(row):
                target = row[(f + shift) % frames][0]
                slots[start:end] = torch.arange(target, target + end - start)
        return slots

    def newest_frames_and_tail(self, frames: int = 1) -> torch.Tensor:
        """Prompt indices recomputed by a streaming window with `frames` new frames per view,
        ascending: [T] long."""
        if not 1 <= frames < self.num_frames:
            raise ValueError(f"a streaming window has 1 .. {self.num_frames - 1} new frames "
                             f"per view, got {frames}")
        parts = [torch.arange(row[-frames][0], row[-1][1]) for row in self.block_spans]
        parts.append(torch.arange(self.tail_start, self.prompt_length))
        return torch.cat(parts)


def prompt_geometry(builder: PromptBuilder, image_token_id: int, vision: VisionConfig,
                    image_size: tuple[int, int]) -> tuple[FrameLayout, torch.Tensor]:
    """Frame layout and [3, 1, N] positions (CPU) of the builder's prompt; both are fixed for
    a prompt builder (history tokens change ids, not positions)."""
    layout = builder.layout
    ids = builder.build().token_ids
    blocks = [[(span.block.start, span.block.stop) for span in row] for row in layout.images]
    frame_layout = FrameLayout.from_token_ids(ids, image_token_id, blocks, layout.tail.start)
    grid = [1, image_size[0] // vision.patch_size, image_size[1] // vision.patch_size]
    grid_thw = torch.tensor([grid] * (frame_layout.num_views * frame_layout.num_frames))
    positions = prompt_positions(torch.tensor([ids]), grid_thw, image_token_id,
                                 vision.spatial_merge_size)
    return frame_layout, positions


@dataclass(frozen=True)
class PrefillPlan:
    """What one window's prefill computes.

    query_order: [T] prompt indices of the tokens run through the backbone, ascending.
    query_slots: [T] cache slots they are written to.
    frames_to_encode: (view, frame) of every image to encode, in query order.
    new_frames: frames per view encoded (F on a full prefill).
    stamps: [V, F] frame times of the window.
    """

    full: bool
    reason: str
    query_order: torch.Tensor
    query_slots: torch.Tensor
    frames_to_encode: tuple[tuple[int, int], ...]
    new_frames: int
    shift: int
    layout: FrameLayout
    stamps: np.ndarray


class StreamingKVCache:
    """The backbone KV cache plus what streaming needs to reuse it across windows.

    Per window: `plan(...)`, then `begin(plan, positions)`, run the backbone on the plan's
    queries with `attention_mask(plan)`, then `finish(plan)` (`run_prefill` does the last
    three). A window whose prefill did not finish makes the next one a full prefill.
    """

    def __init__(self, cache: KVCache, streaming: bool = True,
                 features: SlotFeatures | None = None) -> None:
        self.cache = cache
        self.streaming = streaming
        self.features = features
        self.slot_order = torch.arange(cache.capacity, device=cache.k.device)  # [C]
        self.reset()

    def reset(self) -> None:
        self.cache.reset()
        if self.features is not None:
            self.features.reset()
        self.slot_order.copy_(torch.arange(self.cache.capacity, device=self.slot_order.device))
        self.layout: FrameLayout | None = None
        self.shift = 0
        self.windows_since_full = 0
        self._prompt_key: tuple | None = None
        self._stamps: np.ndarray | None = None
        self._pending: PrefillPlan | None = None
        self._begun: PrefillPlan | None = None

    @property
    def prompt_length(self) -> int:
        if self.layout is None:
            raise RuntimeError("no prompt in the cache")
        return self.layout.prompt_length

    def plan(self, layout: FrameLayout, input_ids: Sequence[int], stamps: np.ndarray,
             time_base_reset: bool = False) -> PrefillPlan:
        """stamps: [V, F] frame times of this window (seconds)."""
        stamps = np.asarray(stamps, dtype=np.float64)
        if stamps.shape != (layout.num_views, layout.num_frames):
            raise ValueError(f"stamps {stamps.shape} do not match the layout's "
                             f"{layout.num_views} views x {layout.num_frames} frames")
        if layout.prompt_length > self.cache.capacity:
            raise ValueError(f"prompt of {layout.prompt_length} tokens exceeds the KV cache "
                             f"capacity {self.cache.capacity}")
        key = (layout, tuple(int(t) for t in input_ids[:layout.tail_start]))
        new_frames, reason = self._new_frames(key, stamps, time_base_reset)
        count = layout.num_frames
        if reason:
            order = torch.arange(layout.prompt_length)
            frames = tuple((v, f) for v in range(layout.num_views) for f in range(count))
            plan = PrefillPlan(True, reason, order, order.clone(), frames, count, 0, layout,
                               stamps)
        else:
            shift = (self.shift + new_frames) % count
            order = layout.newest_frames_and_tail(new_frames)
            slots = layout.slot_of_prompt_index(shift)[order]
            frames = tuple((v, f) for v in range(layout.num_views)
                           for f in range(count - new_frames, count))
            plan = PrefillPlan(False, "", order, slots, frames, new_frames, shift, layout,
                               stamps)
        self._pending = plan
        self._begun = None
        self._prompt_key = key
        return plan

    def begin(self, plan: PrefillPlan, positions: torch.Tensor) -> None:
        """Rolls the cache back to what the plan reuses and re-assigns every prompt slot's
        position. positions: [3, B, N] of the full prompt in prompt order."""
        if self._pending is not plan:
            raise RuntimeError("begin() needs the plan returned by the latest plan()")
        layout = plan.layout
        n = layout.prompt_length
        if positions.ndim != 3 or positions.shape[0] != 3 or positions.shape[2] != n:
            raise ValueError(f"positions must be [3, B, {n}], got {tuple(positions.shape)}")
        device = self.slot_order.device
        slots = layout.slot_of_prompt_index(plan.shift).to(device)
        self.slot_order[slots] = torch.arange(n, device=device)
        self.slot_order[n:] = torch.arange(n, self.cache.capacity, device=device)
        if plan.full:
            self.cache.reset()
            if self.features is not None:
                self.features.reset()
        else:
            self.cache.rollback(min(self.cache.length, layout.tail_start))
        kept = torch.arange(n, device=device)
        self.cache.set_positions(kept, positions.to(device)[:, :, self.slot_order[:n]])
        self.layout = layout
        self.shift = plan.shift
        self._begun = plan

    def attention_mask(self, plan: PrefillPlan, batch: int = 1) -> torch.Tensor | None:
        """[B, 1, T, N] bool for a streaming plan; None (causal by slot) for a full one."""
        if self._begun is not plan:
            raise RuntimeError("attention_mask() needs begin(plan) first")
        if plan.full:
            return None
        device = self.slot_order.device
        return slot_mask(self.slot_order, plan.query_slots.to(device),
                         plan.layout.prompt_length, batch)

    def finish(self, plan: PrefillPlan) -> None:
        if self._pending is not plan or self._begun is not plan:
            raise RuntimeError("finish() needs the begun plan returned by the latest plan()")
        if self.cache.length != plan.layout.prompt_length:
            raise RuntimeError(f"prefill left the cache at {self.cache.length} slots, expected "
                               f"{plan.layout.prompt_length}")
        self._stamps = plan.stamps.copy()
        self.windows_since_full = 0 if plan.full else self.windows_since_full + 1
        self._pending = None
        self._begun = None

    def _new_frames(self, key: tuple, stamps: np.ndarray, time_base_reset: bool
                    ) -> tuple[int, str]:
        """(new frames per view, "") for a streaming window, else (0, why a full prefill)."""
        if not self.streaming:
            return 0, "streaming off"
        if self._stamps is None:
            return 0, "first window"
        if self._pending is not None:
            return 0, "previous prefill did not finish"
        if time_base_reset:
            return 0, "time base reset"
        if key != self._prompt_key:
            return 0, "prompt before the tail changed"
        shift = frame_shift(self._stamps, stamps)
        if shift is None:
            return 0, "frames are not the previous window's shifted"
        if shift >= stamps.shape[1]:
            return 0, "no frame shared with the previous window"
        return shift, ""


def frame_shift(previous: np.ndarray, stamps: np.ndarray) -> int | None:
    """How many frames per view `stamps` ([V, F]) moved on from `previous` ([V, F]): the k in
    [1, F) whose first F - k frames are the previous last F - k and whose k new frames are all
    newer than the previous newest; F when every frame is newer than the previous newest
    (nothing shared); None otherwise (repeated, dropped or reordered frames)."""
    if previous.shape != stamps.shape:
        return None
    count = stamps.shape[1]
    for k in range(1, count):
        if np.array_equal(stamps[:, :count - k], previous[:, k:]) and np.all(
                stamps[:, count - k] > previous[:, -1]):
            return k
    if np.all(stamps[:, 0] > previous[:, -1]):
        return count
    return None


def encode_frames(vlm: VLM, images: np.ndarray, frames: Sequence[tuple[int, int]],
                  size: tuple[int, int], dtype: torch.dtype = torch.float32,
                  encoder: Callable | None = None
                  ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """images: uint8 [V, F, H, W, 3]; encodes the (view, frame) images in `frames` order
    with `encoder` (the call signature of `VisionEncoder`; default `vlm.visual`).

    Returns (image_embeds [len(frames) * tokens_per_image, H], deepstack list of the same).
    """
    batch = np.stack([images[v, f] for v, f in frames])
    patches, grid_thw = preprocess_images(batch, vlm.visual.cfg, size)
    device = vlm.lm_head.weight.device
    return (encoder or vlm.visual)(patches.to(device=device, dtype=dtype),
                                   grid_thw.to(device))


def run_prefill(target: Target, vlm: VLM, state: StreamingKVCache, plan: PrefillPlan,
                input_ids: torch.Tensor, positions: torch.Tensor, image_embeds: torch.Tensor,
                deepstack: list[torch.Tensor], image_token_id: int, context_len: int = 0
                ) -> PrefillOutput:
    """Runs the plan's queries through the target backbone into the streaming cache.

    input_ids: [1, N] and positions: [3, 1, N] of the full prompt in prompt order;
    image_embeds / deepstack: the encoded `plan.frames_to_encode`. Returns the logits at the
    prompt's last token and the target features (and ids) of its last `context_len` tokens:
    of the tokens run, or, with a feature store, of the last `context_len` prompt slots.
    """
    order = plan.query_order.to(input_ids.device)
    slots = plan.query_slots.to(input_ids.device)
    embeds, visual_mask, deepstack = vlm.place_images(input_ids[:, order], image_embeds,
                                                      deepstack, image_token_id)
    store = state.features
    run_context = order.shape[0] if (store is not None and context_len) else context_len
    state.begin(plan, positions)
    out = prefill(target, embeds, positions[:, :, order], state.cache, slots,
                  state.attention_mask(plan, input_ids.shape[0]), visual_mask, deepstack,
                  run_context, input_ids[0, order])
    state.finish(plan)
    if store is None or out.features is None:
        return out
    store.write(slots, out.features, out.feature_ids)
    n = plan.layout.prompt_length
    keep = torch.arange(max(0, n - context_len), n, device=slots.device)
    features, ids = store.read(keep)
    return dataclasses.replace(out, features=features, feature_slots=keep, feature_ids=ids)
