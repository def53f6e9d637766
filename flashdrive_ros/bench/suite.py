"""Runs every variant at one shape and assembles bench.json's content."""

from __future__ import annotations

import gc
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from flashdrive_ros.bench.acceptance import (
    PUBLISHED_ACCEPTED_LENGTH,
    PUBLISHED_LABEL,
    decode_analysis,
    trained_accepted_length,
)
from flashdrive_ros.bench.compare import over_floor, speedups
from flashdrive_ros.bench.engine_run import OverBudget, run_engine
from flashdrive_ros.bench.floors import Floors, measure_floors
from flashdrive_ros.bench.hf_model import build_hf_model
from flashdrive_ros.bench.machine import machine_info
from flashdrive_ros.bench.measured_acceptance import run_at_acceptance
from flashdrive_ros.bench.projection import SOURCES, project, thor_floors
from flashdrive_ros.bench.reference_run import ReferenceRunner, run_reference
from flashdrive_ros.bench.shapes import Parts, build_parts
from flashdrive_ros.bench.variants import (
    AT_ACCEPTANCE,
    BASELINE,
    REFERENCE,
    ar_counterpart,
    variant_overrides,
)
from flashdrive_ros.bench.work import Work, stage_floors
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.paths import default_model_dir

METHOD = {
    "timing": "each variant runs `warmup` sliding windows, then `windows` timed ones; stages "
              "are bracketed by CUDA events (wall clock on the CPU); p50/p90 over windows",
    "coc": "random weights: the lm_head row of <|cot_end|> is zeroed and max_coc_tokens set, "
           "so every window decodes exactly coc_tokens CoC tokens",
    REFERENCE: "HF transformers Qwen3VLForConditionalGeneration.generate() (sdpa, greedy, "
               "coc_tokens + 3 new tokens) on all images, then 10 plain Euler steps of our "
               "expert over HF's keys/values; see flashdrive_ros/bench/reference_run.py",
    "engine": "Engine.step() with the variant's EngineConfig; timings are Plan.timings_ms",
    "floors": "floor = sum over passes of max(bytes / copy bandwidth, FLOPs / matmul rate); "
              "see flashdrive_ros/bench/costs.py for what is counted; FP8 variants are "
              "floored at the run's dtype bytes (their backbone weights read half of that)",
    "at_acceptance": "a first pass records each window's greedy tokens; a fresh engine of "
                     "the same config reruns the windows drafting those tokens so each round "
                     "commits the pattern's count (the drafter still runs every round); see "
                     "flashdrive_ros/bench/measured_acceptance.py",
    "projection": "Jetson AGX Thor: each stage's floor at Thor's rates (nominal x the "
                  "fraction of nominal measured here) times the stage's measured p50 / floor; "
                  "see flashdrive_ros/bench/projection.py",
}


@dataclass
class Settings:
    shape: str
    device: str
    windows: int
    warmup: int
    samples: list[int]
    coc_tokens: int
    seed: int = 0
    reference: bool = True
    budget_s: float | None = None
    backend: str = "torch"
    only: list[str] | None = None
    reference_windows: int | None = None

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.device.startswith("cuda") else torch.float32

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")


def error_entry(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=8)}


def model_entry(parts: Parts) -> dict:
    cfg = parts.cfg
    return {"name": cfg.name, "params": sum(p.numel() for p in parts.model.parameters()),
            "drafter_params": sum(p.numel() for p in parts.drafter.parameters()),
            "vocab_size": cfg.text.vocab_size, "tokens_per_image": cfg.tokens_per_image,
            "images_per_window": len(cfg.prompt.camera_names) * cfg.prompt.num_frames,
            "image_size": [cfg.prompt.image_width, cfg.prompt.image_height],
            "drafter_block_size": cfg.drafter.block_size}


def with_floors(result: dict, cfg: ModelConfig, work: Work, dtype: torch.dtype,
                floors: Floors, thor: Floors) -> dict:
    dtype_bytes = torch.finfo(dtype).bits // 8
    result["work"] = work.to_dict()
    result["floors"] = stage_floors(cfg, work, dtype_bytes, floors)
    result["over_floor"] = over_floor(result["stages"], result["floors"])
    result["thor_projected_ms"] = project(result, cfg, work, dtype_bytes, thor)
    return result


def run_reference_variant(s: Settings, parts: Parts, floors: Floors, thor: Floors) -> dict:
    hf = build_hf_model(parts.cfg, parts.tokenizer, s.device, s.dtype, s.seed)
    try:
        runner = ReferenceRunner(parts, hf, s.device, s.dtype, s.coc_tokens, s.seed)
        windows = s.reference_windows or s.windows
        results, works = run_reference(runner, s.samples, s.warmup, windows, s.seed)
    finally:
        del hf
        gc.collect()
        if torch.device(s.device).type == "cuda":
            torch.cuda.empty_cache()
    return {"samples": {str(k): with_floors(results[k], parts.cfg, works[k], s.dtype, floors,
                                            thor) for k in s.samples}}


def run_engine_variant(s: Settings, parts: Parts, name: str, overrides: dict,
                       floors: Floors, thor: Floors, deadline: float | None) -> dict:
    """Every sample count of one variant; the AT_ACCEPTANCE ones at their accepted length
    and block size (floored with that block)."""
    entry: dict = {"overrides": overrides, "samples": {}}
    for count in s.samples:
        cfg = parts.cfg
        if name in AT_ACCEPTANCE:
            _, length, block = AT_ACCEPTANCE[name]
            result, work, cfg = run_at_acceptance(parts, overrides, length, block, s.device,
                                                  s.dtype_name, count, s.coc_tokens, s.warmup,
                                                  s.windows, s.seed, s.backend, deadline)
        else:
            result, work = run_engine(parts, overrides, s.device, s.dtype_name, count,
                                      s.coc_tokens, s.warmup, s.windows, s.seed, s.backend,
                                      deadline)
        entry["samples"][str(count)] = with_floors(result, cfg, work, s.dtype, floors, thor)
    return entry


def decode_section(s: Settings, variants: dict, overrides: dict) -> dict:
    lengths = [(PUBLISHED_ACCEPTED_LENGTH, PUBLISHED_LABEL)]
    trained = trained_accepted_length(default_model_dir())
    if trained is not None:
        lengths.insert(0, trained)
    count = str(s.samples[0])
    out = {}
    for name, switches in overrides.items():
        partner = ar_counterpart(name, switches, s.device, s.backend)
        if partner is None or "samples" not in variants.get(partner, {}) \
                or "samples" not in variants.get(name, {}):
            continue
        spec, ar = variants[name]["samples"][count], variants[partner]["samples"][count]
        analysis = decode_analysis(ar["stages"]["decode"]["p50"], spec["stages"]["decode"]["p50"],
                                   spec["work"]["rounds"], s.coc_tokens, lengths)
        others = spec["stages"]["total"]["p50"] - spec["stages"]["decode"]["p50"]
        for implied in analysis["implied"]:
            implied["total_ms"] = others + implied["decode_ms"]
        out[name] = {"autoregressive_variant": partner, "samples": int(count), **analysis}
    return out


def measured_section(variants: dict) -> dict:
    """Per AT_ACCEPTANCE variant and sample count: the pattern, what was measured, decode
    and total p50."""
    out: dict = {}
    for name in AT_ACCEPTANCE:
        for count, run in variants.get(name, {}).get("samples", {}).items():
            out.setdefault(name, {})[count] = {
                **run["at_acceptance"], "decode_ms": run["stages"]["decode"]["p50"],
                "total_ms": run["stages"]["total"]["p50"]}
    return out


def job_order(names: list[str], reference: bool) -> list[str]:
    """Engine variants in order, the reference (when on) right before the baseline: after
    the CUDA-graph variants, before the ablations."""
    if not reference:
        return names
    order = list(names)
    cut = order.index(BASELINE) if BASELINE in order else len(order)
    return order[:cut] + [REFERENCE] + order[cut:]


def note_skip(skipped: dict, name: str, why: str) -> None:
    skipped[name] = why
    print(f"flashdrive-bench: skipped {name}: {why}", file=sys.stderr, flush=True)


def run_suite(s: Settings, command: str, on_update: Callable[[dict], None]) -> dict:
    """Variants run in job_order until `budget_s` seconds have passed; a variant whose
    windows would not fit in what is left runs fewer, or is skipped with the reason."""
    started = time.monotonic()
    deadline = None if s.budget_s is None else started + s.budget_s
    bench: dict = {"schema": 1, "complete": False, "command": command,
                   "machine": machine_info(s.device), "settings": asdict(s),
                   "dtype": s.dtype_name, "method": METHOD}
    parts = build_parts(s.shape, s.device, s.dtype, s.seed)
    floors = measure_floors(s.device, s.dtype)
    gpu = bench["machine"]["gpu"]["name"] if bench["machine"].get("gpu") else None
    thor = thor_floors(floors, gpu)
    bench.update(model=model_entry(parts), floors=floors.to_dict(), variants={},
                 thor={"floors": thor.to_dict(), "sources": SOURCES})
    overrides, skipped = variant_overrides(s.device, s.backend)
    if s.only is not None:
        overrides = {name: v for name, v in overrides.items() if name in s.only}
        skipped = {name: why for name, why in skipped.items() if name in s.only}
    bench["skipped"] = skipped
    variants = bench["variants"]
    for name in job_order(list(overrides), s.reference):
        spent = time.monotonic() - started
        if s.budget_s is not None and spent > s.budget_s:
            note_skip(skipped, name, f"time budget of {s.budget_s:.0f} s spent ({spent:.0f} s)")
            continue
        try:
            if name == REFERENCE:
                variants[name] = run_reference_variant(s, parts, floors, thor)
            else:
                variants[name] = run_engine_variant(s, parts, name, overrides[name], floors,
                                                    thor, deadline)
        except OverBudget as exc:
            note_skip(skipped, name, f"time budget: {exc}")
            continue
        except Exception as exc:
            variants[name] = {"overrides": overrides.get(name), **error_entry(exc)}
        on_update(bench)
    bench["speedups"] = {"vs_reference": speedups(variants, REFERENCE),
                         "vs_baseline": speedups(variants, "baseline")}
    bench["decode"] = decode_section(s, variants, overrides)
    bench["measured_acceptance"] = measured_section(variants)
    bench["complete"] = True
    return bench
