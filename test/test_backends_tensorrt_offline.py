"""TensorRT parts that run without TensorRT: engine cache keying and integrity, optimization
profiles from the engine's shapes, precision flags, the refusal where TensorRT is absent."""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest
import torch

from flashdrive_ros.backends.base import make_backend
from flashdrive_ros.backends.digest import graph_sha256
from flashdrive_ros.backends.engine_cache import EngineCache, EngineKey, IntegrityError
from flashdrive_ros.backends.model_specs import backbone_spec, vision_spec
from flashdrive_ros.backends.specs import (
    EngineShapes,
    profile_shapes,
    select_profile,
    symbol_sizes,
)
from flashdrive_ros.backends.tensorrt_import import TensorRTUnavailable
from flashdrive_ros.backends.trt_builder import (
    cleared_flags,
    dynamic_profile_shapes,
    engine_key,
    precision_flags,
)
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ConfigError, tiny

SHAPES = EngineShapes(capacity=80, prompt_length=60, streaming_length=20, block_size=8,
                      context_len=8, grid_hw=(6, 8), num_samples=1, feature_layers=(1, 3))
KEY = EngineKey("ab" * 32, "10.13.3", "NVIDIA Thor", (11, 0), "fp16",
                {"decode": {"slots": [[1], [1], [1]]}})


@pytest.fixture(scope="module")
def model():
    return AlpamayoModel(tiny()).eval()


def test_key_digest_changes_with_every_field():
    changes = {"onnx_sha256": "cd" * 32, "tensorrt_version": "10.14.1",
               "gpu_name": "NVIDIA H200", "compute_capability": (9, 0), "precision": "bf16",
               "profiles": {"decode": {"slots": [[1], [1], [2]]}}}
    digests = {KEY.digest()}
    for field, value in changes.items():
        digests.add(EngineKey(**{**KEY.to_dict(), "compute_capability": (11, 0),
                                 field: value}).digest())
    assert len(digests) == 1 + len(changes)
    assert EngineKey(**{**KEY.to_dict(), "compute_capability": (11, 0)}).digest() == \
        KEY.digest()
    with pytest.raises(ValueError, match="precision"):
        EngineKey("ab" * 32, "10.13", "gpu", (8, 7), "int3", {})


def test_cache_round_trip_and_sidecars(tmp_path):
    cache = EngineCache(tmp_path)
    assert cache.load("backbone_step", KEY) is None
    plan = cache.store("backbone_step", KEY, b"plan bytes")
    assert cache.load("backbone_step", KEY) == b"plan bytes"
    assert json.loads(plan.with_suffix(".json").read_text()) == KEY.to_dict()
    assert plan.with_name(plan.name + ".sha256").read_text().split()[1] == plan.name
    other = EngineKey(**{**KEY.to_dict(), "precision": "fp32"})
    assert cache.plan_path("backbone_step", other) != plan
    assert cache.load("backbone_step", other) is None


def test_damaged_plans_are_refused(tmp_path):
    cache = EngineCache(tmp_path)
    plan = cache.store("vision", KEY, b"plan bytes")
    plan.write_bytes(b"plan bytez")
    with pytest.raises(IntegrityError, match="SHA-256"):
        cache.load("vision", KEY)
    plan = cache.store("vision", KEY, b"plan bytes")
    plan.with_suffix(".json").write_text(json.dumps({**KEY.to_dict(), "gpu_name": "other"}))
    with pytest.raises(IntegrityError, match="key"):
        cache.load("vision", KEY)
    cache.store("vision", KEY, b"plan bytes")
    plan.with_name(plan.name + ".sha256").unlink()
    with pytest.raises(IntegrityError, match="no recorded"):
        cache.load("vision", KEY)


def test_get_or_build_builds_once_and_rebuilds_a_damaged_plan(tmp_path):
    cache = EngineCache(tmp_path)
    builds = []

    def build() -> bytes:
        builds.append(1)
        return f"plan {len(builds)}".encode()

    assert cache.get_or_build("drafter", KEY, build) == b"plan 1"
    assert cache.get_or_build("drafter", KEY, build) == b"plan 1"
    cache.plan_path("drafter", KEY).write_bytes(b"truncated")
    assert cache.get_or_build("drafter", KEY, build) == b"plan 2"
    assert len(builds) == 2
    assert cache.load("drafter", KEY) == b"plan 2"


def test_backbone_profiles_follow_the_engine_shapes(model):
    spec = backbone_spec(model, SHAPES)
    assert list(spec.profiles) == ["decode", "verify", "prefill"]
    text = model.cfg.text
    cache = (text.num_hidden_layers, 1, text.num_key_value_heads, 80, text.head_dim)
    prefill = profile_shapes(spec, "prefill")
    assert prefill["inputs_embeds"] == ((1, 20, 128), (1, 20, 128), (1, 60, 128))
    assert prefill["attn_mask"] == ((1, 1, 20, 80), (1, 1, 20, 80), (1, 1, 60, 80))
    assert prefill["k_cache"] == (cache, cache, cache)
    assert profile_shapes(spec, "verify")["slots"] == ((2,), (8,), (8,))
    assert profile_shapes(spec, "decode")["positions"] == ((3, 1, 1),) * 3
    dynamic = dynamic_profile_shapes(spec, "decode")
    assert set(dynamic) == {"inputs_embeds", "positions", "slots", "attn_mask", "deepstack"}
    key = engine_key(spec, "ef" * 32, "fp16", "10.13.3", "Thor", (11, 0))
    assert key.profiles["verify"]["slots"] == [[2], [8], [8]]
    with pytest.raises(KeyError):
        profile_shapes(spec, "train")
    without_drafter = backbone_spec(model, dataclasses.replace(SHAPES, block_size=1))
    assert profile_shapes(without_drafter, "verify")["slots"] == ((2,), (3,), (3,))


def test_profile_selection_by_token_count(model):
    spec = backbone_spec(model, SHAPES)
    assert select_profile(spec, {"T": 1}) == "decode"
    assert select_profile(spec, {"T": 3}) == "verify"
    assert select_profile(spec, {"T": 8}) == "verify"
    assert select_profile(spec, {"T": 20}) == "prefill"
    assert select_profile(spec, {"T": 60}) == "prefill"
    for t in (9, 61):
        with pytest.raises(ValueError, match="no optimization profile"):
            select_profile(spec, {"T": t})
    feeds = {"inputs_embeds": torch.zeros(1, 5, 128), "slots": torch.zeros(4)}
    with pytest.raises(ValueError, match="T is 5"):
        symbol_sizes(spec, feeds)
    assert symbol_sizes(spec, {"slots": torch.zeros(4)}) == {"T": 4}


@pytest.mark.parametrize("make_spec", [vision_spec, backbone_spec])
def test_exports_are_reproducible_so_cached_plans_are_found(model, make_spec, tmp_path):
    """The tensorrt backend exports its graphs at every start and keys plans by the graph's
    SHA-256: a second export must give the same bytes, other shapes other bytes."""
    pytest.importorskip("onnx")
    from flashdrive_ros.backends.onnx_export import export_graph

    first = graph_sha256(export_graph(make_spec(model, SHAPES), tmp_path / "a"))
    again = graph_sha256(export_graph(make_spec(model, SHAPES), tmp_path / "b"))
    other = dataclasses.replace(SHAPES, capacity=96, grid_hw=(8, 8))
    changed = graph_sha256(export_graph(make_spec(model, other), tmp_path / "c"))
    assert first == again
    assert changed != first


def test_precision_flags():
    assert precision_flags("fp32") == ()
    assert precision_flags("fp16") == ("FP16",)
    assert precision_flags("bf16") == ("BF16",)
    assert "FP8" in precision_flags("fp8")
    with pytest.raises(ValueError):
        precision_flags("int8")
    assert cleared_flags("fp32") == ("TF32",)
    assert all(cleared_flags(p) == () for p in ("fp16", "bf16", "fp8"))
    with pytest.raises(ValueError):
        cleared_flags("int8")


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None,
                    reason="TensorRT is installed here")
def test_selecting_tensorrt_without_it_fails_clearly(model):
    with pytest.raises(TensorRTUnavailable) as info:
        make_backend("tensorrt", model, lambda: SHAPES)
    message = str(info.value)
    assert "import tensorrt" in message and "JetPack 7" in message
    assert "backend: torch" in message
    assert isinstance(info.value, ConfigError)


def test_engine_config_accepts_tensorrt_on_cuda_only():
    cfg = EngineConfig(backend="tensorrt", device="cuda")
    assert cfg.cuda_graphs is False
    assert EngineConfig(device="cuda").cuda_graphs is True
    with pytest.raises(ConfigError, match="CUDA device"):
        EngineConfig(backend="tensorrt", device="cpu")
    with pytest.raises(ConfigError, match="cuda_graphs"):
        EngineConfig(backend="tensorrt", device="cuda", cuda_graphs=True)
