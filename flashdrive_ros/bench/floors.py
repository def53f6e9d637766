"""Hardware floors measured in the same run: copy bandwidth and dense matmul rate."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from flashdrive_ros.bench.marks import Marks, synchronize

CUDA_COPY_BYTES = 2 << 30
CPU_COPY_BYTES = 64 << 20
CUDA_GEMM_N = 8192
CPU_GEMM_N = 512
REPEATS = 10


@dataclass
class Floors:
    """copy_bytes_per_s: (read + write bytes) / time of a device-to-device copy;
    matmul_flops_per_s: 2 n^3 / time of an n x n x n GEMM in `matmul_dtype`."""

    copy_bytes_per_s: float
    matmul_flops_per_s: float
    copy_buffer_bytes: int
    matmul_n: int
    matmul_dtype: str

    def to_dict(self) -> dict:
        return asdict(self)


def best_ms(device: torch.device, fn, repeats: int = REPEATS) -> float:
    """Fastest of `repeats` timed calls after one warm-up call."""
    fn()
    synchronize(device)
    times = []
    for _ in range(repeats):
        marks = Marks(device)
        marks.mark("start")
        fn()
        marks.mark("end")
        times.append(marks.ms("start", "end"))
    return min(times)


def copy_bandwidth(device: torch.device, nbytes: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    ms = best_ms(device, lambda: dst.copy_(src))
    return 2 * nbytes / (ms * 1e-3)


def matmul_rate(device: torch.device, dtype: torch.dtype, n: int) -> float:
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    ms = best_ms(device, lambda: torch.matmul(a, b, out=out))
    return 2 * n ** 3 / (ms * 1e-3)


def measure_floors(device: str, dtype: torch.dtype) -> Floors:
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    nbytes = CUDA_COPY_BYTES if cuda else CPU_COPY_BYTES
    n = CUDA_GEMM_N if cuda else CPU_GEMM_N
    return Floors(copy_bandwidth(dev, nbytes), matmul_rate(dev, dtype, n), nbytes, n,
                  str(dtype).removeprefix("torch."))
