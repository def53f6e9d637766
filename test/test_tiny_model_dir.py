"""The tiny model directory that the node, replay and training tests load."""

from helpers.tiny_model import make_tiny_model_dir

from flashdrive_ros.engine.config import DRAFTER_FILE


def test_tiny_model_dir_is_complete(tmp_path):
    path = make_tiny_model_dir(tmp_path / "m")
    assert {"config.json", "tokenizer.json", DRAFTER_FILE} <= {p.name for p in path.iterdir()}
