"""Model directories: config.json + safetensors (single or sharded with an index) + tokenizer.json.

Weights are read only through safetensors. Every problem found while loading (missing file,
shard named in the index but absent, file that is not safetensors or is truncated, missing,
unexpected or mis-shaped tensor) is collected and raised as one WeightsError.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.model.tokenizer import TextTokenizer

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
MAX_HEADER_BYTES = 100 * 1024 * 1024


class WeightsError(ValueError):
    """A model directory's weights cannot be loaded; the message lists every problem."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"cannot load weights from {path} ({len(problems)} problem(s)):\n"
                         f"{lines}")


def _shard_name(i: int, n: int) -> str:
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def _shards(state: Mapping[str, torch.Tensor], shard_bytes: int) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if groups[-1] and size + nbytes > shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(name)
        size += nbytes
    return groups


def save_model_dir(model: nn.Module, cfg: ModelConfig, tokenizer: TextTokenizer,
                   path: str | Path, shard_bytes: int | None = None) -> Path:
    """Write config.json, tokenizer.json and the state dict (sharded when shard_bytes given)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if shard_bytes is not None and shard_bytes <= 0:
        raise ValueError(f"shard_bytes must be > 0, got {shard_bytes}")
    for old in [*path.glob("model*.safetensors"), path / INDEX_FILE]:
        old.unlink(missing_ok=True)
    state = {name: t.detach().to("cpu").clone().contiguous()
             for name, t in model.state_dict().items()}
    cfg.save(path / CONFIG_FILE)
    tokenizer.save(path / TOKENIZER_FILE)
    meta = {"format": "pt"}
    if shard_bytes is None:
        save_file(state, str(path / SINGLE_FILE), metadata=meta)
        return path
    groups = _shards(state, shard_bytes)
    weight_map = {}
    for i, names in enumerate(groups):
        file = _shard_name(i, len(groups))
        save_file({n: state[n] for n in names}, str(path / file), metadata=meta)
        weight_map.update({n: file for n in names})
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return path


def _check_safetensors(file: Path) -> tuple[dict | None, str | None]:
    """(header, None) for a complete safetensors file, else (None, problem)."""
    size = file.stat().st_size
    with file.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return None, f"{file.name}: too short to be safetensors ({size} bytes)"
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            return None, (f"{file.name}: not a safetensors file (bad header length; a pickle or "
                          f"torch.save file is not accepted)")
        raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, IndexError,
            ValueError, AttributeError):
        return None, f"{file.name}: not a safetensors file (header is not valid JSON metadata)"
    expected = 8 + n + max(ends, default=0)
    if size < expected:
        return None, f"{file.name}: truncated ({size} bytes, header describes {expected})"
    if size > expected:
        return None, f"{file.name}: {size - expected} trailing bytes after the tensor data"
    return header, None


def check_safetensors_file(file: str | Path) -> dict:
    """The header of a complete safetensors file; WeightsError (naming a pickle or torch.save
    file as such) for anything else."""
    file = Path(file)
    if not file.is_file():
        raise WeightsError(file.parent, [f"{file.name}: missing"])
    header, problem = _check_safetensors(file)
    if problem is not None:
        raise WeightsError(file.parent, [problem])
    return header


def _weight_files(path: Path, problems: list[str], reported: set[str]) -> dict[str, list[str]]:
    """file name -> tensor names the index assigns to it (empty list: take all)."""
    index = path / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            if not isinstance(weight_map, dict):
                raise TypeError("weight_map is not an object")
        except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as exc:
            problems.append(f"{INDEX_FILE}: unreadable index ({exc})")
            return {}
        files: dict[str, list[str]] = {}
        for name, file in weight_map.items():
            file = str(file)
            if Path(file).name != file or not file.endswith(".safetensors"):
                problems.append(f"{INDEX_FILE}: {name} maps to {file!r}, not a .safetensors "
                                f"file name inside the model directory")
                reported.add(name)
                continue
            files.setdefault(file, []).append(name)
        return files
    if (path / SINGLE_FILE).is_file():
        return {SINGLE_FILE: []}
    problems.append(f"no {SINGLE_FILE} or {INDEX_FILE} in the directory")
    return {}


def load_state(path: str | Path, expected: Mapping[str, tuple[int, ...]] | None = None,
               optional: set[str] | frozenset[str] = frozenset(),
               device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Read all tensors of a model directory onto `device`; check names and shapes.

    `optional` names may be absent from the checkpoint (buffers derivable from the config).
    """
    path = Path(path)
    problems: list[str] = []
    if not path.is_dir():
        raise WeightsError(path, ["model directory does not exist"])
    state: dict[str, torch.Tensor] = {}
    reported: set[str] = set()
    for file, names in _weight_files(path, problems, reported).items():
        target = path / file
        if not target.is_file():
            problems.append(f"{file}: shard named in the index is missing "
                            f"({len(names)} tensors)")
            reported.update(names)
            continue
        header, problem = _check_safetensors(target)
        if problem is not None:
            problems.append(problem)
            reported.update(names or (expected or {}))
            continue
        stored = set(header) - {"__metadata__"}
        wanted = names or sorted(stored)
        absent = [n for n in wanted if n not in stored]
        if absent:
            problems.append(f"{file}: index lists {len(absent)} tensor(s) the shard lacks, "
                            f"e.g. {absent[:3]}")
            reported.update(absent)
        with safe_open(str(target), framework="pt", device="cpu") as fh:
            for name in wanted:
                if name in stored:
                    state[name] = fh.get_tensor(name).to(device)
    if expected is not None:
        missing = sorted(set(expected) - set(state) - set(optional) - reported)
        unexpected = sorted(set(state) - set(expected))
        if missing:
            problems.append(f"missing {len(missing)} tensor(s): {missing[:10]}")
        if unexpected:
            problems.append(f"unexpected {len(unexpected)} tensor(s): {unexpected[:10]}")
        for name in sorted(set(state) & set(expected)):
            if tuple(state[name].shape) != tuple(expected[name]):
                problems.append(f"{name}: shape {tuple(state[name].shape)} in checkpoint, "
                                f"model expects {tuple(expected[name])}")
    if problems:
        raise WeightsError(path, problems)
    return state


def expected_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}
