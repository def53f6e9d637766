"""Streaming prefill of tiny VLMs over synthetic view-major prompts (3 views x 4 frames)."""

import dataclasses

import numpy as np
import torch

from flashdrive_ros.engine.decoding import Target
from flashdrive_ros.engine.streaming import (
    FrameLayout,
    StreamingKVCache,
    encode_frames,
    run_prefill,
)
from flashdrive_ros.model.config import ModelConfig, TextConfig, tiny
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import prompt_positions
from flashdrive_ros.model.vlm import VLM

IMAGE_TOKEN = 4000
VIEWS, FRAMES = 3, 4
HEIGHT, WIDTH = 48, 64


def make_vlm(layers: int) -> tuple[VLM, ModelConfig]:
    cfg = tiny()
    if layers != cfg.text.num_hidden_layers:
        cfg = dataclasses.replace(
            cfg, text=dataclasses.replace(cfg.text, num_hidden_layers=layers),
            expert=dataclasses.replace(cfg.expert, num_hidden_layers=layers),
            vision=dataclasses.replace(cfg.vision, deepstack_visual_indexes=(1,)),
            drafter=None)
        cfg = ModelConfig.from_dict(cfg.to_dict())
    torch.manual_seed(0)
    vlm = VLM(cfg.vision, cfg.text).eval()
    return vlm, cfg


def camera_frame(view: int, step: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * view + step)
    return rng.integers(0, 256, size=(HEIGHT, WIDTH, 3), dtype=np.uint8)


def window_inputs(step: int):
    """Frames of window `step` are camera steps step .. step + FRAMES - 1, 0.1 s apart."""
    images = np.stack([np.stack([camera_frame(v, step + f) for f in range(FRAMES)])
                       for v in range(VIEWS)])
    stamps = np.array([[0.1 * (step + f) for f in range(FRAMES)] for _ in range(VIEWS)])
    return images, stamps


def prompt(step: int, tokens_per_image: int):
    """View-major prompt: prefix, per view a camera label, per frame a frame label,
    vision markers and image tokens; a tail whose history tokens change every window."""
    ids = [10, 11, 12]
    blocks = []
    for v in range(VIEWS):
        row = []
        ids.append(100 + v)
        for f in range(FRAMES):
            start = len(ids)
            ids += [200 + f, 300] + [IMAGE_TOKEN] * tokens_per_image + [301]
            row.append((start, len(ids)))
        blocks.append(row)
    tail_start = len(ids)
    ids += [400 + (step * 7 + i) % 50 for i in range(6)] + [500]
    return ids, FrameLayout.from_token_ids(ids, IMAGE_TOKEN, blocks, tail_start)


def prefill_window(vlm, cfg, state: StreamingKVCache, step: int, time_base_reset=False):
    images, stamps = window_inputs(step)
    tokens = cfg.tokens_per_image
    ids, layout = prompt(step, tokens)
    input_ids = torch.tensor([ids])
    grid = torch.tensor([[1, HEIGHT // cfg.vision.patch_size, WIDTH // cfg.vision.patch_size]]
                        * (VIEWS * FRAMES))
    positions = prompt_positions(input_ids, grid, IMAGE_TOKEN, cfg.vision.spatial_merge_size)
    plan = state.plan(layout, ids, stamps, time_base_reset)
    with torch.no_grad():
        embeds, deepstack = encode_frames(vlm, images, plan.frames_to_encode, (HEIGHT, WIDTH))
        out = run_prefill(Target(vlm.language_model, vlm.lm_head), vlm, state, plan, input_ids,
                          positions, embeds, deepstack, IMAGE_TOKEN)
    return plan, out, layout, positions


def new_state(cfg, streaming=True) -> StreamingKVCache:
    text: TextConfig = cfg.text
    cache = KVCache(text.num_hidden_layers, 1, text.num_key_value_heads, 512, text.head_dim)
    return StreamingKVCache(cache, streaming=streaming)
