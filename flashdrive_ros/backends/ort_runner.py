"""Runs an exported graph with onnxruntime on the CPU: the reference for the TensorRT
runtime's interface (named torch tensors in, named torch tensors out)."""

from __future__ import annotations

from pathlib import Path

import torch


class OrtGraph:
    def __init__(self, path: str | Path) -> None:
        import onnxruntime as ort
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def __call__(self, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        missing = sorted(set(self.input_names) - set(feeds))
        if missing:
            raise ValueError(f"graph inputs not given: {missing}")
        arrays = {name: feeds[name].detach().cpu().numpy() for name in self.input_names}
        outputs = self.session.run(self.output_names, arrays)
        return {name: torch.from_numpy(out) for name, out in zip(self.output_names, outputs)}
