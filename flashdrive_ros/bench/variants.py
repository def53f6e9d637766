"""The engine variants timed: baseline, each shortcut alone, all shortcuts."""

from __future__ import annotations

from flashdrive_ros.engine.config import SHORTCUTS, EngineConfig
from flashdrive_ros.model.config import ConfigError

REFERENCE = "reference"
BASELINE = "baseline"
ALL = "flashdrive"
ALL_PRE_ROPE = "flashdrive_prerope_keys"
ALL_PLAIN_LOGITS = "flashdrive_plain_logits"
ALL_OFF = {name: False for name in SHORTCUTS}
VARIANT_NAMES = (BASELINE, ALL, ALL_PRE_ROPE, ALL_PLAIN_LOGITS, *SHORTCUTS)


def variant_overrides(device: str, backend: str = "torch"
                      ) -> tuple[dict[str, dict], dict[str, str]]:
    """({variant: EngineConfig overrides}, {variant: why it is skipped}), baseline and all
    shortcuts first. `flashdrive` takes every shortcut at its mode default (CUDA graphs on
    where the device is CUDA and the backend torch); `flashdrive_prerope_keys` is the same
    with keys rotated at every attention call instead of kept after RoPE (torch backend only:
    the tensorrt backend's cache always keeps keys before RoPE); `flashdrive_plain_logits`
    is the same with the plain lm_head product where `flashdrive` pads the rows (CUDA).
    Every variant runs with `coc_reuse` off (engine_run.py): the bench's random-weight CoCs
    say nothing about how often consecutive real windows repeat their CoC; replay measures
    that on a drive."""
    variants: dict[str, dict] = {BASELINE: {"mode": "baseline"}, ALL: {"mode": "flashdrive"}}
    skipped: dict[str, str] = {}
    if backend == "torch":
        variants[ALL_PRE_ROPE] = {"mode": "flashdrive", "rotated_keys": False}
    else:
        skipped[ALL_PRE_ROPE] = (f"the {backend} backend keeps keys before RoPE only: the "
                                 f"same as {ALL}")
    if EngineConfig(device=device).padded_logits:
        variants[ALL_PLAIN_LOGITS] = {"mode": "flashdrive", "padded_logits": False}
    else:
        skipped[ALL_PLAIN_LOGITS] = ("flashdrive already uses the plain lm_head product on "
                                     f"{device} (padded_logits defaults off)")
    for name in SHORTCUTS:
        overrides = {"mode": "flashdrive", **ALL_OFF, name: True}
        try:
            EngineConfig(device=device, backend=backend, **overrides)
        except ConfigError as exc:
            skipped[name] = str(exc)
            continue
        variants[name] = overrides
    return variants, skipped


def ar_counterpart(variant: str, overrides: dict, device: str, backend: str = "torch"
                   ) -> str | None:
    """The variant that decodes autoregressively with the same decode-relevant switches
    (CUDA graphs), for the per-round / per-token decode comparison."""
    cfg = EngineConfig(device=device, backend=backend, **overrides)
    if not cfg.speculative:
        return None
    return "cuda_graphs" if cfg.cuda_graphs else BASELINE
