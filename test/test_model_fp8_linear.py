"""FP8 (e4m3) backbone weights: quantization error bounds, the emulated GEMM against a float64
reference, the switch in the engine; on CUDA `_scaled_mm` against the emulation.

e4m3 keeps 3 mantissa bits: a normal value rounds to within 2^-4 of itself (relative), a
subnormal one (below 2^-6 of the scale unit) to within 2^-10 units."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.model.config import ConfigError, tiny
from flashdrive_ros.model.fp8_linear import (
    E4M3_MAX,
    LINEAR_NAMES,
    Fp8Linear,
    fp8_gemm_supported,
    fp8_matmul_cuda,
    fp8_matmul_emulated,
    quantize_rows,
    quantize_tensor,
    use_backbone_weights,
)
from flashdrive_ros.model.vlm import VLM

pytestmark = pytest.mark.usefixtures("one_thread")
needs_fp8_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and fp8_gemm_supported(torch.device("cuda"))),
    reason="torch._scaled_mm with e4m3 needs a CUDA device of compute capability >= 8.9")


def rounding_bound(values: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
    """Largest e4m3 rounding error of `values` at scale `unit` (same shape, broadcast)."""
    return torch.maximum(values.abs() * 2.0 ** -4, unit * 2.0 ** -10) * (1 + 1e-6)


def test_row_quantization_is_within_e4m3_rounding():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 96, generator=g) * torch.logspace(-3, 2, 64)[:, None]
    w8, scale = quantize_rows(weight)
    assert w8.dtype == torch.float8_e4m3fn and scale.shape == (64,)
    back = w8.float() * scale[:, None]
    assert torch.all((back - weight).abs() <= rounding_bound(weight, scale[:, None]))
    assert torch.equal(w8.float().abs().amax(dim=1), torch.full((64,), E4M3_MAX))
    x8, x_scale = quantize_tensor(weight[:5])
    assert x_scale.shape == () and float(x8.float().abs().max()) == E4M3_MAX
    assert torch.all((x8.float() * x_scale - weight[:5]).abs()
                     <= rounding_bound(weight[:5], x_scale))


def test_emulated_gemm_is_the_exact_product_of_the_quantized_values():
    g = torch.Generator().manual_seed(1)
    x, weight = torch.randn(9, 128, generator=g), torch.randn(48, 128, generator=g)
    x8, x_scale = quantize_tensor(x)
    w8, w_scale = quantize_rows(weight)
    got = fp8_matmul_emulated(x8, x_scale, w8, w_scale)
    want = (x8.double() * x_scale.double()) @ (w8.double() * w_scale.double()[:, None]).t()
    torch.testing.assert_close(got.double(), want, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_linear_stays_near_the_linear_it_replaces(dtype):
    torch.manual_seed(2)
    linear = nn.Linear(256, 96, bias=False).to(dtype)
    x = torch.randn(3, 9, 256, dtype=dtype)
    fp8 = Fp8Linear(linear)
    with torch.no_grad():
        got, want = fp8(x), linear(x)
    assert got.shape == want.shape == (3, 9, 96) and got.dtype == dtype
    got, want = got.float(), want.float()
    # each factor within 2^-4 relative: products within ~2^-3 worst case, ~3 % on random data
    assert float((got - want).norm() / want.norm()) < 0.08
    assert fp8.source is linear
    with pytest.raises(ValueError, match="bias-free"):
        Fp8Linear(nn.Linear(4, 4))


def test_switching_the_backbone_weights_swaps_every_decoder_linear_and_back():
    cfg = tiny(vocab_size=512)
    torch.manual_seed(0)
    backbone = VLM(cfg.vision, cfg.text).eval().language_model
    originals = [getattr(getattr(layer, part), name) for layer in backbone.layers
                 for part, name in LINEAR_NAMES]
    count = len(backbone.layers) * len(LINEAR_NAMES)
    assert use_backbone_weights(backbone, "fp8") == count
    assert use_backbone_weights(backbone, "fp8") == 0
    assert all(isinstance(getattr(getattr(layer, part), name), Fp8Linear)
               for layer in backbone.layers for part, name in LINEAR_NAMES)
    assert use_backbone_weights(backbone, "native") == count
    restored = [getattr(getattr(layer, part), name) for layer in backbone.layers
                for part, name in LINEAR_NAMES]
    assert all(a is b for a, b in zip(restored, originals, strict=True))
    with pytest.raises(ValueError, match="backbone weights must be one of"):
        use_backbone_weights(backbone, "int4")


def test_engine_config_validates_the_switch():
    assert EngineConfig().backbone_weights == "native"
    with pytest.raises(ConfigError, match="backbone_weights must be one of"):
        EngineConfig(backbone_weights="fp4")
    with pytest.raises(ConfigError, match="set backend 'torch'"):
        EngineConfig(device="cuda", backend="tensorrt", rotated_keys=False,
                     backbone_weights="fp8")


def engine_parts(device: str, dtype: torch.dtype):
    from helpers.tiny_model import PROMPT_CORPUS as CORPUS

    from flashdrive_ros.model.alpamayo import AlpamayoModel
    from flashdrive_ros.model.drafter import Drafter
    from flashdrive_ros.model.tokenizer import build_tokenizer

    tok = build_tokenizer(CORPUS, vocab_size=4600)
    cfg = tiny(vocab_size=tok.vocab_size)
    torch.manual_seed(0)
    model = AlpamayoModel(cfg).eval().to(device, dtype)
    drafter = Drafter(cfg.drafter, cfg.text).eval().to(device, dtype)
    return model, tok, drafter


def run_engines(device: str, dtype: str, windows: int = 2) -> dict:
    from helpers.windows import window

    from flashdrive_ros.engine.engine import Engine

    model, tok, drafter = engine_parts(device, getattr(torch, dtype))
    plans = {}
    for kind in ("fp8", "native"):
        engine = Engine(model, tok, drafter, EngineConfig(
            device=device, dtype=dtype, max_coc_tokens=8, backbone_weights=kind))
        layer = model.vlm.language_model.layers[0]
        assert isinstance(layer.mlp.down_proj, Fp8Linear) == (kind == "fp8")
        plans[kind] = [engine.step(window(i)) for i in range(windows)]
    return plans


def test_engine_with_fp8_backbone_plans_on_the_cpu_emulation():
    plans = run_engines("cpu", "float32")
    for fp8, native in zip(plans["fp8"], plans["native"], strict=True):
        assert np.isfinite(fp8.trajectories).all() and fp8.coc_token_ids
        assert fp8.trajectories.shape == native.trajectories.shape


@needs_fp8_cuda
@pytest.mark.parametrize("rows", [1, 9, 885])
def test_scaled_mm_matches_the_emulation(rows):
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(rows, 512, generator=g, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(384, 512, generator=g, device="cuda", dtype=torch.bfloat16)
    x8, x_scale = quantize_tensor(x)
    w8, w_scale = quantize_rows(weight)
    one = torch.ones((), device="cuda")
    got = fp8_matmul_cuda(x8, x_scale, w8, w_scale.to(torch.bfloat16), one).float()
    want = fp8_matmul_emulated(x8, x_scale, w8, w_scale)
    # bf16 output and bf16 channel scales: two roundings of 2^-9 relative each
    torch.testing.assert_close(got, want, rtol=2 ** -7, atol=2 ** -7 * float(want.abs().max()))


@needs_fp8_cuda
def test_engine_with_fp8_backbone_under_cuda_graphs():
    plans = run_engines("cuda", "bfloat16", windows=3)
    for fp8, native in zip(plans["fp8"], plans["native"], strict=True):
        assert np.isfinite(fp8.trajectories).all() and fp8.coc_token_ids
        assert fp8.trajectories.shape == native.trajectories.shape
