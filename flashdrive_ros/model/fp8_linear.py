"""FP8 (e4m3) weights for the backbone's linear layers.

Weights are quantized once per output channel (scale = row amax / 448), activations per
tensor at every call. On CUDA the GEMM is `torch._scaled_mm` with per-tensor scales (the
activation scale, 1 for the weight) and the per-channel weight scales multiply its output:
at decode row counts row-wise scales inside the GEMM cost more than they save. Elsewhere the
same arithmetic is emulated (values cast through float8, GEMM in float32), which is also the
numerical reference of the CUDA path.
"""

from __future__ import annotations

import torch
from torch import nn

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
BACKBONE_WEIGHTS = ("native", "fp8")
LINEAR_NAMES = (("self_attn", "q_proj"), ("self_attn", "k_proj"), ("self_attn", "v_proj"),
                ("self_attn", "o_proj"), ("mlp", "gate_proj"), ("mlp", "up_proj"),
                ("mlp", "down_proj"))
TINY = 1e-12


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight: [N, K] -> (e4m3 [N, K], float32 scales [N]); weight ~ e4m3 * scale[:, None]."""
    scale = weight.detach().float().abs().amax(dim=1).clamp_min(TINY) / E4M3_MAX  # [N]
    return (weight.detach().float() / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


def quantize_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x: [..., K] -> (e4m3 of the same shape, float32 scale []); x ~ e4m3 * scale."""
    scale = x.detach().abs().amax().float().clamp_min(TINY) / E4M3_MAX
    return (x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


def fp8_matmul_emulated(x8: torch.Tensor, x_scale: torch.Tensor, w8: torch.Tensor,
                        w_scale: torch.Tensor) -> torch.Tensor:
    """x8: [M, K], w8: [N, K] e4m3 -> float32 [M, N] = (x8 @ w8^T) * x_scale * w_scale."""
    return (x8.float() @ w8.float().t()) * x_scale * w_scale


def fp8_matmul_cuda(x8: torch.Tensor, x_scale: torch.Tensor, w8: torch.Tensor,
                    w_scale: torch.Tensor, one: torch.Tensor) -> torch.Tensor:
    """The same product by `torch._scaled_mm` (per-tensor scales: x_scale and `one`, a float32
    [] 1), then the channel scales ([N] in the output dtype)."""
    out = torch._scaled_mm(x8, w8.t(), scale_a=x_scale, scale_b=one, out_dtype=w_scale.dtype)
    return out * w_scale


class Fp8Linear(nn.Module):
    """A bias-free `nn.Linear` with e4m3 weights; `source` is the linear it replaces."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.bias is not None:
            raise ValueError("Fp8Linear replaces bias-free linear layers only")
        self._source = (linear,)
        weight8, scale = quantize_rows(linear.weight)
        self.register_buffer("weight8", weight8, persistent=False)  # [N, K] e4m3
        self.register_buffer("scale", scale, persistent=False)  # [N] float32
        self.register_buffer("scale_out", scale.to(linear.weight.dtype),
                             persistent=False)  # [N] in the output dtype
        self.register_buffer("one", torch.ones((), device=scale.device), persistent=False)
        self.out_dtype = linear.weight.dtype

    @property
    def source(self) -> nn.Linear:
        return self._source[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., K] -> [..., N] in the source's dtype."""
        rows = x.reshape(-1, x.shape[-1])  # rows: [M, K]
        x8, x_scale = quantize_tensor(rows)
        if x.device.type == "cuda":
            out = fp8_matmul_cuda(x8, x_scale, self.weight8, self.scale_out, self.one)
        else:
            out = fp8_matmul_emulated(x8, x_scale, self.weight8, self.scale)
        return out.to(self.out_dtype).reshape(*x.shape[:-1], -1)


def use_backbone_weights(backbone: nn.Module, kind: str) -> int:
    """Puts the decoder layers' linear layers (q, k, v, o, gate, up, down) of `backbone` in
    `kind` ("fp8": Fp8Linear, "native": the original nn.Linear back); returns how many
    layers changed."""
    if kind not in BACKBONE_WEIGHTS:
        raise ValueError(f"backbone weights must be one of {BACKBONE_WEIGHTS}, got {kind!r}")
    changed = 0
    for layer in backbone.layers:
        for part, name in LINEAR_NAMES:
            parent = getattr(layer, part)
            current = getattr(parent, name)
            if kind == "fp8" and not isinstance(current, Fp8Linear):
                setattr(parent, name, Fp8Linear(current))
                changed += 1
            elif kind == "native" and isinstance(current, Fp8Linear):
                setattr(parent, name, current.source)
                changed += 1
    return changed


def fp8_gemm_supported(device: torch.device) -> bool:
    """CUDA devices with e4m3 tensor cores (compute capability 8.9: Ada, 9.0: Hopper, 10+:
    Blackwell / Thor); other devices run the emulation."""
    if device.type != "cuda":
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)
