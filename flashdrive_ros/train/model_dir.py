"""Writing trained weights as a model directory: fp16 storage, and a directory derived from
a source directory (new weights, config and tokenizer; the source's other files copied;
manifest rewritten)."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.manifest import MANIFEST_FILE, write_manifest
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.model.weights import (
    CONFIG_FILE,
    INDEX_FILE,
    SINGLE_FILE,
    TOKENIZER_FILE,
    save_model_dir,
)

REWRITTEN = (CONFIG_FILE, SINGLE_FILE, INDEX_FILE, TOKENIZER_FILE, MANIFEST_FILE)


def half_copy(module: torch.nn.Module) -> torch.nn.Module:
    """fp16 parameters for storage; buffers (action-space statistics) stay float32."""
    out = copy.deepcopy(module).cpu()
    for p in out.parameters():
        p.data = p.data.to(torch.float16)
    return out


def is_model_weights(name: str) -> bool:
    """The target's own weight files (single, sharded or index), not a drafter's."""
    return name in REWRITTEN or (name.startswith("model-") and name.endswith(".safetensors"))


def write_derived_model_dir(model: AlpamayoModel, tokenizer: TextTokenizer, source: Path,
                            dest: Path) -> Path:
    """dest: the model (fp16), its config and the tokenizer, plus every other file of
    `source` (drafters, summaries) copied unchanged, and a new manifest."""
    if dest.resolve() == source.resolve():
        raise ValueError(f"the derived model directory must differ from its source {source}")
    if dest.exists():
        shutil.rmtree(dest)
    save_model_dir(half_copy(model), model.cfg, tokenizer, dest)
    for path in sorted(source.iterdir()):
        if path.is_file() and not is_model_weights(path.name):
            shutil.copy2(path, dest / path.name)
    write_manifest(dest)
    return dest
