"""Engine configuration: which FlashDrive shortcuts run, sampling, device."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from flashdrive_ros.engine.flow_cached import FlowSchedule
from flashdrive_ros.model.cache_attention import ACTION_ATTENTION, VERIFY_ATTENTION
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.model.drafter_name import DRAFTER_FILE, drafter_name_problem
from flashdrive_ros.model.fp8_linear import BACKBONE_WEIGHTS
from flashdrive_ros.settings import default_of, field_problems, setting

MODES = ("flashdrive", "baseline")
BACKENDS = ("torch", "tensorrt")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHORTCUTS = ("streaming", "speculative", "cached_velocity", "cuda_graphs")
SWITCHES = (*SHORTCUTS, "rotated_keys", "padded_logits", "coc_reuse", "staged_prefix",
            "compiled_expert", "compiled_backbone")


def device_problem(device: str, auto: bool = False) -> str | None:
    """Why `device` is not cpu, cuda or cuda:N (or "auto" where `auto`), or None."""
    if device in ("cpu", "cuda") or (auto and device == "auto") or (
            device.startswith("cuda:") and device[5:].isdigit()):
        return None
    return f"device must be {'auto, ' if auto else ''}cpu, cuda or cuda:N, got {device!r}"


@dataclass
class EngineConfig:
    """The engine's settings. A shortcut left None takes its mode's default (baseline: all
    off; flashdrive: on, CUDA graphs only on CUDA with the torch backend)."""

    mode: str = setting("flashdrive", "flashdrive: the shortcuts; baseline: every shortcut "
                        "off (full encode and prefill, autoregressive decoding, plain Euler).",
                        choices=MODES)
    streaming: bool | None = setting(None, "Streaming KV cache (flashdrive mode only).")
    speculative: bool | None = setting(None, "Speculative CoC decoding with the drafter "
                                       "(flashdrive mode only).")
    cached_velocity: bool | None = setting(None, "Cached-velocity flow matching (flashdrive "
                                           "mode only).")
    cuda_graphs: bool | None = setting(None, "CUDA graphs for fixed-shape steps (CUDA, torch "
                                       "backend, flashdrive mode).")
    num_samples: int = setting(1, "Trajectory samples drawn per plan.", minimum=1)
    flow_steps: int = setting(8, "Euler steps of cached-velocity flow matching.")
    reuse_steps: tuple[int, ...] = setting((3, 4, 5, 6), "Euler steps that reuse the previous "
                                           "velocity.")
    baseline_flow_steps: int = setting(10, "Euler steps of plain flow matching.", minimum=1)
    max_coc_tokens: int | None = setting(None, "CoC token limit (None: the model's).",
                                         minimum=1)
    temperature: float = setting(0.0, "0 decodes greedily; above 0 samples (with top_p) and "
                                 "drafts are accepted by the speculative-sampling rule.",
                                 minimum=0.0)
    top_p: float = setting(1.0, "Nucleus of the CoC sampling, in (0, 1].", maximum=1.0)
    device: str = setting("cpu", "Torch device: cpu, cuda or cuda:N.")
    dtype: str = setting("float32", "Compute dtype of the model.", choices=tuple(DTYPES))
    seed: int = setting(0, "Seed of the flow-matching noise and of CoC sampling.")
    backend: str = setting("torch", "Inference backend of the encoder and backbone steps: "
                           "torch, or tensorrt (engines built and cached on first start, CUDA "
                           "only).", choices=BACKENDS)
    rotated_keys: bool | None = setting(None, "The KV cache also keeps keys after RoPE, rotated "
                                        "once per write instead of at every attention call "
                                        "(default: flashdrive mode with the torch backend).")
    padded_logits: bool | None = setting(None, "lm_head of the verify and draft rows with the "
                                         "rows padded to a multiple of 8 (default: flashdrive "
                                         "mode on CUDA).")
    drafter_file: str = setting(DRAFTER_FILE, "Drafter weights in the model directory for "
                                "speculative decoding (DFlash or EAGLE-3, as the file's stored "
                                "config says).")
    coc_reuse: bool | None = setting(None, "Speculative decoding drafts from the previous "
                                     "window's CoC where the tokens committed so far match it "
                                     "(lossless); without speculative decoding it is turned "
                                     "off and the adjustment reported.")
    staged_prefix: bool | None = setting(None, "Flow matching copies the backbone prefix's "
                                         "keys and values once per plan into the action "
                                         "expert's buffers, instead of concatenating them "
                                         "with the action tokens' at every layer of every "
                                         "velocity call; the same plans (default: flashdrive "
                                         "mode).")
    verify_attention: str = setting("masked", "Attention of the fixed-shape decode and verify "
                                    "steps (CUDA graphs): masked (a dense mask over the cache "
                                    "capacity, fused kernel), flex (FlexAttention by the cache "
                                    "length) or gemm (the dense mask through two batched "
                                    "GEMMs and a softmax).",
                                    choices=VERIFY_ATTENTION)
    action_attention: str = setting("masked", "Attention of the action tokens over the staged "
                                    "prefix in the graphed flow matching (CUDA graphs, "
                                    "staged_prefix): masked (a dense mask over the cache "
                                    "capacity, fused kernel), flex (FlexAttention by the "
                                    "prefix length) or gemm (the dense mask through two "
                                    "batched GEMMs and a softmax).",
                                    choices=ACTION_ATTENTION)
    compiled_expert: bool = setting(False, "The action expert's layers run as torch.compile "
                                    "graphs inside the graphed flow matching (cuda_graphs, "
                                    "action_attention masked or gemm): Inductor fuses each "
                                    "layer's "
                                    "norms, RoPE, SwiGLU and residual adds; compiled on the "
                                    "first plan of each sample count.")
    compiled_backbone: bool = setting(False, "The backbone's decoder layers run as "
                                      "torch.compile graphs inside the graphed decode, verify "
                                      "and finish steps (cuda_graphs, verify_attention "
                                      "masked): Inductor fuses each "
                                      "layer's norms, RoPE, cache write, SwiGLU and residual "
                                      "adds; compiled on the first step of each token count.")
    backbone_weights: str = setting("native", "Backbone decoder linear layers: native, or fp8 "
                                    "(e4m3 weights with per-channel scales; torch._scaled_mm "
                                    "on CUDA of compute capability >= 8.9, emulated "
                                    "elsewhere).", choices=BACKBONE_WEIGHTS)

    forward_only: bool = setting(True, "Plans never reverse: integrating the planned "
                                 "accelerations holds the speed at zero where they would take "
                                 "it below (a plan that brakes to a stop stands there), as a "
                                 "car's controller reads a stop; false integrates them as the "
                                 "reference does.")

    def __post_init__(self) -> None:
        self.adjustments: list[str] = []  # settings turned off because others exclude them
        if problems := field_problems(self):
            raise ConfigError("; ".join(problems))
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
        if self.staged_prefix is None:
            self.staged_prefix = self.mode == "flashdrive"
        elif not isinstance(self.staged_prefix, bool):
            raise ConfigError(f"staged_prefix must be true, false or null, got "
                              f"{self.staged_prefix!r}")
        if self.coc_reuse is None:
            self.coc_reuse = self.speculative
        elif not isinstance(self.coc_reuse, bool):
            raise ConfigError(f"coc_reuse must be true, false or null, got {self.coc_reuse!r}")
        elif self.coc_reuse and not self.speculative:
            self.coc_reuse = False
            self.adjustments.append("coc_reuse off: it drafts inside speculative decoding, "
                                    "which is off")
        if self.rotated_keys and self.backend != "torch":
            raise ConfigError("rotated_keys keeps post-RoPE keys in the torch backend's cache; "
                              "set rotated_keys false with backend 'tensorrt'")
        if self.cuda_graphs and not self.device.startswith("cuda"):
            raise ConfigError(f"cuda_graphs needs a CUDA device, got device={self.device!r}")
        self.reuse_steps = tuple(self.reuse_steps)
        try:
            FlowSchedule(self.flow_steps, self.reuse_steps)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if problem := device_problem(self.device):
            raise ConfigError(problem)
        if self.backend == "tensorrt" and not self.device.startswith("cuda"):
            raise ConfigError(f"backend 'tensorrt' needs a CUDA device, got "
                              f"device={self.device!r}")
        if problem := drafter_name_problem(self.drafter_file):
            raise ConfigError(f"drafter_file {problem}")
        if self.verify_attention != "masked" and not self.cuda_graphs:
            raise ConfigError(f"verify_attention {self.verify_attention!r} runs in the "
                              f"fixed-shape steps of cuda_graphs; set cuda_graphs true or "
                              f"verify_attention 'masked'")
        if self.action_attention != "masked" and not (self.cuda_graphs and self.staged_prefix):
            raise ConfigError(f"action_attention {self.action_attention!r} runs in the graphed "
                              f"flow matching over the staged prefix; set cuda_graphs and "
                              f"staged_prefix true or action_attention 'masked'")
        if not isinstance(self.forward_only, bool):
            raise ConfigError(f"forward_only must be true or false, got {self.forward_only!r}")
        if not isinstance(self.compiled_expert, bool):
            raise ConfigError(f"compiled_expert must be true or false, got "
                              f"{self.compiled_expert!r}")
        if self.compiled_expert and not (self.cuda_graphs and self.action_attention != "flex"):
            raise ConfigError("compiled_expert compiles the expert's layers in the graphed flow "
                              "matching with masked or gemm attention; set cuda_graphs true "
                              "and action_attention 'masked' or 'gemm', or compiled_expert "
                              "false")
        if not isinstance(self.compiled_backbone, bool):
            raise ConfigError(f"compiled_backbone must be true or false, got "
                              f"{self.compiled_backbone!r}")
        if self.compiled_backbone and not self.cuda_graphs:
            raise ConfigError("compiled_backbone compiles the backbone's layers in the graphed "
                              "decode and verify steps; set cuda_graphs true, or "
                              "compiled_backbone false")
        if self.compiled_backbone and self.verify_attention == "flex":
            raise ConfigError("compiled_backbone with verify_attention 'flex' writes other CoC "
                              "tokens than the graphed engine on CUDA; set verify_attention "
                              "'masked', or compiled_backbone false")
        if self.backbone_weights == "fp8" and self.backend != "torch":
            raise ConfigError("backbone_weights 'fp8' quantizes the torch backbone; set "
                              "backend 'torch' or backbone_weights 'native'")
        if self.backend == "tensorrt" and self.cuda_graphs:
            raise ConfigError("cuda_graphs captures the torch backend's steps; set "
                              "cuda_graphs false with backend 'tensorrt'")

    @classmethod
    def where_applicable(cls, switches: dict[str, bool], **settings) -> EngineConfig:
        """The config with `switches` (name -> wanted) read as "on where it applies": none in
        baseline mode, cuda_graphs on a CUDA device with the torch backend, compiled_expert
        and compiled_backbone where cuda_graphs applies and is wanted, rotated_keys with the
        torch backend, padded_logits on a CUDA device; coc_reuse as the config adjusts it."""
        if settings.get("mode", default_of(cls, "mode")) == "baseline":
            return cls(**settings)
        cuda = settings.get("device", default_of(cls, "device")).startswith("cuda")
        torch_backend = settings.get("backend", default_of(cls, "backend")) == "torch"
        graphs = cuda and torch_backend
        compiled = graphs and switches.get("cuda_graphs", True) is not False
        applies = {"cuda_graphs": graphs, "rotated_keys": torch_backend, "padded_logits": cuda,
                   "compiled_expert": compiled, "compiled_backbone": compiled}
        wanted = {name: value and applies.get(name, True) for name, value in switches.items()}
        return cls(**wanted, **settings)

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
