"""The engine variants timed: all shortcuts (with the CUDA-graph variants first), all
shortcuts at a chosen accepted length, the baseline and each shortcut alone."""

from __future__ import annotations

from flashdrive_ros.engine.config import SHORTCUTS, EngineConfig
from flashdrive_ros.model.config import ConfigError

REFERENCE = "reference"
BASELINE = "baseline"
ALL = "flashdrive"
ALL_PRE_ROPE = "flashdrive_prerope_keys"
ALL_PLAIN_LOGITS = "flashdrive_plain_logits"
ALL_FLEX = "flashdrive_flex"
ALL_FP8 = "flashdrive_fp8"
ALL_FP8_FLEX = "flashdrive_fp8_flex"
FLEX = {"verify_attention": "flex", "action_attention": "flex"}
GEMM = {"verify_attention": "gemm", "action_attention": "gemm"}
FP8 = {"backbone_weights": "fp8"}
COMPILED = {"compiled_expert": True}
ALL_COMPILED = "flashdrive_compiled_expert"
COMPILED_BOTH = {**COMPILED, "compiled_backbone": True}
ALL_COMPILED_BOTH = "flashdrive_compiled"
ALL_OFF = {name: False for name in SHORTCUTS}
# name: (overrides on top of mode flashdrive, accepted length, block size)
AT_ACCEPTANCE = {
    "flashdrive_at_5.6_block8": ({}, 5.6, 8),
    "flashdrive_at_11.5_block16": ({}, 11.5, 16),
    "flashdrive_fp8_flex_at_5.6_block8": ({**FP8, **FLEX}, 5.6, 8),
    "flashdrive_compiled_expert_at_5.6_block8": (COMPILED, 5.6, 8),
    "flashdrive_flex_verify_compiled_expert_at_5.6_block8": (
        {"verify_attention": "flex", **COMPILED}, 5.6, 8),
    "flashdrive_compiled_at_5.6_block8": (COMPILED_BOTH, 5.6, 8),
    "flashdrive_gemm_compiled_expert_at_5.6_block8": ({**GEMM, **COMPILED}, 5.6, 8),
    "flashdrive_gemm_compiled_at_5.6_block8": ({**GEMM, **COMPILED_BOTH}, 5.6, 8),
}
VARIANT_NAMES = (ALL, *AT_ACCEPTANCE, ALL_FLEX, ALL_COMPILED, ALL_COMPILED_BOTH, ALL_FP8,
                 ALL_FP8_FLEX,
                 "cuda_graphs",
                 ALL_PLAIN_LOGITS, BASELINE, ALL_PRE_ROPE,
                 *(name for name in SHORTCUTS if name != "cuda_graphs"))


def variant_overrides(device: str, backend: str = "torch"
                      ) -> tuple[dict[str, dict], dict[str, str]]:
    """({variant: EngineConfig overrides}, {variant: why it is skipped}) in VARIANT_NAMES
    order (the CUDA-graph variants first).
    `flashdrive` takes every shortcut at its mode default (CUDA graphs on where the
    device is CUDA and the backend torch); the AT_ACCEPTANCE variants are `flashdrive` (or
    with FP8 weights and flex attention, with the GEMM attention and compiled layers) timed
    at a chosen accepted length
    (measured_acceptance.py); `flashdrive_flex` and `flashdrive_fp8[_flex]` add the
    length-aware verify and action attention and FP8 backbone weights;
    `flashdrive_compiled_expert` compiles the action expert's layers (torch.compile inside
    the graphed flow matching), `flashdrive_compiled` those and the backbone's decoder
    layers (inside the graphed decode and verify steps);
    `flashdrive_prerope_keys` keeps keys before RoPE (torch backend only);
    `flashdrive_plain_logits` uses the plain lm_head product where `flashdrive` pads the rows
    (CUDA). Every variant runs with `coc_reuse` off
    (engine_run.py): the bench's random-weight CoCs say nothing about how often consecutive
    real windows repeat their CoC; replay measures that on a drive."""
    candidates: dict[str, dict] = {ALL: {"mode": "flashdrive"}}
    candidates.update({name: {"mode": "flashdrive", **extra}
                       for name, (extra, _, _) in AT_ACCEPTANCE.items()})
    candidates[ALL_FLEX] = {"mode": "flashdrive", **FLEX}
    candidates[ALL_COMPILED] = {"mode": "flashdrive", **COMPILED}
    candidates[ALL_COMPILED_BOTH] = {"mode": "flashdrive", **COMPILED_BOTH}
    candidates[ALL_FP8] = {"mode": "flashdrive", **FP8}
    candidates[ALL_FP8_FLEX] = {"mode": "flashdrive", **FP8, **FLEX}
    candidates["cuda_graphs"] = {"mode": "flashdrive", **ALL_OFF, "cuda_graphs": True}
    candidates[ALL_PLAIN_LOGITS] = {"mode": "flashdrive", "padded_logits": False}
    candidates[BASELINE] = {"mode": "baseline"}
    candidates[ALL_PRE_ROPE] = {"mode": "flashdrive", "rotated_keys": False}
    candidates.update({name: {"mode": "flashdrive", **ALL_OFF, name: True}
                       for name in SHORTCUTS if name != "cuda_graphs"})
    variants: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for name, overrides in candidates.items():
        if name == ALL_PLAIN_LOGITS and not EngineConfig(device=device).padded_logits:
            skipped[name] = ("flashdrive already uses the plain lm_head product on "
                             f"{device} (padded_logits defaults off)")
            continue
        if name == ALL_PRE_ROPE and backend != "torch":
            skipped[name] = (f"the {backend} backend keeps keys before RoPE only: the same "
                             f"as {ALL}")
            continue
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
    if variant in AT_ACCEPTANCE:
        return None
    cfg = EngineConfig(device=device, backend=backend, **overrides)
    if not cfg.speculative or cfg.verify_attention != "masked" \
            or cfg.action_attention != "masked" or cfg.backbone_weights != "native" \
            or cfg.compiled_expert or cfg.compiled_backbone:
        return None
    return "cuda_graphs" if cfg.cuda_graphs else BASELINE
