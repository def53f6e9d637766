"""Builds a TensorRT plan from an exported ONNX graph with TensorRT's Python API (10.x)."""

from __future__ import annotations

from pathlib import Path

from flashdrive_ros.backends.engine_cache import PRECISIONS, EngineKey
from flashdrive_ros.backends.specs import GraphSpec, profile_shapes
from flashdrive_ros.backends.tensorrt_import import require_tensorrt

PRECISION_FLAGS = {"fp32": (), "fp16": ("FP16",), "bf16": ("BF16",), "fp8": ("FP8", "FP16")}
CLEARED_FLAGS = {"fp32": ("TF32",)}
DEFAULT_WORKSPACE = 4 << 30


def precision_flags(precision: str) -> tuple[str, ...]:
    """`trt.BuilderFlag` names for a precision. FP8 kernels run only where the graph carries
    FP8 Q/DQ nodes; the FP16 flag covers the rest."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return PRECISION_FLAGS[precision]


def cleared_flags(precision: str) -> tuple[str, ...]:
    """`trt.BuilderFlag` names a precision turns off: TensorRT enables TF32 by default, which
    rounds fp32 matmul inputs to 10 mantissa bits; fp32 plans compute in fp32 as torch does."""
    precision_flags(precision)
    return CLEARED_FLAGS.get(precision, ())


def dynamic_profile_shapes(spec: GraphSpec, profile: str) -> dict:
    """Like `profile_shapes`, for the inputs with a dynamic axis only (the static ones take
    their shape from the graph)."""
    dynamic = {t.name for t in spec.inputs if any(isinstance(d, str) for d in t.shape)}
    return {name: shapes for name, shapes in profile_shapes(spec, profile).items()
            if name in dynamic}


def engine_key(spec: GraphSpec, onnx_sha256: str, precision: str, tensorrt_version: str,
               gpu_name: str, compute_capability: tuple[int, int]) -> EngineKey:
    profiles = {name: {tensor: [list(s) for s in shapes]
                       for tensor, shapes in dynamic_profile_shapes(spec, name).items()}
                for name in spec.profiles}
    return EngineKey(onnx_sha256, tensorrt_version, gpu_name, tuple(compute_capability),
                     precision, profiles)


def build_plan(onnx_path: str | Path, spec: GraphSpec, precision: str,
               workspace_bytes: int = DEFAULT_WORKSPACE) -> bytes:
    """Parse the graph, set (and clear) precision flags and one optimization profile per spec
    profile (in spec order, so profile index i is `list(spec.profiles)[i]`), build,
    serialize."""
    trt = require_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"TensorRT could not parse {onnx_path}: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, workspace_bytes)
    for flag in precision_flags(precision):
        config.set_flag(getattr(trt.BuilderFlag, flag))
    for flag in cleared_flags(precision):
        config.clear_flag(getattr(trt.BuilderFlag, flag))
    for name in spec.profiles:
        profile = builder.create_optimization_profile()
        for tensor, (low, opt, high) in dynamic_profile_shapes(spec, name).items():
            profile.set_shape(tensor, low, opt, high)
        config.add_optimization_profile(profile)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise RuntimeError(f"TensorRT failed to build {spec.name} from {onnx_path}")
    return bytes(plan)
