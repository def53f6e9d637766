"""Encoder and backbone steps that run exported graphs (TensorRT engines, or onnxruntime for
tests) behind the call signatures of `VisionEncoder` and `TextBackbone`.

A runner maps named input tensors to named output tensors. The backbone keeps the engine's
`KVCache` as the one source of truth: positions, length and the new keys and values are
written here, around the graph, exactly where `TextBackbone.forward` writes them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from flashdrive_ros.model.backbone import BackboneOutput, TextBackbone
from flashdrive_ros.model.kv_cache import KVCache

Runner = Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]


class GraphEncoder:
    """(pixel_patches [N, P], grid_thw [N_img, 3]) -> (embeds, deepstack) one image at a time
    through a static-shape graph of one (1, h, w) image."""

    def __init__(self, runner: Runner, grid_hw: tuple[int, int], levels: int) -> None:
        self.runner = runner
        self.grid_hw = tuple(grid_hw)
        self.levels = levels

    def __call__(self, pixel_patches: torch.Tensor, grid_thw: torch.Tensor
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        grids = {tuple(int(v) for v in row) for row in grid_thw.tolist()}
        if grids != {(1, *self.grid_hw)}:
            raise ValueError(f"the exported encoder takes images of grid (1, {self.grid_hw}), "
                             f"got {sorted(grids)}")
        per_image = self.grid_hw[0] * self.grid_hw[1]
        outputs = [self.runner({"pixel_patches": patches})
                   for patches in pixel_patches.split(per_image)]
        embeds = torch.cat([out["image_embeds"] for out in outputs])
        deepstack = [torch.cat([out[f"deepstack_{i}"] for out in outputs])
                     for i in range(self.levels)]
        return embeds, deepstack


class GraphBackbone:
    """`TextBackbone.forward` over a `BackboneStepGraph` runner; token embeddings and the
    configuration stay with the torch backbone."""

    def __init__(self, runner: Runner, backbone: TextBackbone, feature_layers: tuple[int, ...],
                 levels: int) -> None:
        self.runner = runner
        self.cfg = backbone.cfg
        self.embed_tokens: nn.Embedding = backbone.embed_tokens
        self.feature_layers = tuple(feature_layers)
        self.levels = levels

    def __call__(self, inputs_embeds: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                 slots: torch.Tensor, attn_mask: torch.Tensor | None = None,
                 visual_mask: torch.Tensor | None = None,
                 deepstack: list[torch.Tensor] | None = None,
                 output_layers: tuple[int, ...] = ()) -> BackboneOutput:
        """Same contract as `TextBackbone.forward` for batch 1; `output_layers` must be among
        the exported feature layers."""
        b, t, hidden = inputs_embeds.shape
        if b != 1 or cache.k.shape[1] != 1:
            raise ValueError("exported backbone steps run batch 1")
        missing = sorted(set(output_layers) - set(self.feature_layers))
        if missing:
            raise ValueError(f"layers {missing} were not exported as features "
                             f"(exported: {self.feature_layers})")
        if int(slots.min()) < 0 or int(slots.max()) >= cache.capacity:
            raise ValueError(f"slots outside the cache capacity {cache.capacity}")
        length = max(cache.length, int(slots.max()) + 1)
        mask = self._mask(attn_mask, slots, length, cache.capacity)
        cache.write_positions(slots, positions)
        cache.advance_to(length)
        dense = inputs_embeds.new_zeros(self.levels, 1, t, hidden)  # [Ld, 1, T, H]
        for level, features in enumerate(deepstack or []):
            dense[level][visual_mask] = features.to(dense.dtype)
        out = self.runner({"inputs_embeds": inputs_embeds.contiguous(),
                           "positions": positions.contiguous(),
                           "key_positions": cache.positions, "slots": slots.contiguous(),
                           "attn_mask": mask, "deepstack": dense,
                           "k_cache": cache.k, "v_cache": cache.v})
        cache.k.index_copy_(3, slots, out["new_k"].to(cache.k))
        cache.v.index_copy_(3, slots, out["new_v"].to(cache.v))
        layer_hidden = {}
        for j, layer in enumerate(self.feature_layers):
            if layer in output_layers:
                layer_hidden[layer] = out["features"][..., j * hidden:(j + 1) * hidden]
        return BackboneOutput(hidden=out["hidden"], layer_hidden=layer_hidden)

    @staticmethod
    def _mask(attn_mask: torch.Tensor | None, slots: torch.Tensor, length: int,
              capacity: int) -> torch.Tensor:
        """[1, 1, T, C] bool over every cache slot; slots >= length are never attended."""
        key_slots = torch.arange(capacity, device=slots.device)
        if attn_mask is None:
            allowed = (key_slots[None, :] <= slots[:, None]) & (key_slots[None, :] < length)
            return allowed[None, None]
        t = slots.shape[0]
        if attn_mask.shape[-2:] != (t, length) or attn_mask.shape[0] != 1:
            raise ValueError(f"attn_mask must be [1, 1, {t}, {length}], got "
                             f"{tuple(attn_mask.shape)}")
        mask = torch.zeros(1, 1, t, capacity, dtype=torch.bool, device=slots.device)
        mask[..., :length] = attn_mask
        return mask
