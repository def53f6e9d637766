import numpy as np
import pytest
import torch

from flashdrive_ros.engine import dtype_choice
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.dtype_choice import resolve_dtype
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.types import Window
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ConfigError, tiny
from flashdrive_ros.model.expert import expert_positions
from flashdrive_ros.model.tokenizer import build_tokenizer


@pytest.mark.parametrize("native,device,expected", [
    (True, "cpu", "bfloat16"), (False, "cpu", "float32"), (True, "cuda", "float32"),
    (True, "cuda:1", "float32")])
def test_auto_is_bfloat16_only_on_a_cpu_with_native_bf16(monkeypatch, native, device,
                                                         expected):
    monkeypatch.setattr(dtype_choice, "cpu_has_native_bf16", lambda: native)
    assert resolve_dtype("auto", device) == expected
    assert resolve_dtype("float32", device) == "float32"
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("int8", device)


@pytest.mark.parametrize("capability,bf16,amx,expected", [
    ("AVX512", True, False, True), ("AVX512", False, True, True), ("AVX512", False, False, False),
    ("AVX2", True, True, False), ("DEFAULT", True, False, False)])
def test_native_bf16_needs_the_cpu_and_aten_kernels_at_avx512(monkeypatch, capability, bf16,
                                                              amx, expected):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert dtype_choice.cpu_has_native_bf16() is expected


def test_a_bfloat16_engine_on_capped_aten_kernels_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    tok = build_tokenizer(["the car ahead brakes."] * 10, vocab_size=4600)
    model = AlpamayoModel(tiny(vocab_size=tok.vocab_size)).eval().to(torch.bfloat16)
    with pytest.raises(ConfigError, match="capped at AVX2"):
        Engine(model, tok, None, EngineConfig(dtype="bfloat16", speculative=False))
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    Engine(model, tok, None, EngineConfig(dtype="bfloat16", speculative=False))


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def test_bfloat16_engine_against_its_float32_plain_path():
    """Same weights, same window: the same CoC, and a committed KV cache and action-expert
    output within bf16 rounding of the float32 engine's. (The random model's final LayerNorm
    of the action input projection and its curvature integration amplify any rounding, so
    the input projection and the trajectories are not compared.)"""
    try:
        dtype_choice.check_cpu_bfloat16()
    except ConfigError as exc:
        pytest.skip(str(exc))
    torch.set_num_threads(1)
    tok = build_tokenizer(["the car ahead brakes, so the ego vehicle slows down."] * 10,
                          vocab_size=4600)
    cfg = tiny(vocab_size=tok.vocab_size)
    torch.manual_seed(0)
    state = AlpamayoModel(cfg).eval().state_dict()
    rng = np.random.default_rng(0)
    history = np.zeros((16, 4))
    history[:, 0] = np.linspace(-4.5, 0.0, 16)
    window = Window(t0=0.3, images=rng.integers(0, 256, (4, 4, 48, 64, 3), dtype=np.uint8),
                    image_stamps=np.tile(0.1 * np.arange(4.0), (4, 1)), ego_history=history,
                    speed=3.0)
    tokens = torch.randn(2, cfg.action.num_waypoints, cfg.expert.hidden_size)
    runs = {}
    for dtype in ("float32", "bfloat16"):
        model = AlpamayoModel(cfg).eval()
        model.load_state_dict(state)
        engine = Engine(model.to(getattr(torch, dtype)), tok, None,
                        EngineConfig(dtype=dtype, speculative=False, num_samples=2,
                                     max_coc_tokens=8))
        plan = engine.step(window)
        cache = engine.stream.cache
        positions = expert_positions(cache, cache.length, cfg.action.num_waypoints)
        with torch.no_grad():
            hidden = engine.model.expert(tokens.to(engine.dtype), positions, cache,
                                         cache.length)
        runs[dtype] = plan, cache, hidden
    (fp32, fp32_cache, fp32_h), (bf16, bf16_cache, bf16_h) = runs["float32"], runs["bfloat16"]
    assert bf16.coc_token_ids == fp32.coc_token_ids
    assert np.isfinite(bf16.trajectories).all()
    length = fp32_cache.length
    assert bf16_cache.length == length
    assert relative_error(bf16_cache.k[..., :length, :], fp32_cache.k[..., :length, :]) < 0.03
    assert relative_error(bf16_cache.v[..., :length, :], fp32_cache.v[..., :length, :]) < 0.03
    assert relative_error(bf16_h, fp32_h) < 0.03
