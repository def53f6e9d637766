"""The engine's fixed-shape steps as CUDA graphs: per-view encode, DFlash block proposal
(one graph per context length), verify block / decode-one (one graph per token count) and the
whole Euler loop of the action expert. An EAGLE-3 proposer runs eagerly.

Each step is a capture-safe function of device tensors (no host reads, shapes fixed by its
inputs) wrapped in a `GraphedStep`; with `enabled=False`, or on the CPU, the same functions
run eagerly. Host bookkeeping stays outside the graphs: token-id and slot checks, the cache's
`length`, token choice, image preprocessing. Outputs are cloned out of the static buffers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from flashdrive_ros.backends.cuda_graphs import GraphedStep
from flashdrive_ros.engine.decoding import Target, TargetStep
from flashdrive_ros.engine.eagle_proposer import EagleProposer
from flashdrive_ros.engine.flow_cached import FlowSchedule, euler_cached
from flashdrive_ros.engine.speculative import DFlashProposer, Proposal, ProposalRequest
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.backbone import run_decoder_layer
from flashdrive_ros.model.cache_attention import (
    ACTION_ATTENTION,
    VERIFY_ATTENTION,
    CacheAttention,
    FlexCacheAttention,
    FlexPrefixAttention,
    GemmCacheAttention,
    GemmPrefixAttention,
    PrefixAttention,
)
from flashdrive_ros.model.expert import run_layer
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.preprocess import preprocess_images
from flashdrive_ros.model.vision import VisionEncoder


class GraphedTarget(Target):
    """A `Target` whose `run_tokens` (decode-one, verify block, finish) runs the backbone's
    capture-safe path over the whole cache; `run_embeds` (prefill) stays eager.
    `verify_attention` "flex": the length-aware attention (one per token count) instead of
    the dense mask, compiled on CUDA; "gemm": the dense mask through two batched GEMMs and a
    softmax instead of the fused kernel (one per token count); compiled_layers: each decoder
    layer, its cache write and attention included, runs as one torch.compile graph (Inductor
    fuses its norms, RoPE, SwiGLU and residual adds), the same compiled code for all layers of
    one token count."""

    def __init__(self, target: Target, cache: KVCache, enabled: bool = True,
                 verify_attention: str = "masked", compiled_layers: bool = False) -> None:
        if verify_attention not in VERIFY_ATTENTION:
            raise ValueError(f"verify_attention must be one of {VERIFY_ATTENTION}, got "
                             f"{verify_attention!r}")
        super().__init__(target.backbone, target.lm_head, target.feature_layers)
        self.cache = cache
        self.step = GraphedStep(self._forward, enabled)
        self.verify_attention = verify_attention
        self.attention: dict[int, CacheAttention] = {}
        self.layer_call = (torch.compile(run_decoder_layer, fullgraph=True, dynamic=False)
                           if compiled_layers else run_decoder_layer)

    def _attention(self, count: int) -> CacheAttention | None:
        if self.verify_attention == "masked":
            return None
        if count not in self.attention:
            device = self.cache.k.device
            self.attention[count] = (
                FlexCacheAttention(self.cache.capacity, count, device,
                                   compiled=device.type == "cuda")
                if self.verify_attention == "flex"
                else GemmCacheAttention(self.cache.capacity, count, device))
        return self.attention[count]

    def _forward(self, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """inputs: [3, T] long rows (token ids, cache slots, text positions) -> logits [T, V],
        features [T, L * H] or None."""
        ids, slots, positions = inputs[0], inputs[1], inputs[2]
        embeds = self.embed_tokens(ids[None])  # embeds: [1, T, H]
        positions = positions.view(1, 1, -1).expand(3, 1, -1).contiguous()  # [3, 1, T]
        out = self.backbone.forward_static(embeds, positions, self.cache, slots,
                                           self.feature_layers,
                                           self._attention(ids.shape[0]), self.layer_call)
        features = None
        if self.feature_layers:
            features = torch.cat([out.layer_hidden[i][0] for i in self.feature_layers], dim=-1)
        return self.lm_head(out.hidden[0]), features

    def run_tokens(self, token_ids: list[int], cache: KVCache, start_position: int
                   ) -> TargetStep:
        if cache is not self.cache:
            raise ValueError("a GraphedTarget runs on the cache it was built for")
        if not token_ids or min(token_ids) < 0 or max(token_ids) >= self.vocab_size:
            raise ValueError(f"token ids {token_ids} outside the vocabulary [0, "
                             f"{self.vocab_size})")
        ids = torch.tensor(token_ids, dtype=torch.long, device=cache.k.device)
        return self.run_token_tensor(ids, cache, start_position)

    def run_token_tensor(self, token_ids: torch.Tensor, cache: KVCache, start_position: int
                         ) -> TargetStep:
        """token_ids: [T] long on the device, not read back (no host sync)."""
        if cache is not self.cache:
            raise ValueError("a GraphedTarget runs on the cache it was built for")
        start, count = cache.length, token_ids.shape[0]
        if start + count > cache.capacity:
            raise ValueError(f"cache capacity {cache.capacity} cannot hold {count} more "
                             f"tokens after {start}")
        device = cache.k.device
        inputs = torch.stack([token_ids.to(device),
                              torch.arange(start, start + count, device=device),
                              torch.arange(start_position, start_position + count,
                                           device=device)])  # inputs: [3, T]
        logits, features = self.step(inputs)
        cache.advance_to(start + count)
        return TargetStep(logits.clone(), None if features is None else features.clone())


class GraphedProposer(DFlashProposer):
    """A `DFlashProposer` whose greedy block proposal is one graphed drafter forward plus
    argmax; sampled proposals stay eager."""

    def __init__(self, proposer: DFlashProposer, enabled: bool = True) -> None:
        super().__init__(proposer.drafter, proposer.embed_tokens, proposer.lm_head)
        self.step = GraphedStep(self._draft, enabled)

    def _draft(self, features: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor
               ) -> torch.Tensor:
        """features: [1, C, L * H]; ids: [1, K]; positions: [1, C + K] or [3, 1, C + K]
        -> greedy drafts [K - 1]."""
        embeds = self.drafter.block_embeddings(ids, self.embed_tokens)  # embeds: [1, K, H]
        hidden = self.drafter(features, embeds, positions)
        return torch.argmax(self.lm_head(hidden[:, 1:]), dim=-1)[0]

    @torch.no_grad()
    def propose(self, request: ProposalRequest) -> Proposal:
        if request.sampling is not None or request.features is None:
            return super().propose(request)
        ids, positions = self.block_inputs(request)
        return Proposal(self.step(request.features[None], ids, positions).clone(), None)


class GraphedEncoder:
    """Encodes a batch of same-sized images; the grid is fixed by the image size and baked
    into each capture as host ints (one graph per image count: the new frames of each view
    when streaming, every frame on a full prefill)."""

    def __init__(self, visual: VisionEncoder, size: tuple[int, int], dtype: torch.dtype,
                 device: torch.device, enabled: bool = True) -> None:
        cfg = visual.cfg
        self.visual = visual
        self.size = size
        self.dtype = dtype
        self.device = device
        self.grid = (1, size[0] // cfg.patch_size, size[1] // cfg.patch_size)
        self.step = GraphedStep(self._encode, enabled)

    def _encode(self, patches: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """patches: [N_img * h * w, C*Tp*P*P] -> (embeds [N_tokens, H], deepstack list)."""
        count = patches.shape[0] // (self.grid[1] * self.grid[2])
        return self.visual(patches, torch.tensor([self.grid] * count))

    def __call__(self, images: np.ndarray, frames: Sequence[tuple[int, int]]
                 ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """images: uint8 [V, F, H, W, 3]; encodes the (view, frame) images in `frames` order."""
        batch = np.stack([images[v, f] for v, f in frames])
        patches, grid_thw = preprocess_images(batch, self.visual.cfg, self.size)
        if grid_thw.tolist() != [list(self.grid)] * len(frames):
            raise ValueError(f"preprocessed grid {grid_thw.tolist()} differs from the "
                             f"captured grid {self.grid}")
        embeds, deepstack = self.step(patches.to(device=self.device, dtype=self.dtype))
        return embeds.clone(), [level.clone() for level in deepstack]


class GraphedFlow:
    """The whole flow-matching sampler (prefix-key rotation, then every Euler step of
    `schedule`) as one graph over the whole cache, the prefix length a device tensor; staged:
    the prefix copied once into the expert's StagedKV buffers instead of concatenated at
    every layer of every step; `action_attention` "flex" (staged only): the action tokens
    attend through FlexPrefixAttention (the prefix's key blocks below its length, compiled on
    CUDA) instead of a dense mask over the capacity, "gemm" (staged only) through
    GemmPrefixAttention (the dense mask, two batched GEMMs and a softmax instead of the fused
    kernel); compiled_layers (masked or gemm attention): each
    expert layer runs as one torch.compile graph (Inductor fuses its norms, RoPE, SwiGLU and
    residual adds), the same compiled code for all layers of one shape."""

    def __init__(self, model: AlpamayoModel, cache: KVCache, schedule: FlowSchedule,
                 enabled: bool = True, staged: bool = False,
                 action_attention: str = "masked", compiled_layers: bool = False) -> None:
        if action_attention not in ACTION_ATTENTION:
            raise ValueError(f"action_attention must be one of {ACTION_ATTENTION}, got "
                             f"{action_attention!r}")
        if action_attention != "masked" and not staged:
            raise ValueError(f"action_attention {action_attention!r} attends over the staged "
                             f"prefix; set staged")
        if compiled_layers and action_attention == "flex":
            raise ValueError("compiled_layers compiles the masked or gemm attention path; set "
                             "action_attention 'masked' or 'gemm'")
        self.model = model
        self.cache = cache
        self.schedule = schedule
        self.staged = staged
        self.action_attention = action_attention
        self.attention: dict[int, PrefixAttention] = {}
        self.layer_call = (torch.compile(run_layer, fullgraph=True, dynamic=False)
                           if compiled_layers else run_layer)
        self.step = GraphedStep(self._sample, enabled)

    def _prefix_attention(self, num_tokens: int) -> PrefixAttention:
        if num_tokens not in self.attention:
            device, capacity = self.cache.k.device, self.cache.capacity
            self.attention[num_tokens] = (
                FlexPrefixAttention(capacity, num_tokens, device, compiled=device.type == "cuda")
                if self.action_attention == "flex"
                else GemmPrefixAttention(capacity, num_tokens, device))
        return self.attention[num_tokens]

    def _sample(self, x0: torch.Tensor, prefix_len: torch.Tensor) -> torch.Tensor:
        """x0: [K, N_wp, 2] noise; prefix_len: [1] long -> actions [K, N_wp, 2]."""
        model, cache = self.model, self.cache
        expert = model.expert
        capacity = cache.capacity
        device = cache.positions.device
        prefix = expert.rotated_prefix(cache, capacity, model.action_out_proj.weight.dtype)
        if self.action_attention != "masked":
            attention = self._prefix_attention(x0.shape[1])
            attention.update(prefix_len)
            prefix = expert.stage(prefix, x0.shape[0], x0.shape[1], attention.prefix_slots)
            prefix_mask = attention
        else:
            if self.staged:
                prefix = expert.stage(prefix, x0.shape[0], x0.shape[1])
            prefix_mask = torch.arange(capacity, device=device) < prefix_len  # [C]
        start = cache.positions[:, 0].index_select(1, prefix_len - 1).max() + 1
        steps = torch.arange(x0.shape[1], device=device) + start
        positions = steps.view(1, 1, -1).expand(3, 1, -1)  # positions: [3, 1, N_wp]

        def velocity_fn(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            hidden = expert.forward_prefix(model.action_in_proj(x, t), positions, prefix,
                                           prefix_mask, self.layer_call)
            return model.action_out_proj(hidden).to(x.dtype)

        return euler_cached(velocity_fn, x0, self.schedule)

    def __call__(self, x0: torch.Tensor, prefix_len: int) -> torch.Tensor:
        if not 0 < prefix_len <= self.cache.length:
            raise ValueError(f"prefix_len {prefix_len} outside (0, cache length "
                             f"{self.cache.length}]")
        length = torch.tensor([prefix_len], dtype=torch.long, device=self.cache.k.device)
        return self.step(x0, length).clone()


class GraphedSteps:
    """Every graphed step of one engine, built over its model, target, proposer and cache."""

    def __init__(self, model: AlpamayoModel, target: Target,
                 proposer: DFlashProposer | EagleProposer | None, cache: KVCache,
                 image_size: tuple[int, int], schedule: FlowSchedule,
                 enabled: bool = True, verify_attention: str = "masked",
                 staged_prefix: bool = False, action_attention: str = "masked",
                 compiled_expert: bool = False, compiled_backbone: bool = False) -> None:
        weight = model.action_out_proj.weight
        self.encoder = GraphedEncoder(model.vlm.visual, image_size, weight.dtype,
                                      weight.device, enabled)
        self.target = GraphedTarget(target, cache, enabled, verify_attention,
                                    compiled_backbone)
        self.proposer = (GraphedProposer(proposer, enabled)
                         if isinstance(proposer, DFlashProposer) else proposer)
        self.flow = GraphedFlow(model, cache, schedule, enabled, staged_prefix,
                                action_attention, compiled_expert)

    @property
    def captured_graphs(self) -> int:
        steps = [self.encoder.step, self.target.step, self.flow.step]
        if isinstance(self.proposer, GraphedProposer):
            steps.append(self.proposer.step)
        return sum(step.captured_shapes for step in steps)
