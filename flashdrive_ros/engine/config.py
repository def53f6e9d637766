"""Engine configuration: which FlashDrive shortcuts run, sampling, device."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from flashdrive_ros.engine.flow_cached import FlowSchedule
from flashdrive_ros.model.cache_attention import VERIFY_ATTENTION
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.model.fp8_linear import BACKBONE_WEIGHTS
from flashdrive_ros.model.drafter_name import DRAFTER_FILE, drafter_name_problem

MODES = ("flashdrive", "baseline")
BACKENDS = ("torch", "tensorrt")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHORTCUTS = ("streaming", "speculative", "cached_velocity", "cuda_graphs")


@dataclass
class EngineConfig:
    """`mode="baseline"` turns every shortcut off (full window encode and prefill,
    autoregressive decoding, plain Euler with `baseline_flow_steps`); in flashdrive mode each
    shortcut defaults to on (CUDA graphs only on CUDA) and can be switched off alone.
    A shortcut left as None takes its mode's default. `rotated_keys` (the cache also keeps
    keys after RoPE, rotated once per write or move instead of at every attention call) is
    on by default in flashdrive mode with the torch backend. `temperature` 0 decodes greedily;
    above 0 it samples (with `top_p`), and speculative decoding then accepts drafts by the
    speculative-sampling rule, which keeps the target's sampling distribution.
    `drafter_file` names the drafter weights in the model directory that speculative decoding
    loads (DFlash or EAGLE-3, as the file's stored config says). `padded_logits` computes the
    lm_head of the verify and draft rows as weight @ rows^T with the rows padded to a multiple
    of 8 (default on CUDA in flashdrive mode, where the plain product runs several times under
    memory bandwidth). `coc_reuse` drafts from the previous window's CoC where the tokens
    committed so far match it, from the drafter elsewhere (default on with speculative
    decoding; lossless like any draft). `verify_attention` "flex" runs the attention of the
    fixed-shape decode and verify steps (CUDA graphs) by the cache length with a FlexAttention
    block mask instead of a dense mask over the capacity. `backbone_weights` "fp8" runs the
    backbone's decoder linear layers with e4m3 weights (per-channel scales, per-tensor
    activation scales; `torch._scaled_mm` on CUDA devices of compute capability >= 8.9,
    emulated elsewhere); the engine puts the shared model's layers in the form it asks for."""

    mode: str = "flashdrive"
    streaming: bool | None = None
    speculative: bool | None = None
    cached_velocity: bool | None = None
    cuda_graphs: bool | None = None
    num_samples: int = 1
    flow_steps: int = 8
    reuse_steps: tuple[int, ...] = (3, 4, 5, 6)
    baseline_flow_steps: int = 10
    max_coc_tokens: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    device: str = "cpu"
    dtype: str = "float32"
    seed: int = 0
    backend: str = "torch"
    rotated_keys: bool | None = None
    padded_logits: bool | None = None
    drafter_file: str = DRAFTER_FILE
    coc_reuse: bool | None = None
    verify_attention: str = "masked"
    backbone_weights: str = "native"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"engine mode must be one of {MODES}, got {self.mode!r}")
        for name in SHORTCUTS:
            value = getattr(self, name)
            if value is None:
                default = self.mode == "flashdrive"
                if name == "cuda_graphs":
                    default = (default and self.device.startswith("cuda")
                               and self.backend == "torch")
                setattr(self, name, default)
            elif not isinstance(value, bool):
                raise ConfigError(f"{name} must be true, false or null, got {value!r}")
            elif value and self.mode == "baseline":
                raise ConfigError(f"mode 'baseline' runs every shortcut off; {name}=True "
                                  f"needs mode 'flashdrive'")
        if self.rotated_keys is None:
            self.rotated_keys = self.mode == "flashdrive" and self.backend == "torch"
        elif not isinstance(self.rotated_keys, bool):
            raise ConfigError(f"rotated_keys must be true, false or null, got "
                              f"{self.rotated_keys!r}")
        if self.padded_logits is None:
            self.padded_logits = self.mode == "flashdrive" and self.device.startswith("cuda")
        elif not isinstance(self.padded_logits, bool):
            raise ConfigError(f"padded_logits must be true, false or null, got "
                              f"{self.padded_logits!r}")
        if self.coc_reuse is None:
            self.coc_reuse = self.speculative
        elif not isinstance(self.coc_reuse, bool):
            raise ConfigError(f"coc_reuse must be true, false or null, got {self.coc_reuse!r}")
        elif self.coc_reuse and not self.speculative:
            raise ConfigError("coc_reuse drafts inside speculative decoding; set speculative "
                              "true or coc_reuse false")
        if self.rotated_keys and self.backend != "torch":
            raise ConfigError("rotated_keys keeps post-RoPE keys in the torch backend's cache; "
                              "set rotated_keys false with backend 'tensorrt'")
        if self.cuda_graphs and not self.device.startswith("cuda"):
            raise ConfigError(f"cuda_graphs needs a CUDA device, got device={self.device!r}")
        self.reuse_steps = tuple(self.reuse_steps)
        if self.num_samples < 1:
            raise ConfigError(f"num_samples must be >= 1, got {self.num_samples}")
        if self.baseline_flow_steps < 1:
            raise ConfigError(f"baseline_flow_steps must be >= 1, got {self.baseline_flow_steps}")
        try:
            FlowSchedule(self.flow_steps, self.reuse_steps)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.max_coc_tokens is not None and self.max_coc_tokens < 1:
            raise ConfigError(f"max_coc_tokens must be >= 1 or null, got {self.max_coc_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device must be cpu or cuda[:N], got {self.device!r}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "tensorrt" and not self.device.startswith("cuda"):
            raise ConfigError(f"backend 'tensorrt' needs a CUDA device, got "
                              f"device={self.device!r}")
        if problem := drafter_name_problem(self.drafter_file):
            raise ConfigError(f"drafter_file {problem}")
        if self.verify_attention not in VERIFY_ATTENTION:
            raise ConfigError(f"verify_attention must be one of {VERIFY_ATTENTION}, got "
                              f"{self.verify_attention!r}")
        if self.verify_attention == "flex" and not self.cuda_graphs:
            raise ConfigError("verify_attention 'flex' runs in the fixed-shape steps of "
                              "cuda_graphs; set cuda_graphs true or verify_attention 'masked'")
        if self.backbone_weights not in BACKBONE_WEIGHTS:
            raise ConfigError(f"backbone_weights must be one of {BACKBONE_WEIGHTS}, got "
                              f"{self.backbone_weights!r}")
        if self.backbone_weights == "fp8" and self.backend != "torch":
            raise ConfigError("backbone_weights 'fp8' quantizes the torch backbone; set "
                              "backend 'torch' or backbone_weights 'native'")
        if self.backend == "tensorrt" and self.cuda_graphs:
            raise ConfigError("cuda_graphs captures the torch backend's steps; set "
                              "cuda_graphs false with backend 'tensorrt'")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def flow_schedule(self) -> FlowSchedule:
        """Cached-velocity schedule, or plain Euler with the reference step count."""
        if self.cached_velocity:
            return FlowSchedule(self.flow_steps, self.reuse_steps)
        return FlowSchedule.plain(self.baseline_flow_steps)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> EngineConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ConfigError(f"unknown engine config keys: {sorted(unknown)}")
        return cls(**values)

    @classmethod
    def baseline(cls, **changes) -> EngineConfig:
        return cls(mode="baseline", **changes)
