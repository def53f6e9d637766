"""Release config.json files mapped onto `ModelConfig`.

Accepted forms of a model directory's config.json (docs/MODEL.md, "Release checkpoints"):
- the Alpamayo release's (`model_type` alpamayo_r1 / alpamayo1_5): its backbone comes from
  `vlm_name_or_path`, a local directory (absolute or relative to the model directory) holding
  the Qwen3-VL config.json, or the hub name of the Qwen3-VL-8B backbone (this package's
  default vision and text settings);
- a Qwen3-VL config.json (`text_config`, `vision_config`, token ids) holding the release's
  fields as well.
An optional `flashdrive` object sets what the release does not carry: `prompt` fields and a
`drafter` section. Every value that cannot be mapped is reported in one ConfigError.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from flashdrive_ros.model.config import (
    ActionConfig,
    ConfigError,
    DrafterConfig,
    ExpertConfig,
    ModelConfig,
    PromptConfig,
    TextConfig,
    VisionConfig,
)
from flashdrive_ros.model.release_keys import (
    EXPERT_FIELDS,
    HF_GENERIC_KEYS,
    IN_PROJ_FIELDS,
    OWN_SECTION,
    RUNTIME_ONLY_KEYS,
    SPACE_FIELDS,
    SPACE_UNUSED,
    TEXT_FIELDS,
    TEXT_OTHER,
    TOKEN_ID_KEYS,
    TOP_MAPPED,
    VISION_FIELDS,
)

PROMPT_LAYOUTS = {"alpamayo_r1": "alpamayo-1", "alpamayo1_5": "alpamayo-1.5"}
ARCHITECTURES = {"AlpamayoR1": "alpamayo_r1", "Alpamayo1_5": "alpamayo1_5"}
QWEN3_VL_8B_NAMES = frozenset({"Qwen/Qwen3-VL-8B-Instruct", "nvidia/Cosmos-Reason2-8B"})
RELEASE_MARKERS = frozenset({"model_type", "architectures", "text_config", "vlm_name_or_path"})


@dataclass
class ReleaseConfig:
    """A release config.json: its own fields, the Qwen3-VL config of its backbone (None: the
    Qwen3-VL-8B hub backbone) and the directory that config came from."""

    raw: dict
    variant: str
    vlm: dict | None
    vlm_dir: Path | None


def is_release_config(data: dict) -> bool:
    return isinstance(data, dict) and bool(RELEASE_MARKERS & set(data))


def read_release(model_dir: str | Path) -> ReleaseConfig | None:
    """The release config of `model_dir`; None when its config.json is this package's own."""
    path = Path(model_dir) / "config.json"
    data = _read_json(path)
    return release_config(data, path.parent) if is_release_config(data) else None


def release_config(data: dict, model_dir: Path) -> ReleaseConfig:
    variant = _variant(data)
    if "text_config" in data or "vision_config" in data:
        return ReleaseConfig(data, variant, data, None)
    name = data.get("vlm_name_or_path")
    if not isinstance(name, str) or not name:
        raise ConfigError("release config.json names no backbone: it needs text_config and "
                          "vision_config, or vlm_name_or_path")
    folder = Path(name).expanduser()
    folder = folder if folder.is_absolute() else model_dir / folder
    if (folder / "config.json").is_file():
        vlm = _read_json(folder / "config.json")
        if not isinstance(vlm, dict) or "text_config" not in vlm or "vision_config" not in vlm:
            raise ConfigError(f"{folder / 'config.json'} (vlm_name_or_path) is not a "
                              f"Qwen3-VL config: it needs text_config and vision_config")
        return ReleaseConfig(data, variant, vlm, folder.resolve())
    if name in QWEN3_VL_8B_NAMES:
        return ReleaseConfig(data, variant, None, None)
    raise ConfigError(f"backbone {name!r} (vlm_name_or_path) is neither a directory with a "
                      f"Qwen3-VL config.json ({folder}; a relative path is taken from the model "
                      f"directory) nor one of {sorted(QWEN3_VL_8B_NAMES)}; point it at a local "
                      f"copy of the backbone or put its text_config and vision_config into "
                      f"config.json")


def release_model_config(data: dict, model_dir: Path) -> ModelConfig:
    """The ModelConfig of a release config.json; ConfigError listing every unmappable value."""
    rel = release_config(data, model_dir)
    problems: list[str] = []
    raw = rel.raw
    _unknown(raw, TOP_MAPPED | TOKEN_ID_KEYS | HF_GENERIC_KEYS | RUNTIME_ONLY_KEYS,
             "config.json", problems)
    if raw.get("vlm_backend", "qwenvl3") != "qwenvl3":
        problems.append(f"vlm_backend {raw['vlm_backend']!r}: only qwenvl3 (Qwen3-VL) maps")
    vision = _vision(rel, problems)
    text = _text(rel, problems)
    expert = _expert(raw.get("expert_cfg"), text, problems)
    action = _action(raw, problems)
    prompt: dict = {"layout": PROMPT_LAYOUTS[rel.variant]}
    if "tokens_per_future_traj" in raw:
        prompt["max_coc_tokens"] = raw["tokens_per_future_traj"]
    own = raw.get(OWN_SECTION, {})
    drafter = None
    if not isinstance(own, dict) or not isinstance(own.get("prompt", {}), dict):
        problems.append(f"{OWN_SECTION} and its prompt must be objects")
    else:
        _unknown(own, {"prompt", "drafter"}, OWN_SECTION, problems)
        prompt.update(own.get("prompt", {}))
        drafter = own.get("drafter")
    if problems:
        raise ConfigError(_message(problems))
    try:
        return ModelConfig(
            name=rel.variant.replace("_", "-") + "-release",
            vision=VisionConfig(**vision), text=TextConfig(**text),
            expert=ExpertConfig(**expert), action=ActionConfig(**action),
            prompt=PromptConfig(**prompt),
            drafter=None if drafter is None else DrafterConfig(**drafter))
    except (ConfigError, TypeError) as exc:
        raise ConfigError(_message([str(exc)])) from None


def _variant(data: dict) -> str:
    kind = data.get("model_type")
    for arch in data.get("architectures") or []:
        kind = ARCHITECTURES.get(arch, kind)
    if kind in PROMPT_LAYOUTS:
        return kind
    if kind == "qwen3_vl" and "traj_vocab_size" in data:
        raise ConfigError("config.json is a Qwen3-VL config with Alpamayo fields but does not "
                          "say which release: set architectures to [\"AlpamayoR1\"] or "
                          "[\"Alpamayo1_5\"]")
    if kind == "qwen3_vl":
        raise ConfigError("config.json is a plain Qwen3-VL config without the Alpamayo fields "
                          "(traj_vocab_size, expert_cfg, action_space_cfg, ...): not an "
                          "Alpamayo model")
    raise ConfigError(f"config.json model_type {kind!r} / architectures "
                      f"{data.get('architectures')!r}: not an Alpamayo release "
                      f"({sorted(PROMPT_LAYOUTS)} or qwen3_vl with the Alpamayo fields)")


def _vision(rel: ReleaseConfig, problems: list[str]) -> dict:
    if rel.vlm is None:
        return {}
    vc = _section(rel.vlm, "vision_config", problems)
    _unknown(vc, set(VISION_FIELDS) | {"rope_parameters"} | HF_GENERIC_KEYS, "vision_config",
             problems)
    out = {k: vc[k] for k in VISION_FIELDS if k in vc}
    rope = vc.get("rope_parameters") or {}
    if "rope_theta" in rope:
        out["rope_theta"] = rope["rope_theta"]
    return out


def _text(rel: ReleaseConfig, problems: list[str]) -> dict:
    out: dict = {}
    if rel.vlm is not None:
        tc = _section(rel.vlm, "text_config", problems)
        _unknown(tc, set(TEXT_FIELDS) | TEXT_OTHER | HF_GENERIC_KEYS, "text_config", problems)
        out = {k: tc[k] for k in TEXT_FIELDS if k in tc}
        rope = tc.get("rope_parameters") or tc.get("rope_scaling") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            problems.append(f"text_config rope_type {kind!r}: only the default M-RoPE maps")
        theta = rope.get("rope_theta", tc.get("rope_theta"))
        if theta is None:
            problems.append("text_config has no rope_theta")
        else:
            out["rope_theta"] = theta
        if "mrope_section" not in rope:
            problems.append("text_config rope parameters have no mrope_section")
        else:
            out["mrope_section"] = tuple(rope["mrope_section"])
        out["mrope_interleaved"] = rope.get("mrope_interleaved", True)
        if tc.get("attention_bias"):
            problems.append("text_config attention_bias true: q/k/v/o projections have no bias")
    if rel.raw.get("vocab_size") is not None:
        out["vocab_size"] = rel.raw["vocab_size"]
    tied = rel.raw.get("tie_word_embeddings", (rel.vlm or {}).get("tie_word_embeddings"))
    if tied:
        problems.append("tie_word_embeddings true: the lm_head is a separate tensor here")
    if out.get("hidden_act", "silu") != "silu":
        problems.append(f"text_config hidden_act {out['hidden_act']!r}: only silu maps")
    return out


def _expert(expert_cfg: dict | None, text: dict, problems: list[str]) -> dict:
    """The expert is the backbone's text config with `expert_cfg` overriding it."""
    try:
        base = dataclasses.asdict(TextConfig(**text))
    except (ConfigError, TypeError) as exc:
        problems.append(f"text_config: {exc}")
        return {}
    out = {k: base[k] for k in EXPERT_FIELDS if k in base}
    cfg = expert_cfg or {}
    if not isinstance(cfg, dict):
        problems.append("expert_cfg must be an object")
        return out
    rest = {k for k in cfg if not k.startswith("_")} - set(EXPERT_FIELDS) - HF_GENERIC_KEYS
    if rest:
        problems.append(f"expert_cfg keys that cannot be mapped (the expert shares the "
                        f"backbone's rotary and vocabulary settings): {sorted(rest)}")
    out.update({k: cfg[k] for k in EXPERT_FIELDS if k in cfg})
    if out.get("hidden_act", "silu") != "silu":
        problems.append(f"expert hidden_act {out['hidden_act']!r}: only silu maps")
    return out


def _action(raw: dict, problems: list[str]) -> dict:
    out: dict = {}
    if "traj_vocab_size" not in raw:
        problems.append("traj_vocab_size missing")
    else:
        out["num_traj_tokens"] = raw["traj_vocab_size"]
    per_history = raw.get("tokens_per_history_traj")
    if not isinstance(per_history, int) or per_history <= 0 or per_history % 3:
        problems.append(f"tokens_per_history_traj {per_history!r}: needs 3 tokens (x, y, z) "
                        f"per history pose")
    else:
        out["num_history"] = per_history // 3
    if raw.get("expert_non_causal_attention", True) is not True:
        problems.append("expert_non_causal_attention false: the expert here is bidirectional")
    space = _target(raw, "action_space_cfg", "UnicycleAccelCurvatureActionSpace", problems)
    _unknown(space, set(SPACE_FIELDS) | SPACE_UNUSED, "action_space_cfg", problems)
    out.update({ours: space[k] for k, ours in SPACE_FIELDS.items() if k in space})
    in_proj = _target(raw, "action_in_proj_cfg", "PerWaypointActionInProjV2", problems)
    _unknown(in_proj, set(IN_PROJ_FIELDS), "action_in_proj_cfg", problems)
    if "num_fourier_feats" not in in_proj:
        problems.append("action_in_proj_cfg lacks num_fourier_feats (its release default "
                        "differs from this package's)")
    out.update({ours: in_proj[k] for k, ours in IN_PROJ_FIELDS.items() if k in in_proj})
    out_proj = _target(raw, "action_out_proj_cfg", "torch.nn.Linear", problems)
    _unknown(out_proj, set(), "action_out_proj_cfg", problems)
    flow = _target(raw, "diffusion_cfg", "FlowMatching", problems)
    _unknown(flow, {"int_method", "num_inference_steps", "use_classifier_free_guidance",
                    "inference_guidance_weight"}, "diffusion_cfg", problems)
    if flow.get("int_method", "euler") != "euler":
        problems.append(f"diffusion_cfg int_method {flow['int_method']!r}: only euler maps")
    if flow.get("use_classifier_free_guidance"):
        problems.append("diffusion_cfg use_classifier_free_guidance: not supported")
    if "num_inference_steps" in flow:
        out["num_flow_steps"] = flow["num_inference_steps"]
    out.update(_history(raw, problems))
    return out


def _history(raw: dict, problems: list[str]) -> dict:
    """History bins from the history tokenizer; it follows the future tokenizer's bins when
    both are given (one tokenizer serves both otherwise)."""
    key = "hist_traj_tokenizer_cfg" if raw.get("hist_traj_tokenizer_cfg") else "traj_tokenizer_cfg"
    hist = _target(raw, key, "DeltaTrajectoryTokenizer", problems)
    _unknown(hist, {"num_bins", "ego_xyz_min", "ego_xyz_max", "ego_yaw_min", "ego_yaw_max",
                    "predict_yaw", "load_weights"}, key, problems)
    out: dict = {}
    if not hist:
        problems.append("no history tokenizer (hist_traj_tokenizer_cfg or traj_tokenizer_cfg)")
        return out
    if hist.get("predict_yaw"):
        problems.append(f"{key} predict_yaw: history tokens here hold x, y, z only")
    if "num_bins" in hist:
        out["history_bins"] = hist["num_bins"]
    low = [float(v) for v in hist.get("ego_xyz_min", ())]
    high = [float(v) for v in hist.get("ego_xyz_max", ())]
    if low or high:
        if (len(low), len(high)) != (3, 3) or low != [-v for v in high] or high[0] != high[1]:
            problems.append(f"{key} ego_xyz_min {low} / ego_xyz_max {high}: only ranges "
                            f"symmetric about 0 with equal x and y map")
        else:
            out["history_range_xy"], out["history_range_z"] = high[0], high[2]
    if key == "hist_traj_tokenizer_cfg" and raw.get("traj_tokenizer_cfg"):
        future = raw["traj_tokenizer_cfg"]
        if not isinstance(future, dict) or "num_bins" not in future:
            problems.append("traj_tokenizer_cfg has no num_bins (the history tokens follow "
                            "its bins)")
        else:
            out["history_token_offset"] = future["num_bins"]
    return out


def _target(raw: dict, key: str, cls: str, problems: list[str]) -> dict:
    """The fields of a `_target_` section naming class `cls` (without `_target_`)."""
    section = raw.get(key) or {}
    if not isinstance(section, dict):
        problems.append(f"{key} must be an object")
        return {}
    target = section.get("_target_", cls)
    if target != cls and not str(target).endswith("." + cls):
        problems.append(f"{key} _target_ {target!r}: only {cls} maps")
    return {k: v for k, v in section.items() if k != "_target_"}


def _section(data: dict, key: str, problems: list[str]) -> dict:
    value = data.get(key)
    if not isinstance(value, dict):
        problems.append(f"{key} missing or not an object")
        return {}
    return value


def _unknown(section: dict, known: set | frozenset, where: str, problems: list[str]) -> None:
    rest = sorted(set(section) - set(known))
    if rest:
        problems.append(f"{where}: keys that cannot be mapped: {rest}")


def _message(problems: list[str]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    return f"release config.json cannot be mapped ({len(problems)} problem(s)):\n{lines}"


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"model config not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"model config {path} is not valid JSON: {exc}") from None
