"""Qwen3-VL vision-language model: vision encoder + text backbone + untied lm_head.

Attribute names give the checkpoint keys `model.visual.*`, `model.language_model.*`,
`lm_head.*` (prefixed `vlm.` inside the Alpamayo checkpoint).
"""

from __future__ import annotations

import torch
from torch import nn

from flashdrive_ros.model.backbone import TextBackbone
from flashdrive_ros.model.config import TextConfig, VisionConfig
from flashdrive_ros.model.vision import VisionEncoder


class VLMModel(nn.Module):
    def __init__(self, vision: VisionConfig, text: TextConfig) -> None:
        super().__init__()
        self.visual = VisionEncoder(vision)
        self.language_model = TextBackbone(text)


class VLM(nn.Module):
    def __init__(self, vision: VisionConfig, text: TextConfig) -> None:
        super().__init__()
        if vision.out_hidden_size != text.hidden_size:
            raise ValueError(f"vision out_hidden_size {vision.out_hidden_size} != text "
                             f"hidden_size {text.hidden_size}")
        self.model = VLMModel(vision, text)
        self.lm_head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)

    @property
    def visual(self) -> VisionEncoder:
        return self.model.visual

    @property
    def language_model(self) -> TextBackbone:
        return self.model.language_model

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden: [..., H] (after the final norm) -> [..., vocab]."""
        return self.lm_head(hidden)

    def embed(self, input_ids: torch.Tensor, pixel_patches: torch.Tensor | None,
              grid_thw: torch.Tensor | None, image_token_id: int
              ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """input_ids: [B, T] -> (inputs_embeds [B, T, H], visual_mask [B, T], deepstack list).

        Images are encoded and their tokens placed, in order, at the `image_token_id` slots.
        Without images the visual mask is all False and the deepstack list is empty.
        """
        if pixel_patches is None or grid_thw is None:
            if pixel_patches is not None or grid_thw is not None:
                raise ValueError("pixel_patches and grid_thw must be given together")
            return self.place_images(input_ids, None, [], image_token_id)
        image_embeds, deepstack = self.model.visual(pixel_patches, grid_thw)
        return self.place_images(input_ids, image_embeds, deepstack, image_token_id)

    def place_images(self, input_ids: torch.Tensor, image_embeds: torch.Tensor | None,
                     deepstack: list[torch.Tensor], image_token_id: int
                     ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Token embeddings with already-encoded image tokens ([N_visual, H]) at image slots."""
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [B, T], got {tuple(input_ids.shape)}")
        vocab = self.language_model.cfg.vocab_size
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
            raise ValueError(f"token ids outside the vocabulary [0, {vocab})")
        embeds = self.language_model.embed_tokens(input_ids)  # embeds: [B, T, H]
        visual_mask = input_ids == image_token_id
        count = int(visual_mask.sum())
        given = 0 if image_embeds is None else image_embeds.shape[0]
        if count != given:
            raise ValueError(f"prompt has {count} image tokens but {given} image embeddings "
                             f"were given")
        if image_embeds is None:
            return embeds, visual_mask, []
        if len(deepstack) and any(d.shape != image_embeds.shape for d in deepstack):
            raise ValueError("deepstack features must have the image embeddings' shape")
        embeds = embeds.masked_scatter(visual_mask[..., None], image_embeds.to(embeds.dtype))
        return embeds, visual_mask, list(deepstack)
