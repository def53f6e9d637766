"""The "auto" device and dtype: the device is cuda when CUDA is available, else cpu; the dtype
bfloat16 on a CPU with native bf16 arithmetic (AVX512-BF16 or AMX), where matrix products run
at twice the float32 rate from half the weight bytes; float32 everywhere else."""

from __future__ import annotations

from flashdrive_ros.engine.config import DTYPES

DTYPE_CHOICES = ("auto", *DTYPES)


def resolve_device(device: str) -> str:
    """`device` as given, or for "auto" cuda when CUDA is available, else cpu."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX on the CPU, with ATen's kernels at AVX512 (ATEN_CPU_CAPABILITY=avx2
    caps them below it, and inductor's bf16 GEMM templates then do not build)."""
    import torch

    cpu = torch.cpu
    return (torch.backends.cpu.get_cpu_capability() == "AVX512"
            and bool(cpu._is_avx512_bf16_supported() or cpu._is_amx_tile_supported()))


def resolve_dtype(dtype: str, device: str) -> str:
    """`dtype` as given, or for "auto" the dtype chosen for `device` (cpu, cuda[:N])."""
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"dtype must be one of {DTYPE_CHOICES}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    return "bfloat16" if device == "cpu" and cpu_has_native_bf16() else "float32"
