"""Build a drafter of the kind its config names, and load one from its weight file."""

from __future__ import annotations

from pathlib import Path

from flashdrive_ros.model.config import ConfigError, DrafterConfig, TextConfig
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.drafter_weights import read_drafter_file
from flashdrive_ros.model.eagle_drafter import EagleDrafter

AnyDrafter = Drafter | EagleDrafter
DRAFTER_CLASSES = {"dflash": Drafter, "eagle3": EagleDrafter}


def build_drafter(cfg: DrafterConfig, text_cfg: TextConfig) -> AnyDrafter:
    return DRAFTER_CLASSES[cfg.kind](cfg, text_cfg)


def load_drafter(path: str | Path, text_cfg: TextConfig,
                 fallback: DrafterConfig | None) -> AnyDrafter:
    """The drafter in `path`, configured by the config stored in the file, else `fallback`
    (the model's config.json drafter section, for files written without one)."""
    tensors, cfg = read_drafter_file(path)
    cfg = cfg or fallback
    if cfg is None:
        raise ConfigError(f"{path} stores no drafter config and the model config has none")
    drafter = build_drafter(cfg, text_cfg)
    drafter.load_weights(tensors)
    return drafter
