"""DFlash block-diffusion drafter: one forward proposes a whole block of tokens.

Inputs: target hidden states of the last C committed tokens, taken at
`DrafterConfig.target_layer_ids` and concatenated ([B, C, L * H_target]), and a block of K
tokens: the last committed token followed by K - 1 mask tokens. `fc` + RMSNorm turn the
target features into C context vectors. Each decoder layer lets the K block queries attend,
without a causal mask, to keys/values of [context ; block]; context keys/values come from the
projected features (the same for every layer), block keys/values from the running block
state. Final RMSNorm, then the target's own lm_head gives logits for block positions
1..K-1 (the drafts).

The drafter owns no vocabulary: block token embeddings come from the target's `embed_tokens`
and logits from the target's `lm_head`, both passed in per call. The mask token
(id = vocab_size) is outside the target's embedding table, so the drafter holds a learned
`mask_embedding` [H] used wherever a block id equals vocab_size.

Rotary: the target's inverse frequencies (same head_dim and rope_theta). `rotary="flat"`
takes 1D positions [B, C + K] (sequence index = cache slot, FlatRoPE); `rotary="mrope"`
takes the target's 3D positions [3, B, C + K] with its mrope_section.

An optional context_mask [B, C] (True = real token) hides padded context entries, for
batches whose rows have different context lengths.

Weights live under `drafter.` in safetensors (the file's metadata holds the DrafterConfig):
fc.weight, hidden_norm.weight, mask_embedding,
layers.{i}.{input_layernorm,post_attention_layernorm}.weight,
layers.{i}.self_attn.{q,k,v,o}_proj.weight, layers.{i}.self_attn.{q,k}_norm.weight,
layers.{i}.mlp.{gate,up,down}_proj.weight, norm.weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from flashdrive_ros.model.config import DrafterConfig, TextConfig
from flashdrive_ros.model.drafter_weights import DrafterWeights
from flashdrive_ros.model.layers import QKNormAttention, RMSNorm, SwiGLU
from flashdrive_ros.model.rope import apply_rotary, drafter_cos_sin, inverse_frequencies


class DrafterAttention(QKNormAttention):
    def projections(self, x: torch.Tensor, context: torch.Tensor, cos: torch.Tensor,
                    sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rotated q [B, Hq, K, D], rotated k and v [B, Hkv, C + K, D]."""
        k_len = x.shape[1]
        both = torch.cat([context, x], dim=1)  # both: [B, C + K, H]
        q = apply_rotary(self.queries(x), cos[:, -k_len:], sin[:, -k_len:])
        k = apply_rotary(self.keys(both), cos, sin)
        return q, k, self.values(both)

    def forward(self, x: torch.Tensor, context: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor, context_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, K, H] block; context: [B, C, H]; cos, sin: [B, C + K, D];
        context_mask: [B, C] bool or None -> [B, K, H]."""
        q, k, v = self.projections(x, context, cos, sin)
        if torch.onnx.is_in_onnx_export():
            return self.output(self.grouped_attention(q, k, v))
        mask = key_mask(context_mask, x.shape[1])
        return self.output(F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, enable_gqa=self.num_heads != self.num_kv_heads))

    def attention_weights(self, x: torch.Tensor, context: torch.Tensor, cos: torch.Tensor,
                          sin: torch.Tensor, context_mask: torch.Tensor | None = None
                          ) -> torch.Tensor:
        """The softmax weights of `forward`: [B, Hq, K, C + K] float32, keys = [context; block]."""
        q, k, _ = self.projections(x, context, cos, sin)
        k = k.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)  # [B, Hq, C+K, D]
        scores = q.float() @ k.float().transpose(-1, -2) / self.head_dim ** 0.5
        mask = key_mask(context_mask, x.shape[1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.softmax(scores, dim=-1)


def key_mask(context_mask: torch.Tensor | None, block_len: int) -> torch.Tensor | None:
    """context_mask [B, C] -> attention mask [B, 1, 1, C + K] over [context; block]."""
    if context_mask is None:
        return None
    block = torch.ones(context_mask.shape[0], block_len, dtype=torch.bool,
                       device=context_mask.device)
    return torch.cat([context_mask, block], dim=1)[:, None, None, :]


class DrafterLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.self_attn = DrafterAttention(cfg)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, context: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor, context_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), context, cos, sin, context_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def check_drafter_config(cfg: DrafterConfig, text_cfg: TextConfig, kind: str) -> None:
    """A drafter of `kind` over the target `text_cfg` can be built from `cfg`."""
    if cfg.kind != kind:
        raise ValueError(f"this drafter implements kind {kind!r}, config asks for {cfg.kind!r}")
    if cfg.hidden_size != text_cfg.hidden_size:
        raise ValueError(f"drafter hidden_size {cfg.hidden_size} must equal the target's "
                         f"{text_cfg.hidden_size} (it reuses embed_tokens and lm_head)")
    if cfg.head_dim != text_cfg.head_dim:
        raise ValueError(f"drafter head_dim {cfg.head_dim} must equal the target's "
                         f"{text_cfg.head_dim} (shared rotary frequencies)")
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise ValueError("drafter num_attention_heads must be a multiple of "
                         "num_key_value_heads")
    bad = [i for i in cfg.target_layer_ids if not 0 <= i < text_cfg.num_hidden_layers]
    if bad:
        raise ValueError(f"drafter target_layer_ids {bad} outside the target's "
                         f"{text_cfg.num_hidden_layers} layers")


class Drafter(DrafterWeights):
    """DFlash drafter over a Qwen3-VL target described by `text_cfg`."""

    def __init__(self, cfg: DrafterConfig, text_cfg: TextConfig) -> None:
        super().__init__()
        check_drafter_config(cfg, text_cfg, "dflash")
        self.cfg = cfg
        self.text_cfg = text_cfg
        self.vocab_size = text_cfg.vocab_size
        feature_size = len(cfg.target_layer_ids) * text_cfg.hidden_size
        self.fc = nn.Linear(feature_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mask_embedding = nn.Parameter(torch.randn(cfg.hidden_size) * 0.02)
        self.layers = nn.ModuleList(DrafterLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer("inv_freq", inverse_frequencies(cfg.head_dim, text_cfg.rope_theta),
                             persistent=False)  # inv_freq: [D / 2]

    @property
    def mask_token_id(self) -> int:
        return self.vocab_size

    @property
    def feature_size(self) -> int:
        return self.fc.in_features

    def embed_block(self, block_ids: torch.Tensor, embed_tokens: nn.Embedding) -> torch.Tensor:
        """block_ids: [B, K] in [0, vocab_size] (vocab_size = mask) -> [B, K, H]."""
        if block_ids.ndim != 2 or block_ids.dtype != torch.long:
            raise ValueError(f"block_ids must be long [B, K], got {block_ids.dtype} "
                             f"{tuple(block_ids.shape)}")
        if int(block_ids.min()) < 0 or int(block_ids.max()) > self.vocab_size:
            raise ValueError(f"block ids outside [0, {self.vocab_size}] "
                             f"({self.vocab_size} = mask token)")
        return self.block_embeddings(block_ids, embed_tokens)

    def block_embeddings(self, block_ids: torch.Tensor, embed_tokens: nn.Embedding
                         ) -> torch.Tensor:
        """`embed_block` without its checks (capture-safe: no host reads)."""
        is_mask = block_ids == self.mask_token_id
        embeds = embed_tokens(block_ids.masked_fill(is_mask, 0))  # embeds: [B, K, H]
        mask_row = self.mask_embedding.to(embeds.dtype).expand_as(embeds)
        return torch.where(is_mask[..., None], mask_row, embeds)

    def rotary_cos_sin(self, positions: torch.Tensor, dtype: torch.dtype
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: [B, S] (flat) or [3, B, S] (mrope) -> cos, sin: [B, S, D]."""
        return drafter_cos_sin(self.cfg.rotary, positions, self.inv_freq,
                               self.text_cfg.mrope_section, self.text_cfg.mrope_interleaved,
                               dtype)

    def context_vectors(self, context_features: torch.Tensor) -> torch.Tensor:
        """[B, C, L*H_t] -> [B, C, H]: fc + RMSNorm."""
        return self.hidden_norm(self.fc(context_features.to(self.fc.weight.dtype)))

    def forward(self, context_features: torch.Tensor, block_embeds: torch.Tensor,
                positions: torch.Tensor, context_mask: torch.Tensor | None = None
                ) -> torch.Tensor:
        """context_features: [B, C, L*H_t]; block_embeds: [B, K, H] -> hidden [B, K, H] (normed).

        positions: [B, C + K] for rotary "flat", [3, B, C + K] for "mrope".
        """
        self._check(context_features, block_embeds, positions, context_mask)
        context = self.context_vectors(context_features)
        x = block_embeds.to(context.dtype)
        cos, sin = self.rotary_cos_sin(positions, x.dtype)
        for layer in self.layers:
            x = layer(x, context, cos, sin, context_mask)
        return self.norm(x)

    def first_layer_attention(self, context_features: torch.Tensor, block_embeds: torch.Tensor,
                              positions: torch.Tensor, context_mask: torch.Tensor | None = None
                              ) -> torch.Tensor:
        """Attention weights of layer 0: [B, Hq, K, C + K], keys = [context; block]."""
        self._check(context_features, block_embeds, positions, context_mask)
        context = self.context_vectors(context_features)
        x = block_embeds.to(context.dtype)
        cos, sin = self.rotary_cos_sin(positions, x.dtype)
        layer = self.layers[0]
        return layer.self_attn.attention_weights(layer.input_layernorm(x), context, cos, sin,
                                                 context_mask)

    def propose_logits(self, context_features: torch.Tensor, block_ids: torch.Tensor,
                       positions: torch.Tensor, embed_tokens: nn.Embedding,
                       lm_head: nn.Module, context_mask: torch.Tensor | None = None
                       ) -> torch.Tensor:
        """block_ids: [B, K] (committed token, then masks) -> draft logits [B, K - 1, V]."""
        hidden = self(context_features, self.embed_block(block_ids, embed_tokens), positions,
                      context_mask)
        return lm_head(hidden[:, 1:])

    def _check(self, context_features: torch.Tensor, block_embeds: torch.Tensor,
               positions: torch.Tensor, context_mask: torch.Tensor | None = None) -> None:
        if context_features.ndim != 3 or context_features.shape[-1] != self.feature_size:
            raise ValueError(f"context_features must be [B, C, {self.feature_size}], got "
                             f"{tuple(context_features.shape)}")
        b, c, _ = context_features.shape
        if block_embeds.ndim != 3 or block_embeds.shape[0] != b \
                or block_embeds.shape[2] != self.cfg.hidden_size:
            raise ValueError(f"block_embeds must be [{b}, K, {self.cfg.hidden_size}], got "
                             f"{tuple(block_embeds.shape)}")
        s = c + block_embeds.shape[1]
        want = (b, s) if self.cfg.rotary == "flat" else (3, b, s)
        if tuple(positions.shape) != want:
            raise ValueError(f"{self.cfg.rotary} drafter positions must be {list(want)}, got "
                             f"{list(positions.shape)}")
        self.check_context_mask(context_mask, b, c)
