"""manifest.json of model directories: the embedded model's is complete and checked at load;
each kind of damage is refused with the file named; pickle files are refused for the drafter
too."""

import json
import shutil

import pytest
import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.manifest import (
    MANIFEST_FILE,
    read_manifest,
    verify_manifest,
    write_manifest,
)
from flashdrive_ros.model.weights import WeightsError, check_safetensors_file
from flashdrive_ros.paths import default_model_dir


@pytest.fixture()
def model_dir(tmp_path):
    return shutil.copytree(default_model_dir(), tmp_path / "model")


def problems_of(model_dir) -> str:
    with pytest.raises(WeightsError) as info:
        AlpamayoModel.from_dir(model_dir)
    return "\n".join(info.value.problems)


def test_embedded_model_manifest_lists_every_file_and_verifies():
    model_dir = default_model_dir()
    files = read_manifest(model_dir)
    on_disk = {p.name for p in model_dir.iterdir() if p.is_file() and p.name != MANIFEST_FILE}
    assert set(files) == on_disk
    assert {"model.safetensors", "drafter.safetensors", "config.json",
            "tokenizer.json"} <= on_disk
    assert verify_manifest(model_dir, required=True)


def test_intact_copy_loads(model_dir):
    assert AlpamayoModel.from_dir(model_dir).cfg.name == "embedded"


def test_missing_file_is_named(model_dir):
    (model_dir / "drafter.safetensors").unlink()
    assert "drafter.safetensors: listed in manifest.json but missing" in problems_of(model_dir)


def test_truncated_file_is_named(model_dir):
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    assert "model.safetensors: " in problems_of(model_dir)
    assert "truncated or replaced" in problems_of(model_dir)


def test_flipped_byte_of_the_same_size_is_named(model_dir):
    weights = model_dir / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert "model.safetensors: sha256 differs" in problems_of(model_dir)


def test_altered_tokenizer_is_named(model_dir):
    tokenizer = model_dir / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace('"', "'", 1))
    assert "tokenizer.json: sha256 differs" in problems_of(model_dir)


def test_unlisted_weights_file_is_named(model_dir):
    torch.save({"w": torch.zeros(2)}, model_dir / "extra.pt")
    assert "extra.pt: weights file not listed" in problems_of(model_dir)


def test_unreadable_manifest_and_paths_outside_the_directory(model_dir):
    (model_dir / MANIFEST_FILE).write_text("{not json")
    assert "manifest.json: unreadable" in problems_of(model_dir)
    (model_dir / MANIFEST_FILE).write_text(json.dumps(
        {"version": 1, "files": {"../secret": {"sha256": "0" * 64, "size": 1}}}))
    assert "'../secret' is not inside the model directory" in problems_of(model_dir)


def test_manifest_is_optional_unless_required(model_dir):
    (model_dir / MANIFEST_FILE).unlink()
    assert verify_manifest(model_dir) is False
    with pytest.raises(WeightsError, match="no manifest.json"):
        verify_manifest(model_dir, required=True)
    AlpamayoModel.from_dir(model_dir)


def test_rewritten_manifest_accepts_a_replaced_file(model_dir):
    shutil.copy(model_dir / "drafter_mrope.safetensors", model_dir / "drafter.safetensors")
    with pytest.raises(WeightsError):
        verify_manifest(model_dir)
    write_manifest(model_dir)
    assert verify_manifest(model_dir)


def test_pickled_drafter_is_refused_with_an_explanation(model_dir):
    cfg = AlpamayoModel.from_dir(model_dir).cfg
    drafter = Drafter(cfg.drafter, cfg.text)
    pickled = model_dir / "drafter.safetensors"
    torch.save(drafter.state_dict(), pickled)
    with pytest.raises(WeightsError, match="a pickle or torch.save file is not accepted"):
        drafter.load_safetensors(pickled)
    with pytest.raises(WeightsError, match="missing"):
        check_safetensors_file(model_dir / "absent.safetensors")
