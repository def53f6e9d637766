"""Model presets: the Alpamayo release shapes, the tiny test model, (de)serialisation."""

import dataclasses
import json
import re

import pytest
import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import (
    ConfigError,
    ExpertConfig,
    ModelConfig,
    TextConfig,
    alpamayo_1_5_10b,
    alpamayo_r1_10b,
    preset,
    tiny,
)

RELEASE_PRESETS = ("alpamayo-r1-10b", "alpamayo-1.5-10b")
QWEN3_VL_8B_PARAMS = 8_767_123_696
QWEN3_VL_VOCAB = 151_936


def parameter_count(cfg: ModelConfig) -> dict[str, int]:
    with torch.device("meta"):
        model = AlpamayoModel(cfg)
    return {name: sum(p.numel() for p in child.parameters())
            for name, child in model.named_children()}


def key_pattern(cfg: ModelConfig) -> set[str]:
    """State-dict names with layer / block indices replaced by N."""
    with torch.device("meta"):
        model = AlpamayoModel(cfg)
    return {re.sub(r"\.\d+\.", ".N.", name) for name in model.state_dict()}


@pytest.mark.parametrize("name", RELEASE_PRESETS)
def test_release_presets_have_the_alpamayo_shapes(name):
    cfg = preset(name)
    assert cfg.name == name
    t, v, e, a, p = cfg.text, cfg.vision, cfg.expert, cfg.action, cfg.prompt
    assert (t.num_hidden_layers, t.hidden_size, t.num_attention_heads, t.num_key_value_heads,
            t.head_dim, t.intermediate_size) == (36, 4096, 32, 8, 128, 12288)
    assert (t.rms_norm_eps, t.rope_theta, t.mrope_section) == (1e-6, 5e6, (24, 20, 20))
    assert t.mrope_interleaved and not t.tie_word_embeddings and t.vocab_size == 155697
    assert (v.depth, v.hidden_size, v.num_heads, v.intermediate_size, v.patch_size,
            v.temporal_patch_size, v.spatial_merge_size, v.out_hidden_size,
            v.deepstack_visual_indexes) == (27, 1152, 16, 4304, 16, 2, 2, 4096, (8, 16, 24))
    assert (e.num_hidden_layers, e.hidden_size, e.num_attention_heads, e.num_key_value_heads,
            e.head_dim, e.intermediate_size) == (36, 2048, 16, 8, 128, 8256)
    assert (a.num_waypoints, a.dt, a.num_history, a.history_bins, a.history_range_xy,
            a.history_range_z, a.num_traj_tokens) == (64, 0.1, 16, 1000, 4.0, 10.0, 4000)
    assert len(p.camera_names) == 4 and p.num_frames == 4
    assert (p.image_width, p.image_height, cfg.tokens_per_image) == (576, 320, 180)


def test_release_presets_differ_in_prompt_layout_only():
    r1, a15 = alpamayo_r1_10b(), alpamayo_1_5_10b()
    assert (r1.prompt.layout, a15.prompt.layout) == ("alpamayo-1", "alpamayo-1.5")
    same_prompt = dataclasses.replace(r1, name=a15.name, prompt=a15.prompt)
    assert same_prompt == a15


def test_release_parameter_counts():
    counts = parameter_count(alpamayo_1_5_10b())
    extra_vocab = 155697 - QWEN3_VL_VOCAB
    assert counts["vlm"] == QWEN3_VL_8B_PARAMS + 2 * 4096 * extra_vocab
    attention = 2 * 2048 * 16 * 128 + 2 * 2048 * 8 * 128 + 2 * 128
    layer = attention + 3 * 2048 * 8256 + 2 * 2048
    assert counts["expert"] == 36 * layer + 2048
    assert counts["action_out_proj"] == 2048 * 2 + 2
    assert 10e9 < sum(counts.values()) < 12e9


def test_tiny_is_a_few_million_parameters_of_the_same_structure():
    cfg = tiny()
    total = sum(parameter_count(cfg).values())
    assert 1e6 < total < 1e7
    assert key_pattern(cfg) == key_pattern(alpamayo_1_5_10b())
    release = alpamayo_1_5_10b().text
    scale = release.head_dim // cfg.text.head_dim
    assert tuple(scale * s for s in cfg.text.mrope_section) == release.mrope_section
    assert sum(cfg.text.mrope_section) == cfg.text.head_dim // 2


@pytest.mark.parametrize("name", [*RELEASE_PRESETS, "tiny"])
def test_config_json_round_trip(name, tmp_path):
    cfg = preset(name)
    path = tmp_path / "config.json"
    cfg.save(path)
    assert ModelConfig.load(path) == cfg
    assert ModelConfig.from_dict(json.loads(path.read_text())) == cfg


def test_invalid_configs_raise_config_error(tmp_path):
    with pytest.raises(ConfigError, match="mrope_section"):
        TextConfig(head_dim=64)
    with pytest.raises(ConfigError, match="text hidden_act 'gelu'"):
        TextConfig(hidden_act="gelu")
    with pytest.raises(ConfigError, match="expert hidden_act 'gelu'"):
        ExpertConfig(hidden_act="gelu")
    with pytest.raises(ConfigError, match="unknown config keys"):
        ModelConfig.from_dict({**tiny().to_dict(), "extra": 1})
    with pytest.raises(ConfigError, match="unknown keys in 'text'"):
        ModelConfig.from_dict({"text": {"hidden": 1}})
    with pytest.raises(ConfigError, match="layer counts"):
        dataclasses.replace(tiny(), expert=dataclasses.replace(tiny().expert,
                                                               num_hidden_layers=3))
    with pytest.raises(ConfigError, match="unknown model preset"):
        preset("alpamayo-2")
    with pytest.raises(ConfigError, match="not found"):
        ModelConfig.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        ModelConfig.load(tmp_path / "bad.json")
