"""Model configuration: one dataclass per component, validated on construction.

Field names follow the Hugging Face Qwen3-VL / Alpamayo config keys. `ModelConfig.from_dict` /
`to_dict` are this package's (de)serialisation; `ModelConfig.load` also reads a release
config.json (model/release_config.py maps it onto these dataclasses).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(ValueError):
    """A configuration value is missing, inconsistent or out of range."""


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ConfigError(msg)


@dataclass
class VisionConfig:
    depth: int = 27
    hidden_size: int = 1152
    num_heads: int = 16
    intermediate_size: int = 4304
    hidden_act: str = "gelu_pytorch_tanh"
    in_channels: int = 3
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    out_hidden_size: int = 4096
    num_position_embeddings: int = 2304
    deepstack_visual_indexes: tuple[int, ...] = (8, 16, 24)
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        self.deepstack_visual_indexes = tuple(self.deepstack_visual_indexes)
        _require(self.hidden_size % self.num_heads == 0, "vision hidden_size % num_heads != 0")
        _require(self.head_dim % 4 == 0, "vision head_dim must be divisible by 4 (2D rotary)")
        _require(all(0 <= i < self.depth for i in self.deepstack_visual_indexes),
                 f"deepstack_visual_indexes {self.deepstack_visual_indexes} outside depth "
                 f"{self.depth}")
        side = int(round(self.num_position_embeddings ** 0.5))
        _require(side * side == self.num_position_embeddings,
                 "num_position_embeddings must be a square")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass
class TextConfig:
    vocab_size: int = 155697
    hidden_size: int = 4096
    num_hidden_layers: int = 36
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    intermediate_size: int = 12288
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6
    rope_theta: float = 5_000_000.0
    mrope_section: tuple[int, int, int] = (24, 20, 20)
    mrope_interleaved: bool = True
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 262144

    def __post_init__(self) -> None:
        self.mrope_section = tuple(self.mrope_section)
        _require(len(self.mrope_section) == 3, "mrope_section must have 3 entries (t, h, w)")
        _require(sum(self.mrope_section) == self.head_dim // 2,
                 f"mrope_section {self.mrope_section} must sum to head_dim/2 = "
                 f"{self.head_dim // 2}")
        _require(self.num_attention_heads % self.num_key_value_heads == 0,
                 "num_attention_heads must be a multiple of num_key_value_heads")
        _require(self.vocab_size > 0 and self.num_hidden_layers > 0, "empty text model")
        _require(self.hidden_act == "silu",
                 f"unsupported text hidden_act {self.hidden_act!r} (expected silu)")


@dataclass
class ExpertConfig:
    hidden_size: int = 2048
    num_hidden_layers: int = 36
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    intermediate_size: int = 8256
    hidden_act: str = "silu"
    rms_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        _require(self.num_attention_heads % self.num_key_value_heads == 0,
                 "expert num_attention_heads must be a multiple of num_key_value_heads")
        _require(self.hidden_act == "silu",
                 f"unsupported expert hidden_act {self.hidden_act!r} (expected silu)")


@dataclass
class ActionConfig:
    num_waypoints: int = 64
    dt: float = 0.1
    action_dim: int = 2
    num_history: int = 16
    history_dt: float = 0.1
    num_fourier_features: int = 32
    num_flow_steps: int = 10
    history_bins: int = 1000
    history_range_xy: float = 4.0
    history_range_z: float = 10.0
    history_token_offset: int = 0
    num_traj_tokens: int = 4000
    fourier_max_freq: float = 100.0
    in_proj_hidden_size: int = 1024
    in_proj_num_layers: int = 4
    accel_mean: float = 0.0
    accel_std: float = 1.0
    curvature_mean: float = 0.0
    curvature_std: float = 1.0

    def __post_init__(self) -> None:
        _require(self.num_fourier_features % 2 == 0 and self.num_fourier_features >= 2,
                 "num_fourier_features must be even (sin and cos halves)")
        _require(self.in_proj_num_layers >= 1, "in_proj_num_layers must be >= 1")
        _require(self.accel_std > 0 and self.curvature_std > 0, "action std must be > 0")
        _require(0 <= self.history_token_offset
                 and self.history_token_offset + self.history_bins <= self.num_traj_tokens,
                 "history bins must fit inside the trajectory tokens")
        _require(self.action_dim == 2, "action is (acceleration, curvature): action_dim = 2")
        _require(self.num_waypoints > 0 and self.dt > 0, "bad trajectory horizon")
        _require(self.num_flow_steps >= 1, "num_flow_steps must be >= 1")
        _require(self.history_bins >= 2, "history_bins must be >= 2")


@dataclass
class DrafterConfig:
    num_hidden_layers: int = 2
    hidden_size: int = 4096
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: int = 128
    intermediate_size: int = 12288
    rms_norm_eps: float = 1e-6
    target_layer_ids: tuple[int, ...] = (24, 30, 31, 32, 34)
    block_size: int = 8
    context_len: int = 16
    rotary: str = "flat"
    kind: str = "dflash"

    def __post_init__(self) -> None:
        self.target_layer_ids = tuple(self.target_layer_ids)
        _require(self.rotary in ("flat", "mrope"), f"drafter rotary must be flat|mrope, "
                 f"got {self.rotary!r}")
        _require(self.kind in ("dflash", "eagle3"), f"drafter kind must be dflash|eagle3, "
                 f"got {self.kind!r}")
        _require(self.block_size >= 2, "block_size must be >= 2")
        _require(self.context_len >= 1, "context_len must be >= 1")
        _require(len(self.target_layer_ids) >= 1, "target_layer_ids empty")


@dataclass
class PromptConfig:
    layout: str = "alpamayo-1.5"
    camera_names: tuple[str, ...] = (
        "camera_cross_left_120fov", "camera_front_wide_120fov",
        "camera_cross_right_120fov", "camera_front_tele_30fov")
    num_frames: int = 4
    frame_dt: float = 0.1
    image_width: int = 576
    image_height: int = 320
    max_coc_tokens: int = 64

    def __post_init__(self) -> None:
        self.camera_names = tuple(self.camera_names)
        _require(self.layout in ("alpamayo-1", "alpamayo-1.5"),
                 f"prompt layout must be alpamayo-1|alpamayo-1.5, got {self.layout!r}")
        _require(len(self.camera_names) >= 1 and self.num_frames >= 1, "no images in prompt")


_SECTIONS = {
    "vision": VisionConfig, "text": TextConfig, "expert": ExpertConfig,
    "action": ActionConfig, "prompt": PromptConfig,
}


@dataclass
class ModelConfig:
    name: str = "alpamayo-1.5-10b"
    vision: VisionConfig = field(default_factory=VisionConfig)
    text: TextConfig = field(default_factory=TextConfig)
    expert: ExpertConfig = field(default_factory=ExpertConfig)
    action: ActionConfig = field(default_factory=ActionConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    drafter: DrafterConfig | None = field(default_factory=DrafterConfig)

    def __post_init__(self) -> None:
        t, e, v = self.text, self.expert, self.vision
        _require(e.num_hidden_layers == t.num_hidden_layers,
                 "expert layer i reads backbone KV layer i: layer counts must match")
        _require(e.num_key_value_heads == t.num_key_value_heads and e.head_dim == t.head_dim,
                 "expert kv heads / head_dim must match the backbone's KV cache")
        _require(v.out_hidden_size == t.hidden_size,
                 "vision out_hidden_size must equal text hidden_size")
        _require(len(v.deepstack_visual_indexes) <= t.num_hidden_layers,
                 "more deepstack levels than LM layers")
        p = self.prompt
        unit = v.patch_size * v.spatial_merge_size
        _require(p.image_width % unit == 0 and p.image_height % unit == 0,
                 f"prompt image size must be a multiple of patch*merge = {unit}")
        if self.drafter is not None:
            d = self.drafter
            _require(all(0 <= i < t.num_hidden_layers for i in d.target_layer_ids),
                     f"drafter target_layer_ids {d.target_layer_ids} outside backbone depth")

    @property
    def tokens_per_image(self) -> int:
        unit = self.vision.patch_size * self.vision.spatial_merge_size
        return (self.prompt.image_width // unit) * (self.prompt.image_height // unit)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        _require(not unknown, f"unknown config keys: {sorted(unknown)}")
        kw: dict = {"name": d.get("name", "custom")}
        for key, typ in _SECTIONS.items():
            kw[key] = _build(typ, d.get(key, {}), key)
        if "drafter" in d:
            kw["drafter"] = None if d["drafter"] is None else _build(
                DrafterConfig, d["drafter"], "drafter")
        return cls(**kw)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> ModelConfig:
        """A config.json in this package's format or in the release's."""
        from flashdrive_ros.model.release_config import is_release_config, release_model_config

        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"model config not found: {path}") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"model config {path} is not valid JSON: {exc}") from None
        if is_release_config(data):
            return release_model_config(data, path.parent)
        return cls.from_dict(data)


def _build(typ, values: dict, section: str):
    if not isinstance(values, dict):
        raise ConfigError(f"config section {section!r} must be an object")
    known = {f.name for f in dataclasses.fields(typ)}
    unknown = set(values) - known
    _require(not unknown, f"unknown keys in {section!r}: {sorted(unknown)}")
    return typ(**values)


def alpamayo_1_5_10b() -> ModelConfig:
    return ModelConfig(name="alpamayo-1.5-10b")


def alpamayo_r1_10b() -> ModelConfig:
    return ModelConfig(name="alpamayo-r1-10b", prompt=PromptConfig(layout="alpamayo-1"))


TINY_CURVATURE_STD = 0.02


def tiny(vocab_size: int = 4600) -> ModelConfig:
    """A few million parameters, the same structure; used by tests. Its curvature scale is a
    road vehicle's (0.02 1/m), so that even random weights give plans within the node's
    default plan limits."""
    return ModelConfig(
        name="tiny",
        vision=VisionConfig(depth=3, hidden_size=64, num_heads=4, intermediate_size=128,
                            patch_size=8, out_hidden_size=128, num_position_embeddings=256,
                            deepstack_visual_indexes=(0, 1)),
        text=TextConfig(vocab_size=vocab_size, hidden_size=128, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                        intermediate_size=256, rope_theta=10000.0, mrope_section=(6, 5, 5)),
        expert=ExpertConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=32, intermediate_size=128),
        action=ActionConfig(num_fourier_features=8, in_proj_hidden_size=64,
                            curvature_std=TINY_CURVATURE_STD),
        prompt=PromptConfig(image_width=64, image_height=48, max_coc_tokens=32),
        drafter=DrafterConfig(num_hidden_layers=1, hidden_size=128, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=32, intermediate_size=256,
                              target_layer_ids=(1, 2, 3), block_size=8, context_len=8),
    )


def embedded(vocab_size: int = 6144) -> ModelConfig:
    """The shipped default model: Alpamayo 1.5 structure at ~10M parameters, 4 x 4 frames of
    128x80 (40 tokens each), trained from scratch on the simulator (flashdrive_ros.train)."""
    return ModelConfig(
        name="embedded",
        vision=VisionConfig(depth=4, hidden_size=128, num_heads=4, intermediate_size=384,
                            patch_size=8, out_hidden_size=256, num_position_embeddings=256,
                            deepstack_visual_indexes=(1, 2)),
        text=TextConfig(vocab_size=vocab_size, hidden_size=256, num_hidden_layers=6,
                        num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                        intermediate_size=640, rope_theta=10000.0, mrope_section=(6, 5, 5),
                        max_position_embeddings=4096),
        expert=ExpertConfig(hidden_size=128, num_hidden_layers=6, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=32, intermediate_size=384),
        action=ActionConfig(num_fourier_features=16, in_proj_hidden_size=128,
                            num_traj_tokens=1000),
        prompt=PromptConfig(image_width=128, image_height=80, max_coc_tokens=48),
        drafter=DrafterConfig(num_hidden_layers=2, hidden_size=256, num_attention_heads=8,
                              num_key_value_heads=2, head_dim=32, intermediate_size=640,
                              target_layer_ids=(1, 3, 4, 5), block_size=8, context_len=16),
    )


PRESETS = {
    "alpamayo-1.5-10b": alpamayo_1_5_10b,
    "alpamayo-r1-10b": alpamayo_r1_10b,
    "tiny": tiny,
    "embedded": embedded,
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]()
    except KeyError:
        raise ConfigError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}") from None
