"""The planners a closed-loop run compares: the engine in baseline and flashdrive mode, each
FlashDrive shortcut alone on top of the baseline path, and the rule-based expert as the
reference that reads the world."""

from __future__ import annotations

from pathlib import Path

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.eval.replay_options import MODE_RUNS

EXPERT = "expert"
ENGINE_VARIANTS = {
    "baseline": dict(mode="baseline"),
    "flashdrive": dict(mode="flashdrive"),
    "streaming_only": dict(mode="flashdrive", streaming=True, speculative=False,
                           cached_velocity=False, cuda_graphs=False),
    "speculative_only": dict(mode="flashdrive", streaming=False, speculative=True,
                             cached_velocity=False, cuda_graphs=False),
    "cached_velocity_only": dict(mode="flashdrive", streaming=False, speculative=False,
                                 cached_velocity=True, cuda_graphs=False),
}
VARIANT_NAMES = (*ENGINE_VARIANTS, EXPERT)
MODE_VARIANTS = MODE_RUNS


def parse_variants(text: str) -> tuple[str, ...]:
    """Comma-separated variant names -> a tuple without repeats, in the given order."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in VARIANT_NAMES]
    if unknown or not names:
        raise ValueError(f"unknown variants {unknown or text!r}; known: {VARIANT_NAMES}")
    return names


def engine_config(variant: str, device: str, dtype: str, num_samples: int,
                  drafter_file: str | None = None, forward_only: bool | None = None
                  ) -> EngineConfig:
    """None: EngineConfig's default for drafter_file and forward_only."""
    given = {"drafter_file": drafter_file, "forward_only": forward_only}
    extra = {name: value for name, value in given.items() if value is not None}
    return EngineConfig(device=device, dtype=dtype, num_samples=num_samples,
                        **ENGINE_VARIANTS[variant], **extra)


def load_engine(model_dir: Path, variant: str, device: str, dtype: str, num_samples: int,
                drafter_file: str | None = None, forward_only: bool | None = None):
    from flashdrive_ros.engine.engine import Engine

    engine = Engine.load(model_dir, engine_config(variant, device, dtype, num_samples,
                                                  drafter_file, forward_only))
    engine.warmup()
    return engine
