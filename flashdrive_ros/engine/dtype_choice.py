"""The engine's compute dtype for a device: "auto" resolves to bfloat16 on a CPU with native
bf16 arithmetic (AVX512-BF16 or AMX), where matrix products run at twice the float32 rate from
half the weight bytes; float32 everywhere else."""

from __future__ import annotations

DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")


def cpu_has_native_bf16() -> bool:
    import torch

    cpu = torch.cpu
    return bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported())


def resolve_dtype(dtype: str, device: str) -> str:
    """`dtype` as given, or for "auto" the dtype chosen for `device` (cpu, cuda[:N])."""
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"dtype must be one of {DTYPE_CHOICES}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    return "bfloat16" if device == "cpu" and cpu_has_native_bf16() else "float32"
