"""EAGLE-3-style autoregressive drafter: one decoder layer drafting a chain of tokens.

Every drafter position pairs a token with a hidden vector: RMSNorm(embedding of the token)
and RMSNorm(hidden vector) are concatenated [2H] and feed the layer's q/k/v projections; the
residual stream starts from the hidden vector. For a committed token at cache slot j the
hidden vector is `fc` of the target's features of slot j - 1 (the target layers
`target_layer_ids`, low / mid / high, concatenated); for a drafted token it is the layer's
own output at the previous chain step. Each position attends causally to all earlier ones.

A proposal over the context slots s - C .. s - 1 (features f, token ids t) and the pending
token p (slot s): context entries (t_j, fc(f_{j-1})) for j = s - C + 1 .. s - 1 give keys and
values only; chain step 0 is (p, fc(f_{s-1})), chain step i >= 1 is (d_i, output of step
i - 1), where d_i is the token drafted from step i - 1's logits (or, when training, the
known token). Step i's logits (final RMSNorm, the target's lm_head) draft d_{i+1}.

Rotary as the DFlash drafter: `rotary="flat"` positions [B, C + K] (cache slots),
`rotary="mrope"` the target's 3D positions [3, B, C + K]; context entry j and chain step i
take the positions of their tokens. context_mask [B, C] (True = real token) hides padding.

Weights under `drafter.`: fc.weight, midlayer.{input_layernorm,hidden_norm,
post_attention_layernorm}.weight, midlayer.self_attn.{q,k,v,o}_proj.weight,
midlayer.self_attn.{q,k}_norm.weight, midlayer.mlp.{gate,up,down}_proj.weight, norm.weight.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from flashdrive_ros.model.config import DrafterConfig, TextConfig
from flashdrive_ros.model.drafter import check_drafter_config
from flashdrive_ros.model.drafter_weights import DrafterWeights
from flashdrive_ros.model.layers import QKNormAttention, RMSNorm, SwiGLU
from flashdrive_ros.model.rope import apply_rotary, drafter_cos_sin, inverse_frequencies

NextTokens = Callable[[int, torch.Tensor], torch.Tensor]


class EagleAttention(QKNormAttention):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__(cfg, input_size=2 * cfg.hidden_size)

    def keys_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [B, T, 2H]; cos, sin: [B, T, D] -> rotated k, v: [B, Hkv, T, D]."""
        return apply_rotary(self.keys(x), cos, sin), self.values(x)

    def query(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x: [B, T, 2H] -> rotated q: [B, Hq, T, D]."""
        return apply_rotary(self.queries(x), cos, sin)

    def attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
               key_mask: torch.Tensor) -> torch.Tensor:
        """q: [B, Hq, 1, D]; keys, values: [B, Hkv, S, D]; key_mask: [B, S] -> [B, 1, H]."""
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=key_mask[:, None, None],
                                             enable_gqa=self.num_heads != self.num_kv_heads)
        return self.output(out)


class EagleLayer(nn.Module):
    def __init__(self, cfg: DrafterConfig) -> None:
        super().__init__()
        self.self_attn = EagleAttention(cfg)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def fuse(self, token_embeds: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """[B, T, H] each -> [B, T, 2H]."""
        return torch.cat([self.input_layernorm(token_embeds), self.hidden_norm(hidden)], dim=-1)

    def step(self, token_embeds: torch.Tensor, hidden: torch.Tensor, cos: torch.Tensor,
             sin: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
             key_mask: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One chain position. token_embeds, hidden: [B, 1, H]; cos, sin: [B, 1, D];
        keys, values: [B, Hkv, S, D] of the earlier positions; key_mask: [B, S].
        Returns (output [B, 1, H], keys, values, key_mask) grown by this position."""
        x = self.fuse(token_embeds, hidden)  # x: [B, 1, 2H]
        k, v = self.self_attn.keys_values(x, cos, sin)
        keys = torch.cat([keys, k], dim=2)
        values = torch.cat([values, v], dim=2)
        ones = torch.ones(key_mask.shape[0], 1, dtype=torch.bool, device=key_mask.device)
        key_mask = torch.cat([key_mask, ones], dim=1)
        out = hidden + self.self_attn.attend(self.self_attn.query(x, cos, sin), keys, values,
                                             key_mask)
        out = out + self.mlp(self.post_attention_layernorm(out))
        return out, keys, values, key_mask


class EagleDrafter(DrafterWeights):
    """EAGLE-3-style drafter over a Qwen3-VL target described by `text_cfg`."""

    def __init__(self, cfg: DrafterConfig, text_cfg: TextConfig) -> None:
        super().__init__()
        check_drafter_config(cfg, text_cfg, "eagle3")
        if cfg.num_hidden_layers != 1:
            raise ValueError(f"the eagle3 drafter has one decoder layer, config asks for "
                             f"{cfg.num_hidden_layers}")
        self.cfg = cfg
        self.text_cfg = text_cfg
        self.vocab_size = text_cfg.vocab_size
        self.fc = nn.Linear(len(cfg.target_layer_ids) * text_cfg.hidden_size, cfg.hidden_size,
                            bias=False)
        self.midlayer = EagleLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.register_buffer("inv_freq", inverse_frequencies(cfg.head_dim, text_cfg.rope_theta),
                             persistent=False)  # inv_freq: [D / 2]

    @property
    def feature_size(self) -> int:
        return self.fc.in_features

    def rotary_cos_sin(self, positions: torch.Tensor, dtype: torch.dtype
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: [B, S] (flat) or [3, B, S] (mrope) -> cos, sin: [B, S, D]."""
        return drafter_cos_sin(self.cfg.rotary, positions, self.inv_freq,
                               self.text_cfg.mrope_section, self.text_cfg.mrope_interleaved,
                               dtype)

    def chain_logits(self, context_features: torch.Tensor, context_ids: torch.Tensor,
                     pending: torch.Tensor, positions: torch.Tensor,
                     embed_tokens: nn.Embedding, lm_head: nn.Module, next_tokens: NextTokens,
                     context_mask: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Drafts K - 1 tokens after `pending`.

        context_features: [B, C, L*H_t] and context_ids: [B, C] of the context slots;
        pending: [B]; positions: [B, C + K] or [3, B, C + K]; next_tokens(i, logits [B, V])
        -> [B] long: the token fed to step i + 1 (a draft, or the known token when training).
        Returns (logits [B, K - 1, V], tokens [B, K - 1] from next_tokens).
        """
        b, c, _ = context_features.shape
        self._check(context_features, context_ids, pending, positions, context_mask)
        k = positions.shape[-1] - c
        context_mask = (torch.ones(b, c, dtype=torch.bool, device=context_ids.device)
                        if context_mask is None else context_mask)
        hidden = self.fc(context_features.to(self.fc.weight.dtype))  # hidden: [B, C, H]
        cos, sin = self.rotary_cos_sin(positions, hidden.dtype)  # cos: [B, C + K, D]
        entries = self.midlayer.fuse(embed_tokens(context_ids[:, 1:]).to(hidden.dtype),
                                     hidden[:, :-1])  # entries: [B, C - 1, 2H]
        keys, values = self.midlayer.self_attn.keys_values(entries, cos[:, 1:c], sin[:, 1:c])
        key_mask = context_mask[:, 1:] & context_mask[:, :-1]  # key_mask: [B, C - 1]
        token = pending
        state = hidden[:, -1:]  # state: [B, 1, H]
        logits, tokens = [], []
        for i in range(k - 1):
            embeds = embed_tokens(token[:, None]).to(hidden.dtype)  # embeds: [B, 1, H]
            at = slice(c + i, c + i + 1)
            state, keys, values, key_mask = self.midlayer.step(
                embeds, state, cos[:, at], sin[:, at], keys, values, key_mask)
            step_logits = lm_head(self.norm(state))[:, 0]  # step_logits: [B, V]
            token = next_tokens(i, step_logits)
            logits.append(step_logits)
            tokens.append(token)
        return torch.stack(logits, dim=1), torch.stack(tokens, dim=1)

    def teacher_forced_logits(self, context_features: torch.Tensor, context_ids: torch.Tensor,
                              pending: torch.Tensor, labels: torch.Tensor,
                              positions: torch.Tensor, embed_tokens: nn.Embedding,
                              lm_head: nn.Module, context_mask: torch.Tensor | None = None
                              ) -> torch.Tensor:
        """The chain fed the known tokens `labels` ([B, K - 1]; negative = unknown, fed as
        token 0) with its own hidden states -> logits [B, K - 1, V]."""
        known = labels.clamp(min=0)
        logits, _ = self.chain_logits(context_features, context_ids, pending, positions,
                                      embed_tokens, lm_head, lambda i, _: known[:, i],
                                      context_mask)
        return logits

    def _check(self, context_features: torch.Tensor, context_ids: torch.Tensor,
               pending: torch.Tensor, positions: torch.Tensor,
               context_mask: torch.Tensor | None) -> None:
        if context_features.ndim != 3 or context_features.shape[-1] != self.feature_size:
            raise ValueError(f"context_features must be [B, C, {self.feature_size}], got "
                             f"{tuple(context_features.shape)}")
        b, c, _ = context_features.shape
        if c < 1:
            raise ValueError("the eagle3 drafter needs the features of at least one token")
        if context_ids.shape != (b, c) or pending.shape != (b,):
            raise ValueError(f"context_ids must be [{b}, {c}] and pending [{b}], got "
                             f"{tuple(context_ids.shape)} and {tuple(pending.shape)}")
        lead = (b,) if self.cfg.rotary == "flat" else (3, b)
        if positions.shape[:-1] != lead or positions.shape[-1] < c + 2:
            raise ValueError(f"{self.cfg.rotary} drafter positions must be "
                             f"[{', '.join(map(str, lead))}, C + K] with K >= 2, got "
                             f"{list(positions.shape)}")
        self.check_context_mask(context_mask, b, c)
