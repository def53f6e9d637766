"""A training run paused between processes, on disk under RUN_DIR/resume/.

model.safetensors: every parameter and persistent buffer in float32; state.safetensors: the
optimizer and generator states; tokenizer.json; state.json: the config, the recipe, the seed,
the target schedule's position, the summary so far and the folder of the cached drives.
Tensors go through safetensors only, the rest through JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.tokenizer import TextTokenizer

RESUME_SUBDIR = "resume"
STATE_JSON = "state.json"
MODEL_FILE = "model.safetensors"
STATE_FILE = "state.safetensors"
TOKENIZER_FILE = "tokenizer.json"


def save_checkpoint(folder: Path, model: AlpamayoModel, tokenizer: TextTokenizer,
                    tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Writes the checkpoint; state.json last, so a folder with it is complete."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / STATE_JSON).unlink(missing_ok=True)
    save_model(model, str(folder / MODEL_FILE))
    save_file(tensors, str(folder / STATE_FILE))
    tokenizer.save(folder / TOKENIZER_FILE)
    (folder / STATE_JSON).write_text(json.dumps(meta, indent=1) + "\n")


def read_checkpoint(folder: Path) -> tuple[dict, TextTokenizer, dict[str, torch.Tensor]]:
    """(state.json, tokenizer, state tensors) of a complete checkpoint."""
    if not (folder / STATE_JSON).is_file():
        raise FileNotFoundError(f"no complete checkpoint in {folder} ({STATE_JSON} missing)")
    meta = json.loads((folder / STATE_JSON).read_text())
    return meta, TextTokenizer.from_file(folder / TOKENIZER_FILE), load_file(
        str(folder / STATE_FILE))


def load_weights(model: AlpamayoModel, folder: Path) -> None:
    missing, unexpected = load_model(model, str(folder / MODEL_FILE), strict=False)
    if missing or unexpected:
        raise ValueError(f"checkpoint weights do not fit the model: missing {sorted(missing)}, "
                         f"unexpected {sorted(unexpected)}")
