import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.kv_cache import KVCache
from flashdrive_ros.model.tokenizer import build_tokenizer
from flashdrive_ros.model.weights import (
    INDEX_FILE,
    SINGLE_FILE,
    WeightsError,
    expected_shapes,
    load_state,
    save_model_dir,
)

CORPUS = ["slow down for the pedestrian crossing ahead", "keep lane, the road is clear"] * 10


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=4400)


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    return AlpamayoModel(tiny(vocab_size=tok.vocab_size)).eval()


@pytest.fixture()
def sharded(model, tok, tmp_path):
    return save_model_dir(model, model.cfg, tok, tmp_path / "m", shard_bytes=400_000)


def _index(path):
    return json.loads((path / INDEX_FILE).read_text())["weight_map"]


def test_release_key_layout(model):
    keys = set(model.state_dict())
    for key in ("vlm.lm_head.weight", "vlm.model.language_model.embed_tokens.weight",
                "vlm.model.language_model.layers.0.self_attn.q_proj.weight",
                "vlm.model.visual.patch_embed.proj.weight",
                "expert.layers.0.self_attn.q_proj.weight", "expert.layers.3.mlp.down_proj.weight",
                "expert.layers.0.self_attn.k_norm.weight", "expert.norm.weight",
                "action_in_proj.sinus.0.freqs", "action_in_proj.sinus.1.freqs",
                "action_in_proj.timestep_fourier_encoder.freqs",
                "action_in_proj.encoder.trunk.0.weight", "action_in_proj.norm.weight",
                "action_out_proj.weight", "action_out_proj.bias", "action_space.accel_mean",
                "action_space.curvature_std"):
        assert key in keys, key
    assert not any(k.startswith("expert.embed_tokens") for k in keys)
    prefixes = {k.split(".")[0] for k in keys}
    assert prefixes == {"vlm", "expert", "action_in_proj", "action_out_proj", "action_space"}


def test_sharded_round_trip_gives_identical_model(model, sharded):
    files = set(_index(sharded).values())
    assert len(files) >= 3 and not (sharded / SINGLE_FILE).exists()
    loaded = AlpamayoModel.from_dir(sharded)
    ref = model.state_dict()
    got = loaded.state_dict()
    assert set(ref) == set(got)
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    cache = KVCache(4, 1, 2, 16, 32)
    cache.k.normal_(generator=torch.Generator().manual_seed(1))
    cache.advance_to(10)
    a = model.sample_actions(cache, 10, 2, torch.Generator().manual_seed(4), steps=3)
    b = loaded.sample_actions(cache, 10, 2, torch.Generator().manual_seed(4), steps=3)
    assert torch.equal(a, b) and a.shape == (2, 64, 2)
    traj = loaded.trajectories(a, 5.0)
    assert traj.shape == (2, 64, 3) and torch.isfinite(traj).all()


def test_single_file_and_bf16_and_missing_derivable_buffers(model, tok, tmp_path):
    path = save_model_dir(model, model.cfg, tok, tmp_path / "single")
    assert (path / SINGLE_FILE).is_file() and not (path / INDEX_FILE).exists()
    state = load_file(str(path / SINGLE_FILE))
    for key in [k for k in state if k.startswith("action_space.") or k.endswith(".freqs")]:
        del state[key]
    save_file(state, str(path / SINGLE_FILE))
    loaded = AlpamayoModel.from_dir(path, dtype=torch.bfloat16)
    assert loaded.vlm.lm_head.weight.dtype == torch.bfloat16
    assert loaded.action_in_proj.sinus[0].freqs.dtype == torch.float32
    torch.testing.assert_close(loaded.action_in_proj.sinus[0].freqs,
                               model.action_in_proj.sinus[0].freqs)
    assert float(loaded.action_space.accel_std) == model.cfg.action.accel_std


def _rewrite(path, file, edit):
    tensors = load_file(str(path / file))
    edit(tensors)
    save_file(tensors, str(path / file))


def test_missing_unexpected_and_misshaped_tensors_listed_together(model, sharded):
    weight_map = _index(sharded)
    victim = "expert.layers.1.mlp.up_proj.weight"
    grown = "action_out_proj.weight"

    def edit_victim(t):
        del t[victim]

    def edit_grown(t):
        t[grown] = torch.zeros(3, model.cfg.expert.hidden_size)
        t["expert.extra.weight"] = torch.zeros(2)

    _rewrite(sharded, weight_map[victim], edit_victim)
    _rewrite(sharded, weight_map[grown], edit_grown)
    with pytest.raises(WeightsError) as info:
        load_state(sharded, expected_shapes(model))
    msg = str(info.value)
    assert victim in msg and "lacks" in msg
    assert "action_out_proj.weight: shape (3, 64)" in msg and "(2, 64)" in msg
    assert len(info.value.problems) == 2
    index = json.loads((sharded / INDEX_FILE).read_text())
    index["weight_map"]["expert.extra.weight"] = weight_map[grown]
    del index["weight_map"][victim]
    (sharded / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(WeightsError) as info:
        load_state(sharded, expected_shapes(model))
    msg = str(info.value)
    assert "missing 1 tensor(s)" in msg and victim in msg
    assert "unexpected 1 tensor(s)" in msg and "expert.extra.weight" in msg
    assert "shape (3, 64)" in msg


def test_truncated_and_missing_shards(model, sharded):
    files = sorted(set(_index(sharded).values()))
    data = (sharded / files[0]).read_bytes()
    (sharded / files[0]).write_bytes(data[: len(data) - 100])
    (sharded / files[1]).unlink()
    with pytest.raises(WeightsError) as info:
        load_state(sharded, expected_shapes(model))
    msg = str(info.value)
    assert f"{files[0]}: truncated" in msg
    assert f"{files[1]}: shard named in the index is missing" in msg
    assert len(info.value.problems) == 2


def test_pickle_file_is_refused_without_unpickling(model, tok, tmp_path):
    path = save_model_dir(model, model.cfg, tok, tmp_path / "p")
    torch.save(model.state_dict(), path / SINGLE_FILE)
    with pytest.raises(WeightsError, match="not a safetensors file") as info:
        AlpamayoModel.from_dir(path)
    assert len(info.value.problems) == 1
    (path / SINGLE_FILE).unlink()
    with pytest.raises(WeightsError, match="no model.safetensors"):
        load_state(path)
    with pytest.raises(WeightsError, match="does not exist"):
        load_state(tmp_path / "nowhere")


def test_index_entries_outside_the_directory_are_refused(model, sharded):
    index = json.loads((sharded / INDEX_FILE).read_text())
    index["weight_map"]["action_out_proj.bias"] = "../outside.safetensors"
    (sharded / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(WeightsError, match="not a .safetensors file name") as info:
        load_state(sharded, expected_shapes(model))
    assert len(info.value.problems) == 1
