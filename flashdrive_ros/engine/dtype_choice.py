"""The "auto" device and dtype: the device is cuda when CUDA is available, else cpu; the dtype
bfloat16 on a CPU with native bf16 arithmetic (AVX512-BF16 or AMX), where matrix products run
at twice the float32 rate from half the weight bytes; float32 everywhere else."""

from __future__ import annotations

from flashdrive_ros.engine.config import DTYPES
from flashdrive_ros.model.config import ConfigError

DTYPE_CHOICES = ("auto", *DTYPES)


def resolve_device(device: str) -> str:
    """`device` as given, or for "auto" cuda when CUDA is available, else cpu."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cpu_has_bf16_hardware() -> bool:
    """AVX512-BF16 or AMX on the CPU."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def aten_kernels_at_avx512() -> bool:
    """ATen's CPU kernels built for AVX512 are in use (ATEN_CPU_CAPABILITY=avx2 caps them)."""
    import torch

    return torch.backends.cpu.get_cpu_capability() == "AVX512"


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX on the CPU, with ATen's kernels at AVX512 (ATEN_CPU_CAPABILITY=avx2
    caps them below it, and inductor's bf16 GEMM templates then do not build)."""
    return aten_kernels_at_avx512() and cpu_has_bf16_hardware()


def check_cpu_bfloat16() -> None:
    """Raise ConfigError where bfloat16 cannot run on this CPU: bf16 hardware with ATen's
    kernels capped below AVX512, where its bf16 attention picks a VNNI path the capped build
    lacks ("pack_vnni2 is only supported when avx512 is supported")."""
    if cpu_has_bf16_hardware() and not aten_kernels_at_avx512():
        import torch

        raise ConfigError(f"bfloat16 on this CPU needs ATen's AVX512 kernels, but they are "
                         f"capped at {torch.backends.cpu.get_cpu_capability()} "
                         f"(ATEN_CPU_CAPABILITY): use dtype float32 or auto")


def resolve_dtype(dtype: str, device: str) -> str:
    """`dtype` as given, or for "auto" the dtype chosen for `device` (cpu, cuda[:N])."""
    if dtype not in DTYPE_CHOICES:
        raise ValueError(f"dtype must be one of {DTYPE_CHOICES}, got {dtype!r}")
    if dtype != "auto":
        return dtype
    return "bfloat16" if device == "cpu" and cpu_has_native_bf16() else "float32"
