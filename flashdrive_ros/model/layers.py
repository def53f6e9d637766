"""Layers shared by the Qwen3-style stacks: backbone, action expert and drafters.

Parameter names are Hugging Face's (`weight`, `{gate,up,down}_proj`, `{q,k,v,o}_proj`,
`{q,k}_norm`), so checkpoint keys load unchanged.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, fused: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        self.fused = fused  # False: always the elementary form

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.fused or torch.onnx.is_in_onnx_export():
            return self.unfused(x)
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)

    def unfused(self, x: torch.Tensor) -> torch.Tensor:
        """Elementary-op form (normalize in float32, cast back, scale) for ONNX opset < 23."""
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class AttentionShape(Protocol):
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float


class QKNormAttention(nn.Module):
    """Qwen3 grouped-query attention projections: q/k/v/o without biases, RMSNorm over each
    q and k head. Subclasses decide what the heads attend to."""

    def __init__(self, cfg: AttentionShape, input_size: int | None = None,
                 fused_norm: bool = True) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        width = input_size or cfg.hidden_size
        self.q_proj = nn.Linear(width, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, cfg.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, fused_norm)
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps, fused_norm)

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T, W] -> normed q: [B, Hq, T, D] (before RoPE)."""
        return self.q_norm(self._heads(self.q_proj(x), self.num_heads)).transpose(1, 2)

    def keys(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T, W] -> normed k: [B, Hkv, T, D] (before RoPE)."""
        return self.k_norm(self._heads(self.k_proj(x), self.num_kv_heads)).transpose(1, 2)

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """x: [B, T, W] -> v: [B, Hkv, T, D]."""
        return self._heads(self.v_proj(x), self.num_kv_heads).transpose(1, 2)

    def output(self, heads: torch.Tensor) -> torch.Tensor:
        """heads: [B, Hq, T, D] -> [B, T, H]."""
        b, _, t, _ = heads.shape
        return self.o_proj(heads.transpose(1, 2).reshape(b, t, -1))

    def grouped_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                          mask: torch.Tensor | None = None) -> torch.Tensor:
        """GQA without copies of k and v per head (and without enable_gqa, which does not
        export to ONNX): the query heads sharing a kv head are stacked along the query axis.
        q: [B, Hq, T, D]; k, v: [B, Hkv, S, D]; mask: broadcastable to [B, Hkv, G*T, S]
        -> [B, Hq, T, D]."""
        b, _, t, _ = q.shape
        group = self.num_heads // self.num_kv_heads
        grouped = q.reshape(b, self.num_kv_heads, group * t, self.head_dim)  # [B,Hkv,G*T,D]
        out = F.scaled_dot_product_attention(grouped, k, v, attn_mask=mask)
        return out.reshape(b, self.num_heads, t, self.head_dim)

    def _heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """[B, T, heads * D] -> [B, T, heads, D]."""
        b, t, _ = x.shape
        return x.view(b, t, heads, self.head_dim)
