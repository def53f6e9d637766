"""TensorRT engines built from the exported graphs: the plan cache, the runtime's in-place
binding, fp32 parity with torch, and the engine on backend tensorrt. Skipped, with the reason,
where TensorRT does not import or CUDA is absent."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.windows import sliding_windows

from flashdrive_ros.backends import base
from flashdrive_ros.backends.base import CACHE_ENV, tensorrt_backend
from flashdrive_ros.backends.specs import EngineShapes
from flashdrive_ros.backends.tensorrt_import import TensorRTUnavailable, require_tensorrt
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions
from flashdrive_ros.paths import default_model_dir


def unavailable() -> str | None:
    try:
        require_tensorrt()
    except TensorRTUnavailable as exc:
        return str(exc)
    if not torch.cuda.is_available():
        return "TensorRT engines need a CUDA device"
    return None


REASON = unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

ATOL = 1e-3
MAX_COC = 6
SHAPES = EngineShapes(capacity=80, prompt_length=60, streaming_length=20, block_size=8,
                      context_len=8, grid_hw=(6, 8), num_samples=2, feature_layers=(3, 1))


@pytest.fixture(scope="module")
def model() -> AlpamayoModel:
    torch.manual_seed(0)
    return AlpamayoModel(tiny()).eval().to("cuda")


@pytest.fixture(scope="module")
def backend(model, tmp_path_factory):
    return tensorrt_backend(model, SHAPES, tmp_path_factory.mktemp("plans"))


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    np.testing.assert_allclose(got.float().cpu().numpy(), want.float().cpu().numpy(),
                               atol=ATOL, rtol=0)


def test_plans_are_built_once_then_loaded_from_the_cache(model, tmp_path, monkeypatch):
    builds = []
    build = base.build_plan

    def counted(path, spec, precision):
        builds.append(spec.name)
        return build(path, spec, precision)

    monkeypatch.setattr(base, "build_plan", counted)
    tensorrt_backend(model, SHAPES, tmp_path)
    assert sorted(builds) == ["backbone_step", "vision"]
    assert sorted(p.name.split("-")[0] for p in tmp_path.glob("*.plan")) == sorted(builds)
    tensorrt_backend(model, SHAPES, tmp_path)
    assert len(builds) == 2


def test_runtime_binds_inputs_in_place_on_its_own_stream(backend):
    runner = backend.encoder.runner
    assert runner.stream != torch.cuda.current_stream()
    h, w = SHAPES.grid_hw
    width = runner.spec.inputs[0].shape[1]
    patches = torch.randn(h * w, width, device="cuda")
    outputs = runner({"pixel_patches": patches})
    assert all(out.is_cuda for out in outputs.values())
    with pytest.raises(ValueError, match="contiguous"):
        runner({"pixel_patches": torch.randn(width, h * w, device="cuda").t()})
    with pytest.raises(ValueError, match="contiguous"):
        runner({"pixel_patches": patches.cpu()})
    with pytest.raises(ValueError, match="not given"):
        runner({})


def test_vision_engine_matches_torch(model, backend):
    h, w = SHAPES.grid_hw
    grid = torch.tensor([[1, h, w]] * 3, device="cuda")
    width = backend.encoder.runner.spec.inputs[0].shape[1]
    patches = torch.randn(3 * h * w, width, device="cuda")
    got = backend.encoder(patches, grid)
    with torch.no_grad():
        want = model.vlm.visual(patches, grid)
    _close(got[0], want[0])
    assert len(got[1]) == len(want[1])
    for mine, theirs in zip(got[1], want[1]):
        _close(mine, theirs)


def _cache(model: AlpamayoModel) -> KVCache:
    t = model.cfg.text
    return KVCache(t.num_hidden_layers, 1, t.num_key_value_heads, SHAPES.capacity, t.head_dim,
                   device="cuda")


def _step(backbone, cache, embeds, positions, slots):
    with torch.no_grad():
        return backbone(embeds, positions, cache, slots, output_layers=(1, 3))


def test_backbone_prefill_verify_decode_sequence_matches_torch(model, backend):
    """Each token count runs in its own optimization profile (prefill, verify, decode)."""
    torch_backbone = model.vlm.language_model
    ref, ext = _cache(model), _cache(model)
    hidden, n, k = model.cfg.text.hidden_size, SHAPES.prompt_length, SHAPES.block_size
    steps = [(torch.randn(1, n, hidden, device="cuda"), text_positions(0, n, device="cuda"),
              torch.arange(n, device="cuda")),
             (torch.randn(1, k, hidden, device="cuda"), text_positions(n, k, device="cuda"),
              torch.arange(n, n + k, device="cuda"))]
    for embeds, positions, slots in steps:
        want = _step(torch_backbone, ref, embeds, positions, slots)
        got = _step(backend.backbone, ext, embeds, positions, slots)
        _close(got.hidden, want.hidden)
        for layer in (1, 3):
            _close(got.layer_hidden[layer], want.layer_hidden[layer])
        assert ext.length == ref.length
        _close(ext.k[:, :, :, :ext.length], ref.k[:, :, :, :ref.length])
    for cache in (ref, ext):
        cache.rollback(n + 3)
    one = (torch.randn(1, 1, hidden, device="cuda"), text_positions(n + 3, 1, device="cuda"),
           torch.tensor([n + 3], device="cuda"))
    _close(_step(backend.backbone, ext, *one).hidden, _step(torch_backbone, ref, *one).hidden)
    _close(ext.v[:, :, :, :ext.length], ref.v[:, :, :, :ref.length])


def test_engine_on_tensorrt_plans_like_the_torch_engine(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    common = dict(device="cuda", max_coc_tokens=MAX_COC, rotated_keys=False)
    reference = Engine.load(default_model_dir(), EngineConfig(cuda_graphs=False, **common))
    engine = Engine.load(default_model_dir(), EngineConfig(backend="tensorrt", **common))
    assert engine.backend.name == "tensorrt"
    assert len(list(tmp_path.glob("*.plan"))) == 2
    for window in sliding_windows(reference, 2):
        want, got = reference.step(window), engine.step(window)
        assert got.full_prefill == want.full_prefill
        assert got.coc_token_ids == want.coc_token_ids
        assert got.accepted_lengths == want.accepted_lengths
        np.testing.assert_allclose(got.trajectories, want.trajectories, atol=1e-2, rtol=0)
