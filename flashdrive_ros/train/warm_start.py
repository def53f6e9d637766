"""A training run that starts from a model directory instead of random weights: its
tokenizer, its action normalization, its weights and those of its drafters (fine-tuning a
shipped model on new data in one call)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import DrafterConfig, ModelConfig
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.drafter_name import DRAFTER_FILE, MROPE_DRAFTER_FILE
from flashdrive_ros.model.drafter_weights import read_drafter_file
from flashdrive_ros.model.manifest import sha256_of
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.model.weights import CONFIG_FILE
from flashdrive_ros.train.recipe import Recipe

TOKENIZER_FILE = "tokenizer.json"
WEIGHTS_FILE = "model.safetensors"
ACTION_STATS = ("accel_mean", "accel_std", "curvature_mean", "curvature_std")
DRAFTER_FILES = {"flat": DRAFTER_FILE, "mrope": MROPE_DRAFTER_FILE}


@dataclasses.dataclass
class WarmStart:
    """The model directory `path` a run starts from: its config and tokenizer."""

    path: Path
    cfg: ModelConfig
    tokenizer: TextTokenizer

    @classmethod
    def read(cls, path: str | Path) -> WarmStart:
        path = Path(path)
        for name in (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE):
            if not (path / name).is_file():
                raise FileNotFoundError(f"init model directory {path} has no {name}")
        cfg = ModelConfig.load(path / CONFIG_FILE)
        tokenizer = TextTokenizer.from_file(path / TOKENIZER_FILE)
        if tokenizer.vocab_size != cfg.text.vocab_size:
            raise ValueError(f"{path}: tokenizer has {tokenizer.vocab_size} tokens, config.json "
                             f"{cfg.text.vocab_size}")
        return cls(path, cfg, tokenizer)

    def check_recipe(self, recipe_config: ModelConfig) -> None:
        """The recipe's model (at this vocabulary) must be the directory's model: same
        shapes, prompt and horizon; only the action normalization may differ."""
        mine, theirs = self.cfg.to_dict(), recipe_config.to_dict()
        for key in ACTION_STATS:
            mine["action"].pop(key)
            theirs["action"].pop(key)
        differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
        if differ:
            raise ValueError(f"init model {self.path} is not the recipe's model: its config "
                             f"differs in {differ}")

    @property
    def action_stats(self) -> dict[str, float]:
        return {key: getattr(self.cfg.action, key) for key in ACTION_STATS}

    def load_model(self, model: AlpamayoModel) -> None:
        """The directory's weights (manifest and shapes checked) into `model`."""
        init = AlpamayoModel.from_dir(self.path, device=next(model.parameters()).device)
        model.load_state_dict(init.state_dict())

    def drafter_config(self, run: DrafterConfig) -> DrafterConfig:
        """The config of the directory's drafter of `run.rotary`: the run's, with the block
        size the drafter was stored with (it runs at that size, and the size shapes no
        weight); `run` when the directory has no such drafter or stored no config."""
        file = self.path / DRAFTER_FILES[run.rotary]
        if not file.is_file():
            return run
        stored = read_drafter_file(file)[1]
        if stored is None:
            return run
        if dataclasses.replace(stored, block_size=run.block_size) != run:
            raise ValueError(f"{file}: drafter config {stored} differs from the run's {run} "
                             f"beyond the block size")
        return stored

    def load_drafter(self, drafter: Drafter) -> bool:
        """The directory's drafter of `drafter.cfg.rotary` into `drafter` (made with
        `drafter_config`); False when it has none."""
        file = self.path / DRAFTER_FILES[drafter.cfg.rotary]
        if not file.is_file():
            return False
        drafter.load_weights(read_drafter_file(file)[0])
        return True

    def summary(self) -> dict:
        return {"path": str(self.path), "weights_sha256": sha256_of(self.path / WEIGHTS_FILE)}


def warm_start(recipe: Recipe) -> WarmStart | None:
    """The recipe's `init_from` directory, checked against the recipe's model; None without."""
    if recipe.init_from is None:
        return None
    warm = WarmStart.read(recipe.init_from)
    warm.check_recipe(recipe.model_config(warm.cfg.text.vocab_size))
    return warm
