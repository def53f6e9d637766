"""Operator and opset check of an ONNX graph against the TensorRT 10.13 parser's support."""

from __future__ import annotations

from pathlib import Path

import onnx

from flashdrive_ros.backends.trt_onnx_ops import MAX_OPSET, SUPPORTED_OPS


def op_types(model: onnx.ModelProto) -> set[str]:
    """Every op type of the graph and of its control-flow subgraphs."""
    found: set[str] = set()
    pending = [model.graph]
    while pending:
        graph = pending.pop()
        for node in graph.node:
            found.add(node.op_type)
            for attr in node.attribute:
                pending.extend([attr.g] if attr.HasField("g") else [])
                pending.extend(attr.graphs)
    return found


def tensorrt_problems(path: str | Path) -> list[str]:
    """Reasons the TensorRT 10.13 parser would reject the graph: unsupported ops, a default
    opset above 20, non-default op domains; empty when none."""
    model = onnx.load(str(path), load_external_data=False)
    problems = [f"op {op} is not in the TensorRT 10.13 ONNX support list"
                for op in sorted(op_types(model) - SUPPORTED_OPS)]
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > MAX_OPSET:
            problems.append(f"opset {entry.version} > {MAX_OPSET}")
        elif entry.domain not in ("", "ai.onnx"):
            problems.append(f"custom op domain {entry.domain!r}")
    return problems
