"""SHA-256 of files, streamed."""

from __future__ import annotations

import hashlib
from pathlib import Path

CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def graph_sha256(onnx_path: str | Path) -> str:
    """SHA-256 of an exported graph: of the .onnx file alone when it is the only file of its
    folder, else of every file's name and SHA-256 in name order (external weight data)."""
    onnx_path = Path(onnx_path)
    files = sorted(p for p in onnx_path.parent.iterdir() if p.is_file())
    if files == [onnx_path]:
        return sha256_file(onnx_path)
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()
