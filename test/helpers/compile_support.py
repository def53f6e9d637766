"""What torch.compile can build on this machine's CPU."""

import functools

import torch
import torch._inductor.config
from torch._inductor.exc import InductorError
from torch.nn.attention.flex_attention import flex_attention

CPU_FLEX_UNSUPPORTED = "not supported for CPU"


@functools.cache
def inductor_compiles_flex_on_cpu() -> bool:
    """Whether Inductor lowers flex_attention for this CPU: its CPU template needs AVX2 (not
    on Arm, not under ATEN_CPU_CAPABILITY=default), elsewhere it refuses with
    CPU_FLEX_UNSUPPORTED. Any other failure is raised."""
    q, k, v = (torch.randn(1, 1, 16, 16) for _ in range(3))  # each [B, H, T, D]
    with torch._inductor.config.patch(compile_threads=1):
        try:
            torch.compile(flex_attention, dynamic=False)(q, k, v)
        except InductorError as error:
            if CPU_FLEX_UNSUPPORTED in str(error):
                return False
            raise
    return True
