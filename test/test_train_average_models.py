"""Averaging fine-tuned model directories: the weighted mean of every tensor in its dtype, the
first model's other files and summary, a manifest that verifies and a model that loads; a part's
own weights; refusals for models of another config, tokenizer or tensor layout, for bad weights
and for parts the models do not have."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.model.manifest import verify_manifest
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.train.average_models import (
    main,
    parse_part_weights,
    parse_weights,
    part_of,
    write_average,
)


@pytest.fixture()
def two_models(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(default_model_dir(), first)
    shutil.copytree(default_model_dir(), second)
    state = load_file(second / "model.safetensors")
    save_file({k: v + 1.0 if v.is_floating_point() else v for k, v in state.items()},
              second / "model.safetensors", metadata={"format": "pt"})
    return first, second


def test_the_average_is_the_weighted_mean_and_loads_as_a_model(two_models, tmp_path):
    first, second = two_models
    write_average([first, second], [0.75, 0.25], tmp_path / "soup")
    model = tmp_path / "soup" / "model"
    got, base = load_file(model / "model.safetensors"), load_file(first / "model.safetensors")
    shifted = load_file(second / "model.safetensors")
    assert got.keys() == base.keys()
    for key, tensor in base.items():
        assert got[key].dtype == tensor.dtype
        if tensor.is_floating_point():
            mean = 0.75 * tensor.double() + 0.25 * shifted[key].double()
            assert torch.equal(got[key], mean.to(tensor.dtype))
            if tensor.dtype == torch.float32:
                torch.testing.assert_close(got[key], tensor + 0.25, atol=1e-4, rtol=1e-6)
        else:
            assert torch.equal(got[key], tensor)
    assert (model / "drafter.safetensors").read_bytes() == \
        (first / "drafter.safetensors").read_bytes()
    assert not (model / "train_summary.json").exists()
    summary = json.loads((tmp_path / "soup" / "summary.json").read_text())
    assert summary["averaged"]["weights"] == [0.75, 0.25]
    assert "target" in summary, "the first model's training summary is kept"
    assert verify_manifest(model, required=True)
    engine = Engine.load(model, EngineConfig(device="cpu", dtype="float32"))
    assert engine is not None


def test_models_of_another_config_tokenizer_or_layout_are_refused(two_models, tmp_path):
    first, second = two_models
    config = json.loads((second / "config.json").read_text())
    (second / "config.json").write_text(json.dumps({**config, "extra": 1}))
    with pytest.raises(ValueError, match="config.json differs"):
        write_average([first, second], [0.5, 0.5], tmp_path / "a")
    shutil.copyfile(first / "config.json", second / "config.json")
    state = load_file(second / "model.safetensors")
    state.pop(next(iter(state)))
    save_file(state, second / "model.safetensors")
    with pytest.raises(ValueError, match="other tensors"):
        write_average([first, second], [0.5, 0.5], tmp_path / "b")
    with pytest.raises(SystemExit):
        main(["--model-dir", str(first), "--out", str(tmp_path / "c")])


@pytest.mark.parametrize("text", ["1", "1,-1", "0.5,x"])
def test_bad_weights_are_refused(text):
    with pytest.raises(ValueError):
        parse_weights(text, 2)


def test_weights_are_normalised_and_default_to_equal():
    assert parse_weights("3,1", 2) == [0.75, 0.25]
    assert parse_weights("", 4) == [0.25] * 4


def test_a_part_takes_its_own_weights(two_models, tmp_path):
    first, second = two_models
    main(["--model-dir", str(first), "--model-dir", str(second), "--weights", "1,1",
          "--part-weights", "vlm=3,1", "--out", str(tmp_path / "soup")])
    model = tmp_path / "soup" / "model"
    got, base = load_file(model / "model.safetensors"), load_file(first / "model.safetensors")
    parts = {part_of(key) for key in base}
    assert {"vlm", "expert"} <= parts
    for key, tensor in base.items():
        if tensor.dtype != torch.float32:
            continue
        shift = 0.25 if part_of(key) == "vlm" else 0.5
        torch.testing.assert_close(got[key], tensor + shift, atol=1e-4, rtol=1e-6)
    summary = json.loads((tmp_path / "soup" / "summary.json").read_text())
    assert summary["averaged"]["part_weights"] == {"vlm": [0.75, 0.25]}
    assert verify_manifest(model, required=True)


def test_parts_the_models_do_not_have_are_refused(two_models, tmp_path):
    first, second = two_models
    with pytest.raises(ValueError, match="no part 'vision'"):
        write_average([first, second], [0.5, 0.5], tmp_path / "a", {"vision": [0.5, 0.5]})
    with pytest.raises(SystemExit):
        main(["--model-dir", str(first), "--model-dir", str(second), "--part-weights",
              "vlm.layers=1,1", "--out", str(tmp_path / "b")])


@pytest.mark.parametrize("items", [["vlm"], ["=1,1"], ["vlm=1"], ["vlm=1,1", "vlm=1,2"]])
def test_bad_part_weights_are_refused(items):
    with pytest.raises(ValueError):
        parse_part_weights(items, 2)
