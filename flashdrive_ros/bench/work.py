"""What one window computes in each stage under a variant, and that work's floor."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from flashdrive_ros.bench.costs import (
    Pass,
    drafter_pass,
    expert_pass,
    patches_per_image,
    prefix_rotation_pass,
    text_pass,
    vision_pass,
)
from flashdrive_ros.bench.floors import Floors
from flashdrive_ros.model.config import ModelConfig

DECODE_KINDS = ("autoregressive", "speculative", "hf_generate")
FINISH_TOKENS = 3


@dataclass(frozen=True)
class Work:
    """images: encoded images; prefill_tokens / prefill_keys: prefill queries and their summed
    query-key pairs; decode: DECODE_KINDS; rounds: speculative rounds (measured mean);
    hf_new_tokens: tokens generate() produces; velocity_calls: expert evaluations."""

    images: int
    prompt_length: int
    prefill_tokens: int
    prefill_keys: int
    decode: str
    coc_tokens: int
    rounds: float
    hf_new_tokens: int
    velocity_calls: int
    samples: int

    def __post_init__(self) -> None:
        if self.decode not in DECODE_KINDS:
            raise ValueError(f"decode must be one of {DECODE_KINDS}, got {self.decode!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def full_prefill_keys(prompt_length: int) -> int:
    """Causal attention over the whole prompt: sum of (index + 1)."""
    return prompt_length * (prompt_length + 1) // 2


def decode_passes(cfg: ModelConfig, work: Work, dtype_bytes: int) -> list[Pass]:
    """Autoregressive: coc_tokens - 1 one-token steps, then the finish pass writing the
    pending token, <|cot_end|> and <|traj_future_start|>. Speculative: `rounds` x (draft +
    verify of block_size tokens), then the finish pass. hf_generate: one-token steps after
    the prefill's first token; lm_head on the last token only."""
    t, p = cfg.text, work.prompt_length
    finish = text_pass(t, FINISH_TOKENS, FINISH_TOKENS * p, p, FINISH_TOKENS, dtype_bytes)
    if work.decode == "hf_generate":
        step = text_pass(t, 1, p, p, 1, dtype_bytes)
        return [step] * (work.hf_new_tokens - 1)
    if work.decode == "autoregressive":
        step = text_pass(t, 1, p, p, 1, dtype_bytes)
        return [step] * (work.coc_tokens - 1) + [finish]
    k = cfg.drafter.block_size
    draft = drafter_pass(cfg.drafter, t, dtype_bytes)
    verify = text_pass(t, k, k * p, p, k, dtype_bytes)
    return [draft.times(work.rounds), verify.times(work.rounds), finish]


def stage_passes(cfg: ModelConfig, work: Work, dtype_bytes: int) -> dict[str, list[Pass]]:
    t = cfg.text
    prefix = work.prompt_length + work.coc_tokens + 2
    velocity = expert_pass(cfg.expert, t, work.samples, cfg.action.num_waypoints, prefix,
                           dtype_bytes)
    return {
        "encode": [vision_pass(cfg.vision, work.images, patches_per_image(cfg), dtype_bytes)],
        "prefill": [text_pass(t, work.prefill_tokens, work.prefill_keys, work.prompt_length,
                              1, dtype_bytes)],
        "decode": decode_passes(cfg, work, dtype_bytes),
        "action": [prefix_rotation_pass(t, prefix, dtype_bytes)]
        + [velocity] * work.velocity_calls,
    }


def stage_floors(cfg: ModelConfig, work: Work, dtype_bytes: int, floors: Floors) -> dict:
    """Per stage and total: flops, bytes, floor_ms, bound ('memory' where the memory time of
    its passes is the larger share of the floor, else 'compute')."""
    bw, rate = floors.copy_bytes_per_s, floors.matmul_flops_per_s
    out: dict[str, dict] = {}
    for stage, passes in stage_passes(cfg, work, dtype_bytes).items():
        memory_s = sum(p.floor_s(bw, rate) for p in passes if p.memory_bound(bw, rate))
        floor_s = sum(p.floor_s(bw, rate) for p in passes)
        out[stage] = {"flops": float(sum(p.flops for p in passes)),
                      "bytes": float(sum(p.bytes for p in passes)),
                      "floor_ms": floor_s * 1e3,
                      "bound": "memory" if memory_s >= floor_s - memory_s else "compute"}
    out["total"] = {key: float(sum(s[key] for s in out.values()))
                    for key in ("flops", "bytes", "floor_ms")}
    return out
