"""A weighted average of the weights of model directories fine-tuned from one model (a model
soup), written as a run directory that `train/ship_model.py` ships: the same config and
tokenizer are required, the drafters and the summary come from the first model. A part of the
model (the tensors under one top-level name: vlm, expert, action_in_proj, ...) may take weights
of its own.

    python -m flashdrive_ros.train.average_models --model-dir models/default \\
        --model-dir out/c7/model --weights 0.5,0.5 --part-weights vlm=0.75,0.25 --out out/soup
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from flashdrive_ros.model.manifest import MANIFEST_FILE, sha256_of, write_manifest

MODEL_FILE = "model.safetensors"
SHARED_FILES = ("config.json", "tokenizer.json")
RUN_SUMMARY = "summary.json"
SHIPPED_SUMMARY = "train_summary.json"


def parse_weights(text: str, count: int) -> list[float]:
    """'0.5,0.5' -> weights summing to 1; equal weights when text is empty."""
    if not text:
        return [1.0 / count] * count
    weights = [float(w) for w in text.split(",")]
    if len(weights) != count or min(weights) <= 0:
        raise ValueError(f"--weights needs {count} positive numbers, got {text!r}")
    total = sum(weights)
    return [w / total for w in weights]


def parse_part_weights(items: list[str], count: int) -> dict[str, list[float]]:
    """['vlm=0.75,0.25'] -> {'vlm': [0.75, 0.25]}: weights of the tensors under one part."""
    parts: dict[str, list[float]] = {}
    for item in items:
        part, sep, text = item.partition("=")
        if not sep or not part or "." in part or part in parts:
            raise ValueError(f"--part-weights takes PART=W1,W2,... once per part, got {item!r}")
        parts[part] = parse_weights(text, count)
    return parts


def part_of(key: str) -> str:
    """The part a tensor belongs to: its top-level module name."""
    return key.split(".", 1)[0]


def _first_summary(model_dir: Path) -> dict:
    for path in (model_dir / SHIPPED_SUMMARY, model_dir.parent / RUN_SUMMARY):
        if path.is_file():
            return json.loads(path.read_text())
    return {}


def average_state(model_dirs: list[Path], weights: list[float],
                  part_weights: dict[str, list[float]] | None = None) -> dict[str, torch.Tensor]:
    """The weighted average of the models' tensors, each in its own dtype, a part's tensors with
    its `part_weights`; refuses models whose config, tokenizer or tensor names, shapes and
    dtypes differ, and parts the models do not have."""
    part_weights = part_weights or {}
    if len(model_dirs) != len(weights) or len(model_dirs) < 2:
        raise ValueError("give two or more models, one weight each")
    for name in (*SHARED_FILES, MODEL_FILE):
        for model_dir in model_dirs:
            if not (model_dir / name).is_file():
                raise FileNotFoundError(f"{model_dir / name} is missing")
    for name in SHARED_FILES:
        first = (model_dirs[0] / name).read_bytes()
        for model_dir in model_dirs[1:]:
            if (model_dir / name).read_bytes() != first:
                raise ValueError(f"{model_dir / name} differs from {model_dirs[0] / name}: "
                                 f"only models of one config and tokenizer average")
    states = [load_file(model_dir / MODEL_FILE) for model_dir in model_dirs]
    layout = {k: (tuple(v.shape), v.dtype) for k, v in states[0].items()}
    for model_dir, state in zip(model_dirs[1:], states[1:], strict=True):
        other = {k: (tuple(v.shape), v.dtype) for k, v in state.items()}
        if other != layout:
            names = sorted(set(other.items()) ^ set(layout.items()))[:3]
            raise ValueError(f"{model_dir / MODEL_FILE} holds other tensors than "
                             f"{model_dirs[0] / MODEL_FILE}: {names}")
    parts = sorted({part_of(key) for key in layout})
    for part, part_list in part_weights.items():
        if part not in parts:
            raise ValueError(f"no part {part!r} in {model_dirs[0] / MODEL_FILE}; parts: {parts}")
        if len(part_list) != len(model_dirs):
            raise ValueError(f"part {part!r} needs {len(model_dirs)} weights")
    averaged = {}
    for key, (_, dtype) in layout.items():
        key_weights = part_weights.get(part_of(key), weights)
        total = sum(w * s[key].double() for w, s in zip(key_weights, states, strict=True))
        averaged[key] = total.to(dtype).contiguous()
    return averaged


def write_average(model_dirs: list[Path], weights: list[float], out: Path,
                  part_weights: dict[str, list[float]] | None = None) -> dict:
    """out/model: the averaged weights with the first model's other files; out/summary.json:
    the first model's training summary with the average's sources. Returns the manifest."""
    part_weights = part_weights or {}
    averaged = average_state(model_dirs, weights, part_weights)
    model_out = out / "model"
    if model_out.exists():
        raise FileExistsError(f"{model_out} exists")
    model_out.mkdir(parents=True)
    for path in sorted(model_dirs[0].iterdir()):
        if path.is_file() and path.name not in (MODEL_FILE, MANIFEST_FILE, SHIPPED_SUMMARY):
            shutil.copyfile(path, model_out / path.name)
    save_file(averaged, model_out / MODEL_FILE, metadata={"format": "pt"})
    summary = _first_summary(model_dirs[0])
    summary["averaged"] = {"models": [str(d) for d in model_dirs], "weights": weights,
                           "part_weights": part_weights,
                           "sha256": [sha256_of(d / MODEL_FILE) for d in model_dirs],
                           "drafters_from": str(model_dirs[0])}
    (out / RUN_SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return write_manifest(model_out)


def _weights_text(weights: list[float]) -> str:
    return ", ".join(f"{w:.3f}" for w in weights)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", action="append", type=Path, required=True,
                   help="a model directory (give two or more; the first gives the drafters)")
    p.add_argument("--weights", default="",
                   help="comma-separated weights, one per model (default: equal)")
    p.add_argument("--part-weights", action="append", default=[], metavar="PART=W1,W2,...",
                   help="weights of the tensors under one top-level name (vlm, expert, "
                        "action_in_proj, ...) instead of --weights; repeat for more parts")
    p.add_argument("--out", type=Path, required=True, help="run directory to write")
    args = p.parse_args(argv)
    try:
        if len(args.model_dir) < 2:
            raise ValueError("give --model-dir two or more times")
        weights = parse_weights(args.weights, len(args.model_dir))
        part_weights = parse_part_weights(args.part_weights, len(args.model_dir))
        manifest = write_average(args.model_dir, weights, args.out, part_weights)
    except (FileNotFoundError, FileExistsError, ValueError) as exc:
        p.error(str(exc))
    parts = "".join(f", {part} ({_weights_text(ws)})" for part, ws in part_weights.items())
    print(f"averaged {len(args.model_dir)} models ({_weights_text(weights)}){parts} "
          f"-> {args.out / 'model'} ({len(manifest['files'])} files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
