"""Lamp features: the linear reader finds a colour direction that is there and not one that is
not, the summary scores pairs per gap, and the command fits on the first seeds' lamp pairs
through a real vision encoder and tests on the rest."""

import json

import numpy as np
import pytest
from helpers.tiny_model import make_sim_sized_model_dir

from flashdrive_ros.eval.lamp_features import fit_lamp_reader, main, reader_scores, summarize


def _pairs(rng: np.random.Generator, count: int, signal: float) -> np.ndarray:
    """[2 * count, 64] features: a shared scene per pair, green adds `signal` on column 3."""
    scenes = rng.normal(size=(count, 64))
    lamp = np.zeros(64)
    lamp[3] = signal
    return np.stack([scenes, scenes + lamp], axis=1).reshape(2 * count, 64)


def test_the_reader_finds_the_lamp_direction_only_where_there_is_one():
    rng = np.random.default_rng(0)
    for signal, lowest, highest in ((0.5, 0.99, 1.0), (0.0, 0.0, 0.7)):
        reader = fit_lamp_reader(_pairs(rng, 200, signal), l2=1e-3)
        test = _pairs(rng, 200, signal)
        scores = reader_scores(test, reader)
        share = float(np.mean(scores[1::2] > scores[0::2]))
        assert lowest <= share <= highest


def test_the_summary_scores_pairs_per_gap():
    scores = np.array([-1.0, 1.0, 0.5, 2.0, 1.0, -1.0])
    summary = summarize(scores, np.array([1.0, 2.0, 8.0]))
    assert summary[0] == {"gap_m": [0.0, 3.0], "pairs": 2, "pairwise": 1.0, "both_right": 0.5}
    assert summary[3] == {"gap_m": [7.0, 9.0], "pairs": 1, "pairwise": 0.0, "both_right": 0.0}
    assert summary[1]["pairs"] == 0 and summary[1]["pairwise"] is None


def test_the_command_reads_the_pairs_of_held_out_drives(tmp_path, capsys):
    model = make_sim_sized_model_dir(tmp_path / "model")
    out = tmp_path / "out"
    assert main(["--model-dir", str(model), "--out", str(out), "--drives", "4",
                 "--first-seed", "1000100", "--seconds", "16", "--pairs-per-wait", "2"]) == 0
    report = json.loads((out / "lamp_features.json").read_text())
    assert report["train_seeds"] == [1000100, 1000101]
    assert report["test_seeds"] == [1000102, 1000103]
    assert report["train_pairs"] == 2
    assert sum(s["pairs"] for s in report["summary"]) == 2
    assert "Lamp features" in capsys.readouterr().out
    assert (out / "lamp_features.md").exists()
    for bad in (["--train-share", "1"], ["--first-seed", "5"], ["--pairs-per-wait", "0"]):
        with pytest.raises(SystemExit):
            main(["--model-dir", str(model), "--out", str(out), *bad])
