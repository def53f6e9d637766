"""Analytic FLOPs and bytes per forward pass, from the model config.

Counted: the matrix weights of every linear layer (biases, norms and embeddings left out),
attention scores and values (4 * heads * head_dim FLOPs per query-key pair), the lm_head where
logits are taken, and the KV cache read by attention (decode passes read the prompt's KV; the
few generated tokens' KV is left out). Weights are read once per pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from flashdrive_ros.model.config import (
    DrafterConfig,
    ExpertConfig,
    ModelConfig,
    TextConfig,
    VisionConfig,
)


@dataclass(frozen=True)
class Pass:
    flops: float
    bytes: float

    def floor_s(self, bytes_per_s: float, flops_per_s: float) -> float:
        """Roofline floor: the larger of memory time and compute time."""
        return max(self.bytes / bytes_per_s, self.flops / flops_per_s)

    def times(self, count: float) -> Pass:
        """`count` identical passes."""
        return Pass(self.flops * count, self.bytes * count)

    def memory_bound(self, bytes_per_s: float, flops_per_s: float) -> bool:
        return self.bytes / bytes_per_s >= self.flops / flops_per_s


def attn_mlp_params(hidden: int, q_heads: int, kv_heads: int, head_dim: int,
                    intermediate: int) -> int:
    """q, k, v, o projections plus a gated MLP (gate, up, down)."""
    return (2 * hidden * q_heads * head_dim + 2 * hidden * kv_heads * head_dim
            + 3 * hidden * intermediate)


def text_layer_params(t: TextConfig) -> int:
    return attn_mlp_params(t.hidden_size, t.num_attention_heads, t.num_key_value_heads,
                           t.head_dim, t.intermediate_size)


def expert_layer_params(e: ExpertConfig) -> int:
    return attn_mlp_params(e.hidden_size, e.num_attention_heads, e.num_key_value_heads,
                           e.head_dim, e.intermediate_size)


def vision_block_params(v: VisionConfig) -> int:
    """qkv + proj (4 h^2) and the two-layer MLP (2 h I)."""
    return 4 * v.hidden_size ** 2 + 2 * v.hidden_size * v.intermediate_size


def merger_params(v: VisionConfig) -> int:
    merged = v.hidden_size * v.spatial_merge_size ** 2
    return merged * merged + merged * v.out_hidden_size


def patch_embed_params(v: VisionConfig) -> int:
    return v.in_channels * v.temporal_patch_size * v.patch_size ** 2 * v.hidden_size


def drafter_params(d: DrafterConfig, t: TextConfig) -> int:
    """fc over the concatenated target features plus the decoder layers (lm_head excluded)."""
    fc = len(d.target_layer_ids) * t.hidden_size * d.hidden_size
    layer = attn_mlp_params(d.hidden_size, d.num_attention_heads, d.num_key_value_heads,
                            d.head_dim, d.intermediate_size)
    return fc + d.num_hidden_layers * layer


def kv_bytes(t: TextConfig, slots: int, dtype_bytes: int) -> int:
    """Keys and values of `slots` cache slots over all layers."""
    return 2 * t.num_hidden_layers * t.num_key_value_heads * t.head_dim * slots * dtype_bytes


def text_pass(t: TextConfig, tokens: int, keys_total: int, kv_slots: int, logits_tokens: int,
              dtype_bytes: int) -> Pass:
    """`tokens` queries attending `keys_total` query-key pairs per layer over `kv_slots`
    cached slots; the lm_head runs on `logits_tokens` of them."""
    attn = 4 * t.num_attention_heads * t.head_dim * keys_total
    flops = t.num_hidden_layers * (2 * tokens * text_layer_params(t) + attn)
    flops += 2 * logits_tokens * t.hidden_size * t.vocab_size
    weights = t.num_hidden_layers * text_layer_params(t)
    if logits_tokens:
        weights += t.hidden_size * t.vocab_size
    return Pass(flops, weights * dtype_bytes + kv_bytes(t, kv_slots, dtype_bytes))


def vision_pass(v: VisionConfig, images: int, patches_per_image: int,
                dtype_bytes: int) -> Pass:
    """Full attention within each image; the main and every deepstack merger on 2x2 groups."""
    n = images * patches_per_image
    mergers = 1 + len(v.deepstack_visual_indexes)
    merged_tokens = n // v.spatial_merge_size ** 2
    flops = 2 * n * patch_embed_params(v)
    flops += v.depth * (2 * n * vision_block_params(v) + 4 * v.hidden_size * patches_per_image
                        * n)
    flops += mergers * 2 * merged_tokens * merger_params(v)
    weights = patch_embed_params(v) + v.depth * vision_block_params(v)
    weights += mergers * merger_params(v)
    return Pass(flops, weights * dtype_bytes)


def expert_pass(e: ExpertConfig, t: TextConfig, samples: int, action_tokens: int,
                prefix: int, dtype_bytes: int) -> Pass:
    """One velocity evaluation: `samples` x `action_tokens` queries, each attending the
    `prefix` backbone slots and the action tokens (bidirectional)."""
    queries = samples * action_tokens
    attn = 4 * e.num_attention_heads * e.head_dim * queries * (prefix + action_tokens)
    flops = e.num_hidden_layers * (2 * queries * expert_layer_params(e) + attn)
    weights = e.num_hidden_layers * expert_layer_params(e)
    return Pass(flops, weights * dtype_bytes + kv_bytes(t, prefix, dtype_bytes))


def prefix_rotation_pass(t: TextConfig, prefix: int, dtype_bytes: int) -> Pass:
    """RoPE on the cached prefix keys once per action stage: read and write the keys."""
    return Pass(0.0, kv_bytes(t, prefix, dtype_bytes))


def drafter_pass(d: DrafterConfig, t: TextConfig, dtype_bytes: int) -> Pass:
    """One block proposal: `context_len` feature tokens, `block_size` block queries
    attending [context; block], lm_head on the block_size - 1 drafts."""
    c, k = d.context_len, d.block_size
    layer_q = 2 * d.hidden_size * d.num_attention_heads * d.head_dim
    layer_kv = 2 * d.hidden_size * d.num_key_value_heads * d.head_dim
    mlp = 3 * d.hidden_size * d.intermediate_size
    attn = 4 * d.num_attention_heads * d.head_dim * k * (c + k)
    flops = 2 * c * len(d.target_layer_ids) * t.hidden_size * d.hidden_size
    flops += d.num_hidden_layers * (2 * k * (layer_q + mlp) + 2 * (c + k) * layer_kv + attn)
    flops += 2 * (k - 1) * t.hidden_size * t.vocab_size
    weights = drafter_params(d, t) + t.hidden_size * t.vocab_size
    return Pass(flops, weights * dtype_bytes)


def patches_per_image(cfg: ModelConfig) -> int:
    v, p = cfg.vision, cfg.prompt
    return (p.image_height // v.patch_size) * (p.image_width // v.patch_size)
