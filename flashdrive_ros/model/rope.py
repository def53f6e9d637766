"""Real-valued rotate-half rotary embeddings: interleaved M-RoPE (text) and flat 1D RoPE."""

from __future__ import annotations

import torch


def inverse_frequencies(head_dim: int, theta: float,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """inv_freq: [head_dim / 2]."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim
    return 1.0 / (theta ** exponents)


def interleave_mrope(freqs: torch.Tensor, mrope_section: tuple[int, int, int]) -> torch.Tensor:
    """freqs: [3, B, T, D/2] per axis -> [B, T, D/2] with axes interleaved t,h,w,t,h,w,...

    Frequency j takes axis h when j % 3 == 1 and j < 3 * section_h, axis w when
    j % 3 == 2 and j < 3 * section_w, else axis t.
    """
    out = freqs[0].clone()
    for axis, offset in ((1, 1), (2, 2)):
        idx = slice(offset, mrope_section[axis] * 3, 3)
        out[..., idx] = freqs[axis, ..., idx]
    return out


def mrope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                  mrope_section: tuple[int, int, int], interleaved: bool = True,
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """positions: [3, B, T] (t, h, w) -> cos, sin: [B, T, D]."""
    freqs = positions[..., None].to(torch.float32) * inv_freq  # freqs: [3, B, T, D/2]
    if interleaved:
        merged = interleave_mrope(freqs, mrope_section)
    else:
        chunks = freqs.split(list(mrope_section), dim=-1)
        merged = torch.cat([chunk[i] for i, chunk in enumerate(chunks)], dim=-1)
    emb = torch.cat((merged, merged), dim=-1)  # emb: [B, T, D]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def flat_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                 dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """positions: [B, T] 1D sequence indices -> cos, sin: [B, T, D]."""
    freqs = positions[..., None].to(torch.float32) * inv_freq  # freqs: [B, T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, T, D]; cos, sin: [B, T, D]."""
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


def drafter_cos_sin(rotary: str, positions: torch.Tensor, inv_freq: torch.Tensor,
                    mrope_section: tuple[int, int, int], interleaved: bool,
                    dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """rotary "flat": positions [B, S]; "mrope": [3, B, S] -> cos, sin: [B, S, D]."""
    if rotary == "flat":
        return flat_cos_sin(positions, inv_freq, dtype)
    return mrope_cos_sin(positions, inv_freq, mrope_section, interleaved, dtype)
