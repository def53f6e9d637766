"""The inference engine: one `Window` in, one `Plan` out.

Stages, each timed: encode (vision on the frames the prefill needs), prefill (streaming or
full, into the pre-RoPE KV cache), decode (CoC by speculative or autoregressive decoding until
<|cot_end|>, then <|traj_future_start|> is written), action (flow matching over the committed
KV, cached-velocity or plain Euler, unicycle integration from v0 fitted to the history).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from flashdrive_ros.backends.base import Backend, make_backend
from flashdrive_ros.backends.specs import EngineShapes
from flashdrive_ros.engine.coc_reuse import CoCReuseProposer
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.decoding import (
    DecodeResult,
    PrefillOutput,
    Sampling,
    StopRule,
    Target,
    autoregressive_decode,
    forced_decode,
    required_capacity,
)
from flashdrive_ros.engine.dtype_choice import check_cpu_bfloat16
from flashdrive_ros.engine.encoded_frames import Encoded, EncodedFrames
from flashdrive_ros.engine.flow_cached import euler_cached
from flashdrive_ros.engine.graphed_steps import GraphedSteps
from flashdrive_ros.engine.padded_logits import PaddedRowLogits
from flashdrive_ros.engine.proposers import make_proposer
from flashdrive_ros.engine.slot_features import SlotFeatures
from flashdrive_ros.engine.speculative import Proposer, speculative_decode
from flashdrive_ros.engine.streaming import (
    PrefillPlan,
    StreamingKVCache,
    encode_frames,
    prompt_geometry,
    run_prefill,
)
from flashdrive_ros.engine.timing import StageTimer
from flashdrive_ros.engine.types import Plan, Window
from flashdrive_ros.engine.window_shape import check_window_shape
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.model.drafter_file import AnyDrafter, load_drafter
from flashdrive_ros.model.flow import VelocityFn, initial_noise
from flashdrive_ros.model.fp8_linear import fp8_gemm_supported, use_backbone_weights
from flashdrive_ros.model.history import HistoryTokenizer
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.prompt import PromptBuilder
from flashdrive_ros.model.release_tokenizer import load_tokenizer
from flashdrive_ros.model.tokenizer import TextTokenizer
from flashdrive_ros.model.unicycle import fit_v0

def window_seed(seed: int, t0: float) -> int:
    """The random seed of the window at `t0` (seconds) under config seed `seed`."""
    return (seed * 1_000_003 + round(t0 * 1000)) % 2 ** 63


@dataclass
class Reasoning:
    """A window after encode, prefill and decode, waiting for its action: the seeded
    generator carries on into the flow noise; `velocity` is the detached expert (None: the
    action reads the live cache)."""

    window: Window
    generator: torch.Generator
    decoded: DecodeResult
    full_prefill: bool
    prefill_reason: str
    timer: StageTimer
    velocity: VelocityFn | None


class Engine:
    def __init__(self, model: AlpamayoModel, tokenizer: TextTokenizer,
                 drafter: AnyDrafter | None,
                 cfg: EngineConfig, backend: Backend | None = None) -> None:
        """backend: runs the encoder and backbone steps; None = `cfg.backend`."""
        mcfg = model.cfg
        if tokenizer.vocab_size != mcfg.text.vocab_size:
            raise ConfigError(f"tokenizer has {tokenizer.vocab_size} tokens, the model's "
                              f"vocabulary is {mcfg.text.vocab_size}")
        if cfg.speculative and drafter is None:
            raise ConfigError("speculative decoding needs a drafter; pass one or set "
                              "speculative false")
        self.model = model
        self.tokenizer = tokenizer
        self.drafter = drafter if cfg.speculative else None
        self.cfg = cfg
        self.device = model.action_out_proj.weight.device
        self.dtype = model.action_out_proj.weight.dtype
        wanted = torch.device(cfg.device)
        for name, module in (("model", model), ("drafter", self.drafter)):
            if module is None:
                continue
            weight = next(module.parameters())
            if weight.device.type != wanted.type or weight.dtype != cfg.torch_dtype or (
                    wanted.index is not None and weight.device.index != wanted.index):
                raise ConfigError(f"{name} is on {weight.device} as {weight.dtype}, the engine "
                                  f"config asks for {cfg.device} {cfg.dtype}")
        if self.device.type == "cpu" and self.dtype == torch.bfloat16:
            check_cpu_bfloat16()
        if cfg.backbone_weights == "fp8" and self.device.type == "cuda" \
                and not fp8_gemm_supported(self.device):
            raise ConfigError(f"backbone_weights 'fp8' needs e4m3 GEMMs (compute capability "
                              f">= 8.9); {self.device} has "
                              f"{torch.cuda.get_device_capability(self.device)}")
        use_backbone_weights(model.vlm.language_model, cfg.backbone_weights)
        self.prompt_builder = PromptBuilder(mcfg, tokenizer)
        self.history_tokenizer = HistoryTokenizer(mcfg.action, tokenizer.traj_token_start)
        self.image_token_id = tokenizer.token_id("<|image_pad|>")
        self.image_size = (mcfg.prompt.image_height, mcfg.prompt.image_width)
        max_coc = cfg.max_coc_tokens or mcfg.prompt.max_coc_tokens
        self.stop = StopRule(tokenizer.token_id("cot_end"),
                             tokenizer.token_id("traj_future_start"), max_coc)
        self.sampling = Sampling(cfg.temperature, cfg.top_p) if cfg.temperature > 0 else None
        vlm = model.vlm
        lm_head = PaddedRowLogits(vlm.lm_head) if cfg.padded_logits else vlm.lm_head
        feature_layers = self.drafter.cfg.target_layer_ids if self.drafter else ()
        self.proposer = (make_proposer(self.drafter, vlm.language_model.embed_tokens,
                                       lm_head) if self.drafter else None)
        self.frame_layout, positions = prompt_geometry(self.prompt_builder, self.image_token_id,
                                                       mcfg.vision, self.image_size)
        self.prompt_positions = positions.to(self.device)  # [3, 1, N]
        block = self.drafter.cfg.block_size if self.drafter else 1
        capacity = required_capacity(self.frame_layout.prompt_length, self.stop, block)
        text = mcfg.text
        cache = KVCache(text.num_hidden_layers, 1, text.num_key_value_heads, capacity,
                        text.head_dim, self.dtype, self.device, rotated_keys=cfg.rotated_keys)
        features = None
        if self.drafter is not None:
            features = SlotFeatures(capacity, len(feature_layers) * text.hidden_size, self.dtype,
                                    self.device)
        self.stream = StreamingKVCache(cache, streaming=cfg.streaming, features=features)
        self.backend = backend or make_backend(cfg.backend, model, self.shapes)
        self.target = Target(self.backend.backbone, lm_head, feature_layers)
        self.graphs = self.graphed_steps() if cfg.cuda_graphs else None
        self.encoded_frames: EncodedFrames | None = None
        self._encoder_lock = threading.Lock()
        self.previous_coc: list[int] = []

    @classmethod
    def load(cls, model_dir: str | Path, cfg: EngineConfig) -> Engine:
        """Model (config.json + safetensors, this package's or a release's), its tokenizer and,
        when speculative decoding is on, the drafter file `cfg.drafter_file` from `model_dir` (a
        DFlash or EAGLE-3 drafter as the file's stored config says; files without one take
        config.json's drafter)."""
        model_dir = Path(model_dir)
        model = AlpamayoModel.from_dir(model_dir, cfg.device, cfg.torch_dtype)
        tokenizer = load_tokenizer(model_dir)
        drafter = None
        if cfg.speculative:
            drafter_path = model_dir / cfg.drafter_file
            if not drafter_path.is_file():
                raise ConfigError(f"speculative decoding needs the drafter file "
                                  f"{drafter_path}; set speculative false")
            drafter = load_drafter(drafter_path, model.cfg.text, model.cfg.drafter)
            drafter = drafter.to(device=cfg.device, dtype=cfg.torch_dtype).eval()
        return cls(model, tokenizer, drafter, cfg)

    def graphed_steps(self, enabled: bool = True) -> GraphedSteps:
        """The fixed-shape steps over this engine's model and cache, as CUDA graphs
        (`enabled=False`: the same capture-safe steps run eagerly)."""
        return GraphedSteps(self.model, self.target, self.proposer, self.stream.cache,
                            self.image_size, self.cfg.flow_schedule, enabled,
                            self.cfg.verify_attention, self.cfg.staged_prefix,
                            self.cfg.action_attention, self.cfg.compiled_expert,
                            self.cfg.compiled_backbone)

    def shapes(self) -> EngineShapes:
        """The step shapes this engine runs (exported graphs and TensorRT profiles)."""
        layout, v = self.frame_layout, self.model.cfg.vision
        drafter = self.drafter.cfg if self.drafter else None
        return EngineShapes(
            capacity=self.stream.cache.capacity, prompt_length=layout.prompt_length,
            streaming_length=len(layout.newest_frames_and_tail()),
            block_size=drafter.block_size if drafter else 1,
            context_len=drafter.context_len if drafter else 0,
            grid_hw=(self.image_size[0] // v.patch_size, self.image_size[1] // v.patch_size),
            num_samples=self.cfg.num_samples,
            feature_layers=tuple(drafter.target_layer_ids) if drafter else ())

    @property
    def mode(self) -> str:
        return self.cfg.mode

    def reset(self) -> None:
        """Drop the streaming state and the previous CoC: the next window runs a full prefill
        and drafts with the drafter alone."""
        self.stream.reset()
        self.previous_coc = []

    def keep_encoded_frames(self, keep_s: float | None = 2.0) -> None:
        """Keep every encoded frame of the last `keep_s` seconds by camera and stamp, so that
        frames encoded ahead (`encode_camera_set`) or by an earlier window are not encoded
        again; None: every window encodes its frames itself."""
        self.encoded_frames = None if keep_s is None else EncodedFrames(keep_s)

    @torch.no_grad()
    def encode_camera_set(self, stamps: Sequence[float], images: Sequence[np.ndarray]) -> None:
        """Encodes one image per camera (uint8 [H, W, 3], camera slot order) taken at `stamps`
        into the kept encoded frames, ahead of the windows that will need them."""
        if self.encoded_frames is None:
            raise RuntimeError("encode_camera_set needs keep_encoded_frames() first")
        batch = np.stack(images)[:, None]  # batch: [V, 1, H, W, 3]
        self._encode_kept(batch, np.asarray(stamps, dtype=np.float64)[:, None],
                          [(v, 0) for v in range(len(images))])

    def warmup(self, windows: int = 2) -> None:
        """Runs `windows` synthetic consecutive windows (first full, then streaming) so lazy
        initialisation happens before real data, then resets the streaming state."""
        p, a = self.model.cfg.prompt, self.model.cfg.action
        shape = (len(p.camera_names), p.num_frames, p.image_height, p.image_width, 3)
        images = np.full(shape, 128, dtype=np.uint8)
        history = np.zeros((a.num_history, 4))
        for n in range(windows):
            stamps = p.frame_dt * (n + np.arange(p.num_frames, dtype=np.float64))
            self.step(Window(t0=float(stamps[-1]), images=images,
                             image_stamps=np.tile(stamps, (shape[0], 1)),
                             ego_history=history, sequence=n))
        self.reset()

    def step(self, window: Window, coc_ids: Sequence[int] | None = None) -> Plan:
        """The plan of `window`; its random draws are seeded by the config seed and the
        window's t0 (in ms), so a window gets the same plan whichever windows came before it
        (streaming state aside), offline or through the node. `coc_ids`: plan under this CoC
        (token ids without <|cot_end|>) instead of decoding one."""
        return self.act(self.reason(window, coc_ids=coc_ids))

    @torch.no_grad()
    def reason(self, window: Window, detach: bool = False,
               coc_ids: Sequence[int] | None = None) -> Reasoning:
        """Encode, prefill and decode `window` (with `coc_ids`, write that CoC instead of
        decoding: `forced_decode`). With `detach` (no CUDA graphs) the action's prefix is
        copied out of the cache, so `act` may run while the next window is reasoned;
        otherwise `act` must come before the next `reason`."""
        check_window_shape(window, self.model.cfg)
        if detach and self.graphs is not None:
            raise ConfigError("a detached action reads copies of the cache; CUDA graphs read "
                              "the cache itself: set cuda_graphs false to act apart")
        timer = StageTimer(self.device)
        generator = torch.Generator(device=self.device).manual_seed(
            window_seed(self.cfg.seed, window.t0))
        prompt = self.prompt_builder.build(
            self.history_tokenizer.encode(window.ego_history[:, :3]).tolist())
        plan = self.stream.plan(self.frame_layout, prompt.token_ids, window.image_stamps,
                                window.time_base_reset)
        with timer.stage("encode"):
            image_embeds, deepstack = self.encode(window, plan)
        with timer.stage("prefill"):
            prefill_out = self.prefill(prompt.token_ids, plan, image_embeds, deepstack)
        with timer.stage("decode"):
            decoded = self.decode(prefill_out, generator, coc_ids)
        velocity = None
        if detach:
            cache = self.stream.cache
            velocity = self.model.detached_velocity_fn(cache, cache.length,
                                                       self.cfg.staged_prefix,
                                                       self.cfg.num_samples)
        return Reasoning(window, generator, decoded, plan.full, plan.reason, timer, velocity)

    @torch.no_grad()
    def act(self, reasoning: Reasoning) -> Plan:
        """The plan of a reasoned window: flow matching and the CoC text."""
        window, decoded, timer = reasoning.window, reasoning.decoded, reasoning.timer
        with timer.stage("action"):
            trajectories = self.action(window, reasoning.generator, reasoning.velocity)
        coc_ids = decoded.tokens[:decoded.tokens.index(self.stop.cot_end_id)]
        return Plan(t0=window.t0, trajectories=trajectories, dt=self.model.cfg.action.dt,
                    coc_text=self.tokenizer.decode(coc_ids, skip_special_tokens=True),
                    coc_token_ids=coc_ids, timings_ms=timer.result(),
                    accepted_lengths=list(decoded.accepted_lengths),
                    tokens_generated=len(coc_ids) + (decoded.stopped_by == "cot_end"),
                    mode=self.cfg.mode,
                    full_prefill=reasoning.full_prefill, sequence=window.sequence,
                    prefill_reason=reasoning.prefill_reason)

    def encode(self, window: Window, plan: PrefillPlan
               ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(image embeds [len(frames) * T, H], deepstack levels of the same) of
        plan.frames_to_encode, in that order."""
        if self.encoded_frames is None:
            return self._encode_images(window.images, plan.frames_to_encode)
        encoded = self._encode_kept(window.images, window.image_stamps, plan.frames_to_encode)
        embeds = torch.cat([e for e, _ in encoded])
        return embeds, [torch.cat(level) for level in zip(*(d for _, d in encoded))]

    def _encode_kept(self, images: np.ndarray, stamps: np.ndarray,
                     frames: Sequence[tuple[int, int]]) -> list[Encoded]:
        """Per frame of `frames` (images: uint8 [V, F, H, W, 3], stamps: [V, F]) its encoding,
        from the kept encoded frames or encoded now and kept. One encode runs at a time, so a
        window waits for the frames being encoded ahead instead of encoding them again."""
        with self._encoder_lock:
            kept = self.encoded_frames
            found = [kept.get(v, float(stamps[v, f])) for v, f in frames]
            missing = [frame for frame, hit in zip(frames, found) if hit is None]
            if not missing:
                return found
            fresh = self._split_images(*self._encode_images(images, missing))
            for (v, f), encoded in zip(missing, fresh):
                kept.put(v, float(stamps[v, f]), encoded)
        fresh_iter = iter(fresh)
        return [hit if hit is not None else next(fresh_iter) for hit in found]

    def _encode_images(self, images: np.ndarray, frames: Sequence[tuple[int, int]]
                       ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        if self.graphs is not None:
            return self.graphs.encoder(images, frames)
        return encode_frames(self.model.vlm, images, frames, self.image_size, self.dtype,
                             self.backend.encoder)

    def _split_images(self, embeds: torch.Tensor, deepstack: list[torch.Tensor]
                      ) -> list[Encoded]:
        """[N * T, H] embeds and deepstack levels -> N per-image (embeds, deepstack)."""
        size = self.frame_layout.tokens_per_image
        parts = [level.split(size) for level in deepstack]
        return [(chunk, [p[i] for p in parts]) for i, chunk in enumerate(embeds.split(size))]

    def prefill(self, token_ids: list[int], plan: PrefillPlan, image_embeds: torch.Tensor,
                deepstack: list[torch.Tensor]) -> PrefillOutput:
        input_ids = torch.tensor([token_ids], dtype=torch.long, device=self.device)
        context = self.proposer.context_len if self.proposer else 0
        return run_prefill(self.target, self.model.vlm, self.stream, plan, input_ids,
                           self.prompt_positions, image_embeds, deepstack, self.image_token_id,
                           context)

    def decode(self, prefill_out: PrefillOutput, generator: torch.Generator,
               coc_ids: Sequence[int] | None = None) -> DecodeResult:
        """The CoC after the prefill: decoded, or `coc_ids` written in its place."""
        cache = self.stream.cache
        target = self.graphs.target if self.graphs else self.target
        if coc_ids is not None:
            return forced_decode(target, prefill_out, cache, self.stop, coc_ids)
        proposer = self.window_proposer()
        if proposer is not None:
            decoded = speculative_decode(target, proposer, prefill_out, cache, self.stop,
                                         self.sampling, generator)
            self.previous_coc = list(decoded.tokens)
            return decoded
        return autoregressive_decode(target, prefill_out, cache, self.stop, self.sampling,
                                     generator)

    def window_proposer(self) -> Proposer | None:
        """The proposer of this window's decode (None: autoregressive): the drafter, graphed
        under CUDA graphs, behind the previous window's CoC drafts with `coc_reuse`."""
        proposer = self.graphs.proposer if self.graphs else self.proposer
        if proposer is not None and self.cfg.coc_reuse and self.previous_coc:
            proposer = CoCReuseProposer(proposer, self.previous_coc, self.device)
        return proposer

    def action(self, window: Window, generator: torch.Generator,
               velocity_fn: VelocityFn | None = None) -> np.ndarray:
        """[K, N_wp, 3] (x, y, yaw) float64 in the t0 ego frame, from `velocity_fn` (default:
        the live cache). The samples are drawn and integrated in float32 whatever the model
        dtype: the action's Fourier features reach fourier_max_freq cycles per unit, beyond
        bfloat16's resolution."""
        a = self.model.cfg.action
        cache = self.stream.cache
        x0 = initial_noise(self.cfg.num_samples, (a.num_waypoints, a.action_dim), generator,
                           torch.float32)
        if velocity_fn is not None:
            actions = euler_cached(velocity_fn, x0, self.cfg.flow_schedule)
        elif self.graphs is not None:
            actions = self.graphs.flow(x0, cache.length)
        else:
            actions = euler_cached(self.model.velocity_fn(cache, cache.length,
                                                          self.cfg.staged_prefix), x0,
                                   self.cfg.flow_schedule)
        history = torch.as_tensor(window.ego_history, dtype=torch.float64)
        v0 = fit_v0(history[:, :3], history[:, 3], a.history_dt)
        return self.model.trajectories(actions, v0.to(actions.device),
                                       self.cfg.forward_only).cpu().numpy()
