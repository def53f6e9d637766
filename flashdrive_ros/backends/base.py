"""The backend interface the engine runs its encoder and backbone steps through.

`encoder` has the call signature of `VisionEncoder.forward`; `backbone` that of
`TextBackbone.forward` plus its `cfg` and `embed_tokens`. The torch backend is the model's own
modules; the tensorrt backend runs exported graphs as TensorRT engines.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from flashdrive_ros.backends.digest import graph_sha256
from flashdrive_ros.backends.engine_cache import EngineCache
from flashdrive_ros.backends.graph_backend import GraphBackbone, GraphEncoder
from flashdrive_ros.backends.model_specs import backbone_spec, vision_spec
from flashdrive_ros.backends.onnx_export import export_graph
from flashdrive_ros.backends.specs import EngineShapes
from flashdrive_ros.backends.tensorrt_import import require_tensorrt
from flashdrive_ros.backends.trt_builder import build_plan, engine_key
from flashdrive_ros.backends.trt_runtime import TrtGraph
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ConfigError

CACHE_ENV = "FLASHDRIVE_ENGINE_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "flashdrive_ros" / "tensorrt"
PRECISION_OF_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass
class Backend:
    name: str
    encoder: Callable[..., tuple[torch.Tensor, list[torch.Tensor]]]
    backbone: Any


def torch_backend(model: AlpamayoModel) -> Backend:
    return Backend("torch", model.vlm.visual, model.vlm.language_model)


def engine_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, DEFAULT_CACHE))


def make_backend(name: str, model: AlpamayoModel, shapes: Callable[[], EngineShapes]
                 ) -> Backend:
    """`shapes` is called only by backends that need them (tensorrt)."""
    if name == "torch":
        return torch_backend(model)
    if name == "tensorrt":
        return tensorrt_backend(model, shapes(), engine_cache_dir())
    raise ConfigError(f"unknown backend {name!r}")


def tensorrt_backend(model: AlpamayoModel, shapes: EngineShapes, cache_dir: Path) -> Backend:
    """Exports the encoder and backbone step graphs, loads their plans from the engine cache
    (building the missing or damaged ones) and binds them to the model's device."""
    trt = require_tensorrt()
    weight = model.action_out_proj.weight
    if weight.device.type != "cuda":
        raise ConfigError(f"backend 'tensorrt' needs the model on a CUDA device, got "
                          f"{weight.device}")
    precision = PRECISION_OF_DTYPE[weight.dtype]
    gpu = (torch.cuda.get_device_name(weight.device),
           torch.cuda.get_device_capability(weight.device))
    cache = EngineCache(cache_dir)
    runners = {}
    with tempfile.TemporaryDirectory() as tmp:
        for spec in (vision_spec(model, shapes), backbone_spec(model, shapes)):
            path = export_graph(spec, tmp)
            key = engine_key(spec, graph_sha256(path), precision, trt.__version__, *gpu)
            plan = cache.get_or_build(spec.name, key,
                                      lambda: build_plan(path, spec, precision))
            runners[spec.name] = TrtGraph(plan, spec, weight.device)
    levels = len(model.cfg.vision.deepstack_visual_indexes)
    encoder = GraphEncoder(runners["vision"], shapes.grid_hw, levels)
    backbone = GraphBackbone(runners["backbone_step"], model.vlm.language_model,
                             shapes.feature_layers, levels)
    return Backend("tensorrt", encoder, backbone)
