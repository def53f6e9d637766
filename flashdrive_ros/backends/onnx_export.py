"""ONNX export of the graph specs (opset 20, TorchScript exporter) plus a manifest."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import onnx
import torch

from flashdrive_ros.backends.digest import graph_sha256
from flashdrive_ros.backends.specs import GraphSpec, profile_shapes

OPSET = 20
MANIFEST_FILE = "manifest.json"


def export_graph(spec: GraphSpec, out_dir: str | Path, opset: int = OPSET) -> Path:
    """Writes `out_dir/<name>/<name>.onnx` (weights over 2 GB go to external data files in
    the same folder) and returns its path."""
    path = Path(out_dir) / spec.name / f"{spec.name}.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    device = next(spec.module.parameters()).device
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(spec.module.eval(), spec.example_inputs(device), str(path),
                          input_names=[t.name for t in spec.inputs],
                          output_names=[t.name for t in spec.outputs],
                          dynamic_axes=spec.dynamic_axes, opset_version=opset, dynamo=False)
    onnx.checker.check_model(str(path))
    return path


def manifest_entry(spec: GraphSpec, path: Path, root: Path, opset: int = OPSET) -> dict:
    profiles = {name: {tensor: [list(s) for s in shapes]
                       for tensor, shapes in profile_shapes(spec, name).items()}
                for name in spec.profiles}
    return {"name": spec.name, "file": str(path.relative_to(root)), "sha256": graph_sha256(path),
            "opset": opset,
            "inputs": [t.to_dict() for t in spec.inputs],
            "outputs": [t.to_dict() for t in spec.outputs],
            "profiles": profiles}


def export_all(specs: list[GraphSpec], out_dir: str | Path, extra: dict | None = None,
               opset: int = OPSET) -> dict:
    """Exports every spec and writes `out_dir/manifest.json`; returns the manifest."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    graphs = [manifest_entry(spec, export_graph(spec, out_dir, opset), out_dir, opset)
              for spec in specs]
    manifest = {"opset": opset, **(extra or {}), "graphs": graphs}
    (out_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
