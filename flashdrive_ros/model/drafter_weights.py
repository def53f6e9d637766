"""Drafter weight files: safetensors under the `drafter.` prefix, the drafter's own config in
the file's metadata (key `drafter_config`, JSON), so a file says which drafter it holds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from flashdrive_ros.model.config import DrafterConfig

WEIGHT_PREFIX = "drafter."
CONFIG_KEY = "drafter_config"


def load_prefixed(module: nn.Module, tensors: Mapping[str, torch.Tensor],
                  prefix: str = WEIGHT_PREFIX) -> None:
    """Load `prefix`-named tensors into `module` (extra keys without the prefix are ignored)."""
    own = {name[len(prefix):]: t for name, t in tensors.items() if name.startswith(prefix)}
    expected = module.state_dict()
    missing = sorted(set(expected) - set(own))
    unexpected = sorted(set(own) - set(expected))
    if missing or unexpected:
        raise ValueError(f"drafter weights do not match: missing {missing[:8]}, "
                         f"unexpected {unexpected[:8]}")
    for name, tensor in own.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise ValueError(f"drafter weight {prefix}{name} has shape "
                             f"{tuple(tensor.shape)}, expected {tuple(expected[name].shape)}")
    module.load_state_dict(own)


def read_drafter_file(path: str | Path) -> tuple[dict[str, torch.Tensor], DrafterConfig | None]:
    """Tensors and the stored config (None for files written without one). Only a complete
    safetensors file is read (WeightsError otherwise)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    from flashdrive_ros.model.weights import check_safetensors_file

    check_safetensors_file(path)
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata() or {}
    cfg = None
    if CONFIG_KEY in metadata:
        cfg = DrafterConfig(**json.loads(metadata[CONFIG_KEY]))
    return load_file(str(path)), cfg


def save_drafter_file(module: nn.Module, cfg: DrafterConfig, path: str | Path,
                      prefix: str = WEIGHT_PREFIX) -> None:
    save_drafter_tensors({prefix + name: t.detach().contiguous()
                          for name, t in module.state_dict().items()}, cfg, path)


def save_drafter_tensors(tensors: Mapping[str, torch.Tensor], cfg: DrafterConfig,
                         path: str | Path) -> None:
    """Named tensors (already prefixed) and `cfg` in the file's metadata."""
    from safetensors.torch import save_file
    save_file(dict(tensors), str(path), metadata={CONFIG_KEY: json.dumps(dataclasses.asdict(cfg))})


class DrafterWeights(nn.Module):
    """safetensors loading and saving shared by the drafter kinds (`self.cfg` is their
    DrafterConfig), and the context-mask check of their forwards."""

    cfg: DrafterConfig

    def load_weights(self, tensors: Mapping[str, torch.Tensor],
                     prefix: str = WEIGHT_PREFIX) -> None:
        """Load `prefix`-named tensors (extra keys without the prefix are ignored)."""
        load_prefixed(self, tensors, prefix)

    def load_safetensors(self, path: str | Path, prefix: str = WEIGHT_PREFIX) -> None:
        """Only a complete safetensors file is read (WeightsError otherwise)."""
        self.load_weights(read_drafter_file(path)[0], prefix)

    def save_safetensors(self, path: str | Path, prefix: str = WEIGHT_PREFIX) -> None:
        save_drafter_file(self, self.cfg, path, prefix)

    @staticmethod
    def check_context_mask(context_mask: torch.Tensor | None, b: int, c: int) -> None:
        if context_mask is not None and (context_mask.shape != (b, c)
                                         or context_mask.dtype != torch.bool):
            raise ValueError(f"context_mask must be bool [{b}, {c}], got {context_mask.dtype} "
                             f"{tuple(context_mask.shape)}")
