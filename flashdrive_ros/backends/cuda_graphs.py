"""CUDA graph capture of fixed-shape steps, in one place, with an eager switch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

TensorTree = torch.Tensor | tuple | list | dict


def _shape_key(tensors: tuple[torch.Tensor, ...]) -> tuple:
    return tuple((tuple(t.shape), t.dtype, t.device) for t in tensors)


@dataclass
class _CapturedGraph:
    graph: torch.cuda.CUDAGraph
    static_inputs: tuple[torch.Tensor, ...]
    static_output: TensorTree


class GraphedStep:
    """Runs `fn(*tensors)` eagerly or by replaying a CUDA graph captured per input shape.

    Every argument is a tensor; everything else `fn` needs must be fixed at construction.
    Replay copies the arguments into static buffers, so callers may pass fresh tensors. The
    returned tensors are the graph's static outputs: they are overwritten by the next call,
    clone them to keep them. State that `fn` mutates in place (a KV cache) must live at a
    fixed address across calls.
    """

    def __init__(self, fn: Callable[..., TensorTree], enabled: bool = True,
                 warmup_iters: int = 2, pool: tuple | None = None) -> None:
        self.fn = fn
        self.enabled = enabled and torch.cuda.is_available()
        self.warmup_iters = warmup_iters
        self.pool = pool
        self._graphs: dict[tuple, _CapturedGraph] = {}

    @property
    def captured_shapes(self) -> int:
        return len(self._graphs)

    def __call__(self, *tensors: torch.Tensor) -> TensorTree:
        if not self.enabled or not tensors[0].is_cuda:
            return self.fn(*tensors)
        key = _shape_key(tensors)
        captured = self._graphs.get(key)
        if captured is None:
            captured = self._capture(tensors)
            self._graphs[key] = captured
        for static, fresh in zip(captured.static_inputs, tensors):
            static.copy_(fresh)
        captured.graph.replay()
        return captured.static_output

    def _capture(self, tensors: tuple[torch.Tensor, ...]) -> _CapturedGraph:
        static_inputs = tuple(t.clone() for t in tensors)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup_iters):
                self.fn(*static_inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            static_output = self.fn(*static_inputs)
        return _CapturedGraph(graph, static_inputs, static_output)

    def reset(self) -> None:
        self._graphs.clear()
