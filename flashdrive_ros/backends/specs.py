"""What each exported graph takes and returns, in the shapes the engine runs, with the
optimization profiles (ranges of the dynamic token axis T) a TensorRT build needs."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

Dim = int | str
ProfileRanges = dict[str, tuple[int, int, int]]  # symbol -> (min, opt, max)


@dataclass(frozen=True)
class EngineShapes:
    """Sizes fixed by the model, its prompt and the engine settings."""

    capacity: int  # KV cache slots C
    prompt_length: int  # N: a full prefill
    streaming_length: int  # one new frame per view + tail: the shortest streaming prefill
    block_size: int  # K: speculative verify block (pending token + K - 1 drafts)
    context_len: int  # target features the drafter reads
    grid_hw: tuple[int, int]  # patches per image (h, w)
    num_samples: int  # flow-matching samples
    feature_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.streaming_length <= self.prompt_length <= self.capacity:
            raise ValueError(f"need 1 <= streaming_length {self.streaming_length} <= "
                             f"prompt_length {self.prompt_length} <= capacity {self.capacity}")
        if self.block_size < 1 or self.block_size >= self.streaming_length:
            raise ValueError(f"block_size {self.block_size} must be in [1, streaming_length)")


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[Dim, ...]  # ints, or a symbol name for a dynamic axis
    dtype: str  # torch dtype name without the "torch." prefix

    def concrete(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(sizes[d] if isinstance(d, str) else d for d in self.shape)

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass
class GraphSpec:
    name: str
    module: nn.Module
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    example: dict[str, int]  # symbol sizes of the traced example
    profiles: dict[str, ProfileRanges] = field(default_factory=dict)

    @property
    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        axes = {}
        for spec in (*self.inputs, *self.outputs):
            named = {i: d for i, d in enumerate(spec.shape) if isinstance(d, str)}
            if named:
                axes[spec.name] = named
        return axes

    def example_inputs(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, ...]:
        generator = torch.Generator().manual_seed(0)
        return tuple(_example(spec, self.example, generator).to(device) for spec in self.inputs)


def profile_shapes(spec: GraphSpec, profile: str
                   ) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """Input name -> (min, opt, max) shape of one optimization profile."""
    if profile not in spec.profiles:
        raise KeyError(f"graph {spec.name} has no profile {profile!r} "
                       f"(has {sorted(spec.profiles)})")
    ranges = spec.profiles[profile]
    sizes = [{sym: r[i] for sym, r in ranges.items()} for i in range(3)]
    out = {}
    for tensor in spec.inputs:
        missing = [d for d in tensor.shape if isinstance(d, str) and d not in ranges]
        if missing:
            raise ValueError(f"profile {profile!r} of {spec.name} gives no range for {missing}")
        low, opt, high = (tensor.concrete(s) for s in sizes)
        out[tensor.name] = (low, opt, high)
    return out


def select_profile(spec: GraphSpec, sizes: dict[str, int]) -> str:
    """The first profile whose ranges contain every given symbol size."""
    for name, ranges in spec.profiles.items():
        if all(ranges[sym][0] <= size <= ranges[sym][2] for sym, size in sizes.items()
               if sym in ranges):
            return name
    raise ValueError(f"no optimization profile of {spec.name} covers {sizes}; profiles: "
                     f"{spec.profiles}")


def _example(spec: TensorSpec, sizes: dict[str, int], generator: torch.Generator
             ) -> torch.Tensor:
    shape = spec.concrete(sizes)
    dtype = getattr(torch, spec.dtype)
    if dtype == torch.bool:
        return torch.ones(shape, dtype=torch.bool)
    if dtype == torch.long:
        return torch.arange(int(torch.tensor(shape).prod())).reshape(shape) % max(shape[-1], 1)
    return torch.randn(shape, generator=generator).to(dtype)


def symbol_sizes(spec: GraphSpec, feeds: dict[str, torch.Tensor]) -> dict[str, int]:
    """Sizes of the dynamic axes read from the given inputs; inconsistent sizes fail."""
    sizes: dict[str, int] = {}
    for tensor in spec.inputs:
        for axis, dim in enumerate(tensor.shape):
            if isinstance(dim, str) and tensor.name in feeds:
                size = int(feeds[tensor.name].shape[axis])
                if sizes.setdefault(dim, size) != size:
                    raise ValueError(f"{spec.name}: {dim} is {sizes[dim]} in one input and "
                                     f"{size} in {tensor.name}")
    return sizes
