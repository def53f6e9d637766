"""CoC decoding over the target backbone: prefill, one-token steps, autoregressive loop.

Batch size is 1. Generated tokens take text positions that continue after the prompt's max
position, equal on all three M-RoPE axes, and the cache slots right after the prompt; each
decode token attends to every cached slot before it (the backbone's causal-by-slot mask).

Decode state. `generated` holds the committed CoC tokens; its last entry is *pending*: chosen
but not yet written to the cache. The cache holds the prompt and `generated[:-1]`.
Stop rule: decoding ends when the pending token is `<|cot_end|>` or `max_new_tokens` tokens
are committed; `finish` then writes the pending token, `<|cot_end|>` if it was not generated,
and `<|traj_future_start|>` so that the action expert finds their keys and values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from flashdrive_ros.model.backbone import TextBackbone
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.positions import text_positions


@dataclass(frozen=True)
class StopRule:
    cot_end_id: int
    traj_future_start_id: int
    max_new_tokens: int

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if min(self.cot_end_id, self.traj_future_start_id) < 0 \
                or self.cot_end_id == self.traj_future_start_id:
            raise ValueError("cot_end_id and traj_future_start_id must be distinct ids >= 0")


@dataclass(frozen=True)
class Sampling:
    """Temperature / nucleus sampling; decoding without a Sampling is greedy (argmax)."""

    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError(f"sampling temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def sampling_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """logits: [..., V] -> float64 probabilities [..., V] after temperature and top-p."""
    probs = torch.softmax(logits.double() / sampling.temperature, dim=-1)
    if sampling.top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = sorted_probs.cumsum(dim=-1) - sorted_probs < sampling.top_p
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs * keep)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def choose_token(logits: torch.Tensor, sampling: Sampling | None,
                 generator: torch.Generator | None) -> int:
    """logits: [V] -> argmax, or a draw from `sampling_probs`."""
    if sampling is None:
        return int(torch.argmax(logits))
    return int(torch.multinomial(sampling_probs(logits, sampling), 1, generator=generator))


@dataclass
class TargetStep:
    logits: torch.Tensor  # [T, V]
    features: torch.Tensor | None  # [T, L * H] hidden of `feature_layers`, concatenated


class Target:
    """The target's text backbone and lm_head; `feature_layers` are the layers a drafter reads
    (their outputs are concatenated in that order)."""

    def __init__(self, backbone: TextBackbone, lm_head: nn.Module,
                 feature_layers: tuple[int, ...] = ()) -> None:
        bad = [i for i in feature_layers if not 0 <= i < backbone.cfg.num_hidden_layers]
        if bad:
            raise ValueError(f"feature_layers {bad} outside the backbone's "
                             f"{backbone.cfg.num_hidden_layers} layers")
        self.backbone = backbone
        self.lm_head = lm_head
        self.feature_layers = tuple(feature_layers)

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.backbone.embed_tokens

    @property
    def vocab_size(self) -> int:
        return self.backbone.cfg.vocab_size

    def run_embeds(self, inputs_embeds: torch.Tensor, positions: torch.Tensor, cache: KVCache,
                   slots: torch.Tensor, attn_mask: torch.Tensor | None = None,
                   visual_mask: torch.Tensor | None = None,
                   deepstack: list[torch.Tensor] | None = None,
                   last_only: bool = False) -> TargetStep:
        """inputs_embeds: [1, T, H]; positions: [3, 1, T]; slots: [T] -> logits, features."""
        if inputs_embeds.ndim != 3 or inputs_embeds.shape[0] != 1:
            raise ValueError(f"decoding runs batch 1: inputs_embeds must be [1, T, H], got "
                             f"{tuple(inputs_embeds.shape)}")
        out = self.backbone(inputs_embeds, positions, cache, slots, attn_mask=attn_mask,
                            visual_mask=visual_mask, deepstack=deepstack,
                            output_layers=self.feature_layers)
        hidden = out.hidden[0, -1:] if last_only else out.hidden[0]  # hidden: [T, H]
        features = None
        if self.feature_layers:
            features = torch.cat([out.layer_hidden[i][0] for i in self.feature_layers], dim=-1)
        return TargetStep(self.lm_head(hidden), features)

    def run_tokens(self, token_ids: list[int], cache: KVCache, start_position: int
                   ) -> TargetStep:
        """Write `token_ids` at the slots from cache.length on, text positions from
        `start_position`; logits and features for every token: [T, V], [T, L * H]."""
        ids = torch.tensor([token_ids], dtype=torch.long, device=cache.k.device)
        if int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size:
            raise ValueError(f"token ids {token_ids} outside the vocabulary [0, "
                             f"{self.vocab_size})")
        start = cache.length
        if start + len(token_ids) > cache.capacity:
            raise ValueError(f"cache capacity {cache.capacity} cannot hold {len(token_ids)} "
                             f"more tokens after {start}")
        slots = torch.arange(start, start + len(token_ids), device=ids.device)
        positions = text_positions(start_position, len(token_ids), device=ids.device)
        embeds = self.embed_tokens(ids)  # embeds: [1, T, H]
        return self.run_embeds(embeds, positions, cache, slots)

    def run_token_tensor(self, token_ids: torch.Tensor, cache: KVCache, start_position: int
                         ) -> TargetStep:
        """`run_tokens` for ids already on the device ([T] long, e.g. drafts)."""
        return self.run_tokens(token_ids.tolist(), cache, start_position)


@dataclass
class DecodeState:
    """Committed tokens (the last pending), where the next text position is, and the target
    features of the last `context_len` cached tokens (for a drafter), with their cache slots
    and, where known, their token ids."""

    cache: KVCache
    generated: list[int]
    prompt_next_position: int
    context_len: int = 0
    features: torch.Tensor | None = None  # [C', L * H], oldest first
    feature_slots: torch.Tensor | None = None  # [C'] cache slots of `features`
    feature_ids: torch.Tensor | None = None  # [C'] token ids at `feature_slots`
    accepted_lengths: list[int] = field(default_factory=list)
    target_forwards: int = 0
    tail_in_cache: bool = False

    @property
    def pending(self) -> int:
        return self.generated[-1]

    @property
    def pending_position(self) -> int:
        return self.prompt_next_position + len(self.generated) - 1

    def done(self, stop: StopRule) -> bool:
        return self.pending == stop.cot_end_id or len(self.generated) >= stop.max_new_tokens

    def append_features(self, features: torch.Tensor | None, slots: torch.Tensor,
                        ids: torch.Tensor | None = None) -> None:
        """features: [T, L * H] of the tokens newly kept at cache `slots` ([T]); ids: [T]
        their token ids (None: unknown, and then for every later token too)."""
        if self.context_len == 0 or features is None:
            return
        if self.features is not None:
            features = torch.cat([self.features, features])
            slots = torch.cat([self.feature_slots, slots])
            ids = None if (ids is None or self.feature_ids is None) else torch.cat(
                [self.feature_ids, ids.to(self.feature_ids.device)])
        self.features = features[-self.context_len:]
        self.feature_slots = slots[-self.context_len:]
        self.feature_ids = None if ids is None else ids[-self.context_len:]


@dataclass
class PrefillOutput:
    logits: torch.Tensor  # [V] at the last prompt token
    next_position: int  # the prompt's max position + 1
    features: torch.Tensor | None  # [C', L * H] of the last prompt tokens
    feature_slots: torch.Tensor | None  # [C']
    feature_ids: torch.Tensor | None = None  # [C'] their token ids, when the prefill had them


@dataclass
class DecodeResult:
    """tokens: the CoC ending in <|cot_end|>, <|traj_future_start|> (all in the cache).

    accepted_lengths: tokens committed per verify round (speculative decoding only).
    next_position: the text position after <|traj_future_start|>.
    """

    tokens: list[int]
    stopped_by: str
    next_position: int
    accepted_lengths: list[int]
    target_forwards: int


def prefill(target: Target, inputs_embeds: torch.Tensor, positions: torch.Tensor,
            cache: KVCache, slots: torch.Tensor | None = None,
            attn_mask: torch.Tensor | None = None, visual_mask: torch.Tensor | None = None,
            deepstack: list[torch.Tensor] | None = None, context_len: int = 0,
            token_ids: torch.Tensor | None = None) -> PrefillOutput:
    """Run the prompt (or, streaming, its recomputed part ending with the prompt's last token).

    slots None: a full prefill at slots [0, T) of an emptied cache. The cache must then hold
    exactly the prompt (length = max slot + 1). `context_len` last tokens keep features;
    token_ids ([T], optional) are the ids of the T tokens run (image tokens: the image pad).
    """
    t = inputs_embeds.shape[1]
    if slots is None:
        cache.reset()
        slots = torch.arange(t, device=inputs_embeds.device)
    step = target.run_embeds(inputs_embeds, positions, cache, slots, attn_mask, visual_mask,
                             deepstack, last_only=True)
    if cache.length != int(slots[-1]) + 1:
        raise ValueError(f"the prompt's last token must sit in the last cache slot: slot "
                         f"{int(slots[-1])}, cache length {cache.length}")
    next_position = int(cache.positions[:, 0, :cache.length].max()) + 1
    keep = min(context_len, t)
    features = step.features[t - keep:] if (step.features is not None and keep) else None
    feature_slots = slots[t - keep:] if features is not None else None
    feature_ids = None
    if features is not None and token_ids is not None:
        if token_ids.shape != (t,):
            raise ValueError(f"token_ids must be [{t}], got {tuple(token_ids.shape)}")
        feature_ids = token_ids[t - keep:].to(slots.device)
    return PrefillOutput(step.logits[-1], next_position, features, feature_slots, feature_ids)


def start_state(prefill_out: PrefillOutput, cache: KVCache, sampling: Sampling | None,
                generator: torch.Generator | None, context_len: int = 0) -> DecodeState:
    first = choose_token(prefill_out.logits, sampling, generator)
    state = DecodeState(cache, [first], prefill_out.next_position, context_len)
    if prefill_out.features is not None:
        state.append_features(prefill_out.features, prefill_out.feature_slots,
                              prefill_out.feature_ids)
    return state


def decode_one(target: Target, state: DecodeState) -> TargetStep:
    """Write the pending token to the cache; logits [1, V] for the token after it."""
    state.target_forwards += 1
    return target.run_tokens([state.pending], state.cache, state.pending_position)


def commit_tokens(state: DecodeState, tokens: list[int], stop: StopRule) -> int:
    """Append `tokens` until the stop rule holds; returns how many were appended."""
    count = 0
    for token in tokens:
        if state.done(stop):
            break
        state.generated.append(int(token))
        count += 1
    return count


def finish(target: Target, state: DecodeState, stop: StopRule) -> DecodeResult:
    """Write the pending token, <|cot_end|> if missing, and <|traj_future_start|>; no forward
    when the last verify round already wrote <|cot_end|>, <|traj_future_start|>
    (`tail_in_cache`)."""
    if not state.done(stop):
        raise ValueError("finish called before the stop rule holds")
    stopped_by = "cot_end" if state.pending == stop.cot_end_id else "max_tokens"
    tail = [state.pending]
    if stopped_by == "max_tokens":
        tail.append(stop.cot_end_id)
    tail.append(stop.traj_future_start_id)
    if not state.tail_in_cache:
        target.run_tokens(tail, state.cache, state.pending_position)
        state.target_forwards += 1
    tokens = state.generated + tail[1:]
    return DecodeResult(tokens, stopped_by, state.prompt_next_position + len(tokens),
                        state.accepted_lengths, state.target_forwards)


def required_capacity(prompt_slots: int, stop: StopRule, block_size: int = 1) -> int:
    """Cache slots a decode after `prompt_slots` slots may touch."""
    return prompt_slots + stop.max_new_tokens + 2 + block_size


@torch.no_grad()
def forced_decode(target: Target, prefill_out: PrefillOutput, cache: KVCache, stop: StopRule,
                  coc_ids: Sequence[int]) -> DecodeResult:
    """`coc_ids` (a CoC without <|cot_end|>, at most the stop rule's length) written to the
    cache in one forward with <|cot_end|> and <|traj_future_start|>, in place of the tokens the
    model would choose: the action expert then plans under a CoC of the caller's."""
    body = [int(t) for t in coc_ids]
    if not body or stop.cot_end_id in body or stop.traj_future_start_id in body:
        raise ValueError("coc_ids must be a non-empty CoC without <|cot_end|> and "
                         "<|traj_future_start|>")
    if len(body) > stop.max_new_tokens:
        raise ValueError(f"the CoC has {len(body)} tokens, more than the "
                         f"{stop.max_new_tokens} a CoC may have")
    tokens = body + [stop.cot_end_id, stop.traj_future_start_id]
    target.run_tokens(tokens, cache, prefill_out.next_position)
    return DecodeResult(tokens, "cot_end", prefill_out.next_position + len(tokens), [], 1)


@torch.no_grad()
def autoregressive_decode(target: Target, prefill_out: PrefillOutput, cache: KVCache,
                          stop: StopRule, sampling: Sampling | None = None,
                          generator: torch.Generator | None = None) -> DecodeResult:
    state = start_state(prefill_out, cache, sampling, generator)
    while not state.done(stop):
        step = decode_one(target, state)
        commit_tokens(state, [choose_token(step.logits[-1], sampling, generator)], stop)
    return finish(target, state, stop)


def greedy_decode(target: Target, prefill_out: PrefillOutput, cache: KVCache,
                  stop: StopRule) -> DecodeResult:
    return autoregressive_decode(target, prefill_out, cache, stop)
