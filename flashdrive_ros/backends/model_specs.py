"""The four exported graphs of a model, with the shapes of one engine configuration."""

from __future__ import annotations

import torch

from flashdrive_ros.backends.backbone_graph import BackboneStepGraph
from flashdrive_ros.backends.graphs import DrafterGraph, ExpertStepGraph, VisionGraph
from flashdrive_ros.backends.specs import EngineShapes, GraphSpec, TensorSpec
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.drafter import Drafter

LONG = "int64"
BOOL = "bool"
FINISH_TOKENS = 3  # pending token, <|cot_end|>, <|traj_future_start|>


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def vision_spec(model: AlpamayoModel, shapes: EngineShapes) -> GraphSpec:
    v = model.cfg.vision
    dtype = dtype_name(model.action_out_proj.weight.dtype)
    h, w = shapes.grid_hw
    patches, tokens = h * w, h * w // v.spatial_merge_size ** 2
    patch_dim = v.in_channels * v.temporal_patch_size * v.patch_size ** 2
    graph = VisionGraph(model.vlm.visual, shapes.grid_hw)
    outputs = tuple(TensorSpec(name, (tokens, v.out_hidden_size), dtype)
                    for name in graph.output_names)
    return GraphSpec("vision", graph, (TensorSpec("pixel_patches", (patches, patch_dim),
                                                  dtype),), outputs, {})


def backbone_spec(model: AlpamayoModel, shapes: EngineShapes) -> GraphSpec:
    text = model.cfg.text
    dtype = dtype_name(model.action_out_proj.weight.dtype)
    levels = len(model.cfg.vision.deepstack_visual_indexes)
    c, hidden = shapes.capacity, text.hidden_size
    cache = (text.num_hidden_layers, 1, text.num_key_value_heads, c, text.head_dim)
    new = (text.num_hidden_layers, 1, text.num_key_value_heads, "T", text.head_dim)
    graph = BackboneStepGraph(model.vlm.language_model, shapes.feature_layers, levels)
    inputs = (TensorSpec("inputs_embeds", (1, "T", hidden), dtype),
              TensorSpec("positions", (3, 1, "T"), LONG),
              TensorSpec("key_positions", (3, 1, c), LONG),
              TensorSpec("slots", ("T",), LONG),
              TensorSpec("attn_mask", (1, 1, "T", c), BOOL),
              TensorSpec("deepstack", (levels, 1, "T", hidden), dtype),
              TensorSpec("k_cache", cache, dtype),
              TensorSpec("v_cache", cache, dtype))
    features = len(shapes.feature_layers) * hidden
    outputs = tuple(TensorSpec(name, shape, dtype) for name, shape in (
        ("hidden", (1, "T", hidden)), ("features", (1, "T", features)),
        ("new_k", new), ("new_v", new)) if name in graph.output_names)
    top = max(shapes.block_size, FINISH_TOKENS)
    profiles = {"decode": {"T": (1, 1, 1)}, "verify": {"T": (2, top, top)}}
    profiles["prefill"] = {"T": (shapes.streaming_length, shapes.streaming_length,
                                 shapes.prompt_length)}
    return GraphSpec("backbone_step", graph, inputs, outputs,
                     {"T": shapes.streaming_length}, profiles)


def drafter_spec(drafter: Drafter, shapes: EngineShapes) -> GraphSpec:
    dtype = dtype_name(drafter.fc.weight.dtype)
    ctx, k = drafter.cfg.context_len, drafter.cfg.block_size
    hidden = drafter.cfg.hidden_size
    positions = (1, ctx + k) if drafter.cfg.rotary == "flat" else (3, 1, ctx + k)
    inputs = (TensorSpec("context_features", (1, ctx, drafter.feature_size), dtype),
              TensorSpec("block_embeds", (1, k, hidden), dtype),
              TensorSpec("positions", positions, LONG))
    return GraphSpec("drafter", DrafterGraph(drafter), inputs,
                     (TensorSpec("hidden", (1, k, hidden), dtype),), {})


def expert_spec(model: AlpamayoModel, shapes: EngineShapes) -> GraphSpec:
    text, a = model.cfg.text, model.cfg.action
    dtype = dtype_name(model.action_out_proj.weight.dtype)
    s, n, c = shapes.num_samples, a.num_waypoints, shapes.capacity
    cache = (text.num_hidden_layers, 1, text.num_key_value_heads, c, text.head_dim)
    inputs = (TensorSpec("x_t", (s, n, a.action_dim), dtype),
              TensorSpec("t", (s,), dtype),
              TensorSpec("positions", (3, 1, n), LONG),
              TensorSpec("key_positions", (3, 1, c), LONG),
              TensorSpec("key_valid", (c,), BOOL),
              TensorSpec("k_cache", cache, dtype),
              TensorSpec("v_cache", cache, dtype))
    return GraphSpec("expert_step", ExpertStepGraph(model), inputs,
                     (TensorSpec("velocity", (s, n, a.action_dim), dtype),), {})


def model_specs(model: AlpamayoModel, drafter: Drafter | None, shapes: EngineShapes
                ) -> list[GraphSpec]:
    specs = [vision_spec(model, shapes), backbone_spec(model, shapes)]
    if drafter is not None:
        specs.append(drafter_spec(drafter, shapes))
    specs.append(expert_spec(model, shapes))
    return specs
