"""The drafter file of a model directory: its default name and the check of a chosen name."""

from __future__ import annotations

DRAFTER_FILE = "drafter.safetensors"
MROPE_DRAFTER_FILE = "drafter_mrope.safetensors"  # the M-RoPE drafter shipped for comparison


def drafter_name_problem(name: str) -> str:
    """Why `name` cannot name a drafter file in a model directory ("" when it can)."""
    if "/" in name or not name.endswith(".safetensors"):
        return f"must be a .safetensors file name in the model directory, got {name!r}"
    return ""
