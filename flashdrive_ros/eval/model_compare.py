"""Held-out accuracy of model directories with full and with streaming prefill, every model
and prefill on the same windows: minADE, decision match, accepted length, CoC tokens."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from flashdrive_ros.engine.config import DRAFTER_FILE, EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.eval.held_out import replay_planners
from flashdrive_ros.eval.records import RecordSource
from flashdrive_ros.settings import derived, field_problems, setting

PREFILLS = {"full prefill": False, "streaming": True}
COLUMNS = [("minADE1 @6.4 s (m)", "minade1_6s"), ("minADE6 @6.4 s (m)", "minade6_6s"),
           ("decision match", "decision_match_rate"),
           ("accepted length", "accepted_length_mean"), ("CoC tokens", "tokens_per_window")]
GAP_KEYS = ("minade1_6s", "minade6_6s", "decision_match_rate", "accepted_length_mean")


@dataclass(frozen=True)
class CompareSettings:
    """Engines in flashdrive mode, float32, speculative when the directory has a drafter."""

    num_samples: int = derived(EngineConfig, "num_samples", default=6)
    device: str = derived(EngineConfig, "device")
    max_windows: int | None = setting(None, "windows per drive (None: all)", minimum=1)
    cuda_graphs: bool | None = derived(EngineConfig, "cuda_graphs")

    def __post_init__(self) -> None:
        if problems := field_problems(self):
            raise ValueError("; ".join(problems))

    def engine_config(self, model_dir: Path, streaming: bool) -> EngineConfig:
        return EngineConfig(num_samples=self.num_samples, streaming=streaming,
                            speculative=(model_dir / DRAFTER_FILE).is_file(),
                            cuda_graphs=self.cuda_graphs, device=self.device)


def evaluate_model(model_dir: Path, drives: list[AbstractContextManager[RecordSource]],
                   settings: CompareSettings) -> dict[str, dict]:
    """{prefill: summary block without per-window rows} over the drives."""
    engines = {name: Engine.load(model_dir, settings.engine_config(model_dir, streaming))
               for name, streaming in PREFILLS.items()}
    model_cfg = next(iter(engines.values())).model.cfg
    blocks = replay_planners(engines, model_cfg, drives, settings.max_windows)
    for block in blocks.values():
        block.pop("per_window", None)
    return blocks


def streaming_gaps(results: dict[str, dict[str, dict]]) -> dict[str, dict[str, float | None]]:
    """Per model: streaming minus full prefill of each GAP_KEYS metric."""
    out = {}
    for model, blocks in results.items():
        full, streaming = blocks["full prefill"], blocks["streaming"]
        out[model] = {key: (streaming[key] - full[key]
                            if streaming.get(key) is not None and full.get(key) is not None
                            else None) for key in GAP_KEYS}
    return out


def comparison_table(results: dict[str, dict[str, dict]]) -> str:
    """Markdown: one row per (model, prefill)."""
    head = ["model", "prefill", *(name for name, _ in COLUMNS), "windows"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, blocks in results.items():
        for prefill, block in blocks.items():
            cells = [model, prefill]
            for _, key in COLUMNS:
                value = block.get(key)
                cells.append("-" if value is None else f"{value:.3f}")
            cells.append(str(block["windows"]))
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gap_table(gaps: dict[str, dict[str, float | None]]) -> str:
    """Markdown: per model, streaming minus full prefill of each GAP_KEYS metric."""
    names = dict((key, name) for name, key in COLUMNS)
    head = ["model", *(names[key] for key in GAP_KEYS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model, row in gaps.items():
        cells = [model] + ["-" if row[key] is None else f"{row[key]:+.3f}" for key in GAP_KEYS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
