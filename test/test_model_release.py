"""Release checkpoint directories load as published: tiny checkpoints written the way the release
writes them (Hugging Face Qwen3-VL config + Alpamayo fields, HF-saved tokenizer files, sharded
safetensors with an index) plan exactly like the same weights in this package's format."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.windows import window

from flashdrive_ros.bench.hf_model import hf_config
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import (
    ConfigError,
    ModelConfig,
    alpamayo_1_5_10b,
    alpamayo_r1_10b,
    tiny,
)
from flashdrive_ros.model.release_config import release_model_config
from flashdrive_ros.model.release_tokenizer import load_tokenizer
from flashdrive_ros.model.tokenizer import TextTokenizer, TokenizerError, backbone_tokenizer
from flashdrive_ros.model.weights import save_model_dir

transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")

pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = ["Front camera: frame 0 the car ahead brakes, so the ego vehicle slows down.",
          "output the chain-of-thought reasoning of the driving process, then output the "
          "future trajectory. You are a driving assistant that generates safe and accurate "
          "actions."] * 10
BPE_SIZE = 300
TRAJ_BINS, HISTORY_BINS = 3000, 1000
TRAJ_KEYS = {"history": "<|traj_history|>", "future": "<|traj_future|>",
             "history_start": "<|traj_history_start|>", "future_start": "<|traj_future_start|>",
             "history_end": "<|traj_history_end|>", "future_end": "<|traj_future_end|>"}
R1_SPECIALS = ["prompt_start", "prompt_end", "image_start", "image_pre_tkn", "image_end",
               "traj_history_start", "traj_history_pre_tkn", "traj_history_end", "cot_start",
               "cot_end", "meta_action_start", "meta_action_end", "traj_future_start",
               "traj_future_pre_tkn", "traj_future_end", "traj_history", "traj_future",
               "image_pad", "vectorized_wm", "vectorized_wm_start", "vectorized_wm_end",
               "vectorized_wm_pre_tkn", "route_start", "route_pad", "route_end",
               "question_start", "question_end", "answer_start", "answer_end"]
A15_SPECIALS = ["prompt_start", "prompt_end", "image_start", "_padding_0", "image_end",
                "traj_history_start", "_padding_1", "traj_history_end", "cot_start", "cot_end",
                "_padding_2", "_padding_3", "traj_future_start", "_padding_4",
                "traj_future_end", "traj_history", "traj_future", "image_pad", "_padding_5",
                "_padding_6", "_padding_7", "_padding_8", "route_start", "route_pad",
                "route_end", "question_start", "question_end", "answer_start", "answer_end"]
MAX_COC = 6


def hf_backbone_tokenizer():
    from transformers import PreTrainedTokenizerFast
    return PreTrainedTokenizerFast(tokenizer_object=backbone_tokenizer(CORPUS, BPE_SIZE))


def extend_as_release(hf_tok, specials: list[str]):
    """The release's vocabulary extension, done by transformers itself."""
    hf_tok.add_tokens([f"<i{i}>" for i in range(TRAJ_BINS + HISTORY_BINS)])
    hf_tok.add_tokens([f"<|{k}|>" for k in specials], special_tokens=True)
    return hf_tok


def package_config(vocab_size: int, layout: str) -> ModelConfig:
    cfg = tiny(vocab_size=vocab_size)
    action = dataclasses.replace(cfg.action, history_token_offset=TRAJ_BINS,
                                 num_traj_tokens=TRAJ_BINS + HISTORY_BINS, accel_mean=0.03,
                                 accel_std=0.7, curvature_mean=0.0003)
    prompt = dataclasses.replace(cfg.prompt, layout=layout)
    return dataclasses.replace(cfg, action=action, prompt=prompt, drafter=None)


def release_fields(cfg: ModelConfig, hf_tok, kind: str) -> dict:
    a, e = cfg.action, cfg.expert
    prefix = "alpamayo_r1" if kind == "alpamayo_r1" else "alpamayo1_5"
    return {
        "architectures": ["AlpamayoR1" if kind == "alpamayo_r1" else "Alpamayo1_5"],
        "model_type": kind, "vlm_backend": "qwenvl3", "vocab_size": len(hf_tok),
        "traj_vocab_size": TRAJ_BINS + HISTORY_BINS, "tokens_per_history_traj": 48,
        "tokens_per_future_traj": cfg.prompt.max_coc_tokens,
        "traj_token_start_idx": hf_tok.convert_tokens_to_ids("<i0>"),
        "traj_token_ids": {k: hf_tok.convert_tokens_to_ids(s) for k, s in TRAJ_KEYS.items()},
        "add_special_tokens": True, "model_dtype": "bfloat16",
        "attn_implementation": "flash_attention_2", "keep_same_dtype": True,
        "expert_non_causal_attention": True,
        "expert_cfg": {"hidden_size": e.hidden_size, "intermediate_size": e.intermediate_size,
                       "num_attention_heads": e.num_attention_heads,
                       "_attn_implementation": "sdpa"},
        "action_space_cfg": {
            "_target_": f"{prefix}.action_space.UnicycleAccelCurvatureActionSpace",
            "n_waypoints": a.num_waypoints, "dt": a.dt, "accel_mean": a.accel_mean,
            "accel_std": a.accel_std, "curvature_mean": a.curvature_mean,
            "curvature_std": a.curvature_std, "accel_bounds": [-9.8, 9.8],
            "curvature_bounds": [-0.33, 0.33], "theta_lambda": 1e-6, "theta_ridge": 1e-8,
            "v_lambda": 1e-6, "v_ridge": 1e-4, "a_lambda": 1e-4, "a_ridge": 1e-4,
            "kappa_lambda": 1e-4, "kappa_ridge": 1e-4},
        "action_in_proj_cfg": {
            "_target_": f"{prefix}.models.action_in_proj.PerWaypointActionInProjV2",
            "hidden_size": a.in_proj_hidden_size, "num_enc_layers": a.in_proj_num_layers,
            "max_freq": a.fourier_max_freq, "num_fourier_feats": a.num_fourier_features},
        "action_out_proj_cfg": {"_target_": "torch.nn.Linear"},
        "diffusion_cfg": {"_target_": f"{prefix}.diffusion.flow_matching.FlowMatching",
                          "int_method": "euler", "num_inference_steps": a.num_flow_steps},
        "traj_tokenizer_cfg": {"_target_": f"{prefix}.models.delta_tokenizer."
                                           f"DeltaTrajectoryTokenizer", "num_bins": TRAJ_BINS},
        "hist_traj_tokenizer_cfg": {
            "_target_": f"{prefix}.models.delta_tokenizer.DeltaTrajectoryTokenizer",
            "ego_xyz_min": [-4, -4, -10], "ego_xyz_max": [4, 4, 10],
            "num_bins": HISTORY_BINS},
        "flashdrive": {"prompt": {"image_width": cfg.prompt.image_width,
                                  "image_height": cfg.prompt.image_height}},
    }


def release_state(cfg: ModelConfig, hf_cfg, space_buffers: bool) -> dict[str, torch.Tensor]:
    """The release's tensors: the VLM and the expert as transformers builds them from the
    config (the expert is the text config with expert_cfg applied, without embed_tokens),
    the action projections, and the action-space buffers where the release stores them
    (Alpamayo 1; Alpamayo 1.5 derives them from the config)."""
    torch.manual_seed(0)
    vlm = transformers.Qwen3VLForConditionalGeneration(hf_cfg)
    expert_cfg = hf_cfg.text_config.__class__(**hf_cfg.text_config.to_dict())
    for key in ("hidden_size", "intermediate_size", "num_attention_heads"):
        setattr(expert_cfg, key, getattr(cfg.expert, key))
    expert = transformers.Qwen3VLTextModel(expert_cfg)
    ours = AlpamayoModel(cfg)
    state = {f"vlm.{k}": v for k, v in vlm.state_dict().items()}
    state.update({f"expert.{k}": v for k, v in expert.state_dict().items()
                  if not k.startswith("embed_tokens")})
    state.update({k: v for k, v in ours.state_dict().items()
                  if k.startswith(("action_in_proj.", "action_out_proj."))
                  and not k.endswith("freqs")})
    gen = torch.Generator().manual_seed(1)
    state = {k: (1.0 + 0.1 * torch.randn(v.shape, generator=gen) if "norm" in k
                 and k.endswith("weight") else 0.05 * torch.randn(v.shape, generator=gen)
                 ).to(torch.bfloat16).contiguous() for k, v in state.items()}
    if space_buffers:
        state.update({k: v.clone() for k, v in ours.state_dict().items()
                      if k.startswith("action_space.")})
    return state


def write_shards(state: dict[str, torch.Tensor], folder: Path) -> None:
    huggingface_hub.save_torch_state_dict(state, folder, max_shard_size="1MB",
                                          metadata={"format": "pt"})
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("model-*-of-*.safetensors"))) > 1


@pytest.fixture(scope="module")
def release_r1(tmp_path_factory):
    """An Alpamayo 1 directory: config.json = Qwen3-VL config + release fields, the extended
    tokenizer saved by transformers, sharded bf16 weights; and the same weights in this
    package's format."""
    root = tmp_path_factory.mktemp("release_r1")
    hf_tok = extend_as_release(hf_backbone_tokenizer(), R1_SPECIALS)
    cfg = package_config(len(hf_tok), "alpamayo-1")
    hf_cfg = hf_config(cfg, hf_tok.convert_tokens_to_ids)
    release = root / "Alpamayo-R1-tiny"
    release.mkdir()
    config = {**hf_cfg.to_dict(), **release_fields(cfg, hf_tok, "alpamayo_r1")}
    (release / "config.json").write_text(json.dumps(config, indent=2))
    hf_tok.save_pretrained(release)
    state = release_state(cfg, hf_cfg, space_buffers=True)
    write_shards(state, release)
    native = root / "native"
    model = AlpamayoModel(cfg)
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state.items()},
                                                strict=False)
    assert set(missing) == model.derivable_buffers - set(state) and not unexpected
    save_model_dir(model, cfg, TextTokenizer.from_file(release / "tokenizer.json"), native)
    return release, native, cfg


@pytest.fixture(scope="module")
def release_15(tmp_path_factory):
    """An Alpamayo 1.5 directory: the release fields only, its backbone (Qwen3-VL config.json
    and un-extended tokenizer files) in the directory vlm_name_or_path names."""
    root = tmp_path_factory.mktemp("release_15")
    base = hf_backbone_tokenizer()
    reference = extend_as_release(hf_backbone_tokenizer(), A15_SPECIALS)
    cfg = package_config(len(reference), "alpamayo-1.5")
    hf_cfg = hf_config(dataclasses.replace(
        cfg, text=dataclasses.replace(cfg.text, vocab_size=len(base))),
        base.convert_tokens_to_ids)
    backbone = root / "Cosmos-Reason2-tiny"
    hf_cfg.save_pretrained(backbone)
    base.save_pretrained(backbone)
    release = root / "Alpamayo-1.5-tiny"
    release.mkdir()
    fields = {**release_fields(cfg, reference, "alpamayo1_5"),
              "vlm_name_or_path": "../Cosmos-Reason2-tiny"}
    (release / "config.json").write_text(json.dumps(fields, indent=2))
    full_cfg = hf_config(cfg, reference.convert_tokens_to_ids)
    write_shards(release_state(cfg, full_cfg, space_buffers=False), release)
    return release, reference, cfg


def test_release_config_maps_to_the_package_config(release_r1):
    release, native, cfg = release_r1
    loaded = ModelConfig.load(release / "config.json")
    assert loaded.name == "alpamayo-r1-release"
    assert dataclasses.replace(loaded, name=cfg.name, prompt=dataclasses.replace(
        loaded.prompt, max_coc_tokens=cfg.prompt.max_coc_tokens)) == cfg
    assert ModelConfig.load(native / "config.json") == cfg


def test_release_dir_plans_exactly_like_the_package_format(release_r1):
    release, native, _ = release_r1
    settings = EngineConfig(speculative=False, max_coc_tokens=MAX_COC, num_samples=2)
    plans = {}
    for name, folder in (("release", release), ("native", native)):
        eng = Engine.load(folder, settings)
        plans[name] = [eng.step(window(s)) for s in (0, 1)]
    assert len(plans["release"][0].coc_token_ids) > 0
    for mine, theirs in zip(plans["release"], plans["native"]):
        assert mine.coc_token_ids == theirs.coc_token_ids
        assert mine.coc_text == theirs.coc_text
        np.testing.assert_array_equal(mine.trajectories, theirs.trajectories)
        assert np.isfinite(mine.trajectories).all()


def test_release_weights_equal_the_package_format_weights(release_r1):
    release, native, _ = release_r1
    mine = AlpamayoModel.from_dir(release).state_dict()
    theirs = AlpamayoModel.from_dir(native).state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_release_tokenizer_files_load_with_the_release_ids(release_r1):
    release, _, _ = release_r1
    tok = load_tokenizer(release)
    config = json.loads((release / "config.json").read_text())
    assert tok.traj_token_start == config["traj_token_start_idx"]
    assert tok.num_traj_tokens == config["traj_vocab_size"]
    assert tok.vocab_size == config["vocab_size"]
    assert tok.token_id("<|image_pad|>") == config["image_token_id"]


def test_backbone_directory_supplies_config_and_tokenizer(release_15):
    release, reference, cfg = release_15
    loaded = ModelConfig.load(release / "config.json")
    assert loaded.prompt.layout == "alpamayo-1.5"
    assert dataclasses.replace(loaded, name=cfg.name) == cfg
    tok = load_tokenizer(release)
    assert tok.vocab_size == len(reference)
    for name in ["<i0>", f"<i{TRAJ_BINS}>", "<|cot_start|>", "<|_padding_8|>",
                 "<|traj_future_start|>", "<|answer_end|>", "<|image_pad|>"]:
        assert tok.token_id(name) == reference.convert_tokens_to_ids(name), name
    model = AlpamayoModel.from_dir(release)
    assert model.cfg == loaded


def test_hub_backbone_name_takes_the_qwen3_vl_8b_settings():
    raw = {"architectures": ["Alpamayo1_5"], "model_type": "alpamayo1_5",
           "vlm_name_or_path": "nvidia/Cosmos-Reason2-8B", "vocab_size": 155697,
           "traj_vocab_size": 4000, "tokens_per_history_traj": 48,
           "expert_cfg": {"hidden_size": 2048, "intermediate_size": 8256,
                          "num_attention_heads": 16},
           "action_in_proj_cfg": {"num_fourier_feats": 32},
           "traj_tokenizer_cfg": {"num_bins": 3000},
           "hist_traj_tokenizer_cfg": {"num_bins": 1000}}
    cfg = release_model_config(raw, Path("/nonexistent"))
    preset = alpamayo_1_5_10b()
    assert (cfg.vision, cfg.text, cfg.expert, cfg.prompt) == (
        preset.vision, preset.text, preset.expert, preset.prompt)
    assert cfg.action == dataclasses.replace(preset.action, history_token_offset=3000)
    r1 = release_model_config({**raw, "architectures": ["AlpamayoR1"],
                               "model_type": "alpamayo_r1"}, Path("/nonexistent"))
    assert r1.prompt == alpamayo_r1_10b().prompt and cfg.drafter is None


def test_unmappable_values_are_all_named(release_r1):
    release, _, _ = release_r1
    raw = json.loads((release / "config.json").read_text())
    raw["expert_non_causal_attention"] = False
    raw["diffusion_cfg"]["int_method"] = "heun"
    raw["hist_traj_tokenizer_cfg"]["ego_xyz_min"] = [-4, -3, -10]
    raw["text_config"]["rope_parameters"]["rope_type"] = "yarn"
    raw["action_out_proj_cfg"]["_target_"] = "alpamayo_r1.models.Mlp"
    raw["speculative_heads"] = 3
    with pytest.raises(ConfigError) as err:
        release_model_config(raw, release)
    text = str(err.value)
    for needle in ("6 problem", "expert_non_causal_attention", "'heun'", "ego_xyz_min",
                   "'yarn'", "Mlp", "speculative_heads"):
        assert needle in text, needle


@pytest.mark.parametrize("change, needle", [
    ({"vlm_name_or_path": "someone/Other-VL-8B", "text_config": None}, "someone/Other-VL-8B"),
    ({"model_type": "qwen3_vl", "architectures": None}, "which release"),
    ({"traj_vocab_size": None, "model_type": "qwen3_vl", "architectures": None},
     "plain Qwen3-VL"),
    ({"tokens_per_history_traj": 47}, "tokens_per_history_traj"),
])
def test_configs_that_cannot_be_mapped_are_refused(release_r1, change, needle):
    release, _, _ = release_r1
    raw = json.loads((release / "config.json").read_text())
    for key, value in change.items():
        raw.pop(key) if value is None else raw.__setitem__(key, value)
    if "text_config" in change:
        raw.pop("vision_config")
    with pytest.raises(ConfigError, match=needle):
        release_model_config(raw, release)


def test_tokenizer_that_disagrees_with_config_is_refused(release_r1, tmp_path):
    release, _, _ = release_r1
    copy_dir(release, tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["traj_token_start_idx"] += 1
    raw["traj_token_ids"]["future_start"] += 2
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(TokenizerError) as err:
        load_tokenizer(tmp_path)
    assert "traj_token_start_idx" in str(err.value)
    assert "traj_token_ids.future_start" in str(err.value)


def test_replay_cli_runs_on_the_release_dir(release_r1, tmp_path):
    from helpers.bags import write_drive_bag

    from flashdrive_ros.eval.cli import main

    release, _, _ = release_r1
    bag = write_drive_bag(tmp_path / "bag", seconds=8.2)
    out = tmp_path / "out"
    code = main([str(bag), "--model-dir", str(release), "--out", str(out), "--mode",
                 "baseline", "--max-windows", "1", "--device", "cpu", "--quiet"])
    report = json.loads((out / "report.json").read_text())
    assert code == 0 and report["windows"] == 1
    assert np.isfinite(report["minade1_6s"])


def test_transformers_4_rope_fields_map_the_same(release_r1):
    release, _, cfg = release_r1
    raw = json.loads((release / "config.json").read_text())
    text = raw["text_config"]
    rope = text.pop("rope_parameters")
    text["rope_theta"] = rope.pop("rope_theta")
    rope.pop("mrope_interleaved")
    text["rope_scaling"] = rope
    raw["vision_config"].pop("rope_parameters")
    raw["torch_dtype"] = "bfloat16"
    loaded = release_model_config(raw, release)
    assert (loaded.text, loaded.vision, loaded.expert) == (cfg.text, cfg.vision, cfg.expert)


def copy_dir(source: Path, dest: Path) -> Path:
    dest.mkdir(exist_ok=True)
    for item in source.iterdir():
        (dest / item.name).write_bytes(item.read_bytes())
    return dest


def test_tokenizer_config_adds_the_tokens_tokenizer_json_lacks(release_15, tmp_path):
    release, reference, _ = release_15
    model_dir = copy_dir(release, tmp_path / "model")
    backbone = copy_dir(release.parent / "Cosmos-Reason2-tiny", tmp_path / "Cosmos-Reason2-tiny")
    tokenizer = json.loads((backbone / "tokenizer.json").read_text())
    declared = {str(t["id"]): {k: v for k, v in t.items() if k != "id"}
                for t in tokenizer["added_tokens"]}
    dropped = tokenizer["added_tokens"][-2:]
    tokenizer["added_tokens"] = tokenizer["added_tokens"][:-2]
    (backbone / "tokenizer.json").write_text(json.dumps(tokenizer))
    settings = {"added_tokens_decoder": declared, "tokenizer_class": "Qwen2Tokenizer"}
    (backbone / "tokenizer_config.json").write_text(json.dumps(settings))
    tok = load_tokenizer(model_dir)
    for entry in dropped:
        assert tok.token_id(entry["content"]) == entry["id"]
    assert tok.vocab_size == len(reference)
    declared[str(dropped[-1]["id"] + 1)] = declared.pop(str(dropped[-1]["id"]))
    (backbone / "tokenizer_config.json").write_text(json.dumps(
        {"added_tokens_decoder": declared}))
    with pytest.raises(TokenizerError, match="declared as id"):
        load_tokenizer(model_dir)
