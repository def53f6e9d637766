"""The reference VLM: HF transformers Qwen3VLForConditionalGeneration at our config's shape."""

from __future__ import annotations

from collections.abc import Callable

import torch

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.tokenizer import TextTokenizer

ATTENTION = "sdpa"


def hf_config(cfg: ModelConfig, token_id: Callable[[str], int]):
    """The Qwen3-VL config of `cfg`'s shape; token_id: the vocabulary's id of a token."""
    from transformers import Qwen3VLConfig

    v, t = cfg.vision, cfg.text
    config = Qwen3VLConfig(
        vision_config=dict(
            depth=v.depth, hidden_size=v.hidden_size, hidden_act=v.hidden_act,
            intermediate_size=v.intermediate_size, num_heads=v.num_heads,
            in_channels=v.in_channels, patch_size=v.patch_size,
            spatial_merge_size=v.spatial_merge_size, temporal_patch_size=v.temporal_patch_size,
            out_hidden_size=v.out_hidden_size, num_position_embeddings=v.num_position_embeddings,
            deepstack_visual_indexes=list(v.deepstack_visual_indexes)),
        text_config=dict(
            vocab_size=t.vocab_size, hidden_size=t.hidden_size,
            intermediate_size=t.intermediate_size, num_hidden_layers=t.num_hidden_layers,
            num_attention_heads=t.num_attention_heads, num_key_value_heads=t.num_key_value_heads,
            head_dim=t.head_dim, hidden_act=t.hidden_act, rms_norm_eps=t.rms_norm_eps,
            max_position_embeddings=t.max_position_embeddings,
            rope_parameters={"rope_type": "default", "rope_theta": t.rope_theta,
                             "mrope_section": list(t.mrope_section),
                             "mrope_interleaved": t.mrope_interleaved}),
        image_token_id=token_id("<|image_pad|>"),
        video_token_id=token_id("<|video_pad|>"),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
        tie_word_embeddings=False)
    for sub in (config, config.vision_config, config.text_config):
        sub._attn_implementation = ATTENTION
    return config


def build_hf_model(cfg: ModelConfig, tokenizer: TextTokenizer, device: str,
                   dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    """Random weights (HF's own initialisation) in `dtype` on `device`."""
    from transformers import Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3VLForConditionalGeneration(hf_config(cfg, tokenizer.token_id))
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def cache_layers(past) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) [B, Hkv, S, D] per layer of an HF cache object."""
    if hasattr(past, "layers"):
        return [(layer.keys, layer.values) for layer in past.layers]
    return list(zip(past.key_cache, past.value_cache))
