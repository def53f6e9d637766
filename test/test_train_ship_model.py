"""Shipping a run's model: files and summary copied, stale files gone, the drafter set to its
decoding block, a manifest that verifies, refusals for an incomplete run."""

import json
import shutil

import pytest

from flashdrive_ros.model.drafter_weights import read_drafter_file
from flashdrive_ros.model.manifest import verify_manifest
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.train.ship_model import SUMMARY_FILE, main, ship


@pytest.fixture()
def run_dir(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(default_model_dir(), run / "model")
    (run / "model" / SUMMARY_FILE).unlink()
    (run / "summary.json").write_text(json.dumps({"target": {"steps": 7}}))
    return run


def test_a_shipped_model_holds_the_run_with_its_drafter_at_the_decoding_block(run_dir, tmp_path):
    target = tmp_path / "shipped"
    target.mkdir()
    (target / "stale.safetensors").write_bytes(b"old")
    ship(run_dir, target, drafter_block=12)
    assert not (target / "stale.safetensors").exists()
    assert json.loads((target / SUMMARY_FILE).read_text()) == {"target": {"steps": 7}}
    assert read_drafter_file(target / "drafter.safetensors")[1].block_size == 12
    source_tensors = read_drafter_file(run_dir / "model" / "drafter.safetensors")[0]
    shipped_tensors = read_drafter_file(target / "drafter.safetensors")[0]
    assert all(shipped_tensors[k].equal(v) for k, v in source_tensors.items())
    assert verify_manifest(target, required=True)
    assert (target / "model.safetensors").read_bytes() == \
        (run_dir / "model" / "model.safetensors").read_bytes()


def test_an_incomplete_run_is_refused(run_dir, tmp_path):
    (run_dir / "summary.json").unlink()
    with pytest.raises(FileNotFoundError, match="summary.json"):
        ship(run_dir, tmp_path / "shipped")
    with pytest.raises(FileNotFoundError, match="config.json"):
        ship(tmp_path / "nothing", tmp_path / "shipped")
    with pytest.raises(SystemExit):
        main(["--run-dir", str(run_dir), "--to", str(tmp_path / "x"), "--drafter-block", "1"])
