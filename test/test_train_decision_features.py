"""Decision features: the hidden state at the last prompt token of real lamp-pair windows, per
decoder layer, and the command that fits the lamp reader on the first seeds and tests on the
rest."""

import json

import numpy as np
import pytest
from helpers.tiny_model import make_sim_sized_model_dir

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.release_tokenizer import load_tokenizer
from flashdrive_ros.sim.lamp_pairs import LampPairs
from flashdrive_ros.train.decision_features import FINAL, decision_states, main
from flashdrive_ros.train.generate import lamp_pair_drives
from flashdrive_ros.train.scene_readout import LAMPS


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_sim_sized_model_dir(tmp_path_factory.mktemp("model") / "model")


def test_states_per_layer_at_the_last_prompt_token_of_each_pair(model_dir):
    model = AlpamayoModel.from_dir(model_dir).eval()
    spec = LampPairs(per_wait=2, green_frames=(1, 1))
    drives = lamp_pair_drives([1000100], 16.0, model.cfg, spec, workers=1)
    assert len(drives) == 4
    states, scene = decision_states(model, load_tokenizer(model_dir), drives, "cpu",
                                    batch_size=3)
    layers = model.cfg.text.num_hidden_layers
    assert list(states) == [*map(str, range(layers)), FINAL]
    assert all(v.shape == (4, model.cfg.text.hidden_size) for v in states.values())
    assert scene[:, 0].tolist() == [LAMPS.index("red"), LAMPS.index("green")] * 2
    assert np.array_equal(scene[0::2, 1], scene[1::2, 1]) and (scene[:, 1] > 0).all()
    red, green = states[FINAL][0::2], states[FINAL][1::2]
    assert not np.allclose(red, green)
    again, _ = decision_states(model, load_tokenizer(model_dir), drives[:2], "cpu")
    np.testing.assert_allclose(again[FINAL], states[FINAL][:2], rtol=1e-4, atol=1e-5)


def test_the_command_reads_the_pairs_of_held_out_drives(model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--model-dir", str(model_dir), "--out", str(out), "--drives", "4",
                 "--first-seed", "1000100", "--seconds", "16", "--pairs-per-wait", "2",
                 "--workers", "1"]) == 0
    report = json.loads((out / "decision_features.json").read_text())
    assert report["train_seeds"] == [1000100, 1000101]
    assert report["train_pairs"] >= 2
    summaries = report["summaries"]
    assert FINAL in summaries and "0" in summaries
    assert len({sum(s["pairs"] for s in rows) for rows in summaries.values()}) == 1
    assert "Decision features" in capsys.readouterr().out
    for bad in (["--train-share", "1"], ["--first-seed", "5"], ["--l2", "-1"]):
        with pytest.raises(SystemExit):
            main(["--model-dir", str(model_dir), "--out", str(out), *bad])
