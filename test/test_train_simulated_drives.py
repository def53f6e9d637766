import dataclasses
import json

import numpy as np
import pytest

from flashdrive_ros.train.drive_cache import ARRAYS
from flashdrive_ros.train.log import TrainLog, read_log
from flashdrive_ros.train.pipeline import main
from flashdrive_ros.train.recipe import smoke
from flashdrive_ros.train.run_data import (
    SIMULATED_JSON,
    assemble_data,
    fresh_data,
    load_simulated,
)

CPU = ["--device", "cpu", "--workers", "2"]


@pytest.fixture(scope="module")
def data_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    assert main(["--out", str(out), "--smoke", "--lamp-pairs", "1", "--stages", "data",
                 *CPU]) == 0
    return out


def test_the_data_stage_writes_drives_and_no_model(data_run):
    assert (data_run / "drives" / SIMULATED_JSON).is_file()
    assert not (data_run / "model").exists()
    summary = json.loads((data_run / "summary.json").read_text())
    assert summary["calls"] == [{"stages": "data", "seconds": summary["seconds"]}]
    assert summary["train_drive_count"] == 2 + summary["lamp_pair_drives"]
    assert summary["eval_drive_count"] == 1 and summary["frames"] > 0


def test_read_back_drives_are_the_drives_a_run_simulates(data_run, tmp_path):
    recipe = dataclasses.replace(smoke(), lamp_pairs=dataclasses.replace(
        smoke().lamp_pairs, per_wait=1))
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    (tmp_path / "fresh").mkdir()
    fresh = fresh_data(tmp_path / "fresh", recipe, 2, log, 0.0, None)
    read = assemble_data(tmp_path, recipe, load_simulated(data_run / "drives", recipe, 0), log,
                         0.0, None)
    assert read[0].tokenizer.get_vocab() == fresh[0].tokenizer.get_vocab()
    assert read[3] == fresh[3]
    for ours, theirs in zip(read[1] + read[2], fresh[1] + fresh[2], strict=True):
        assert (ours.seed, ours.scenario, ours.coc, ours.tags) == (
            theirs.seed, theirs.scenario, theirs.coc, theirs.tags)
        for key in ARRAYS:
            np.testing.assert_array_equal(getattr(ours, key), getattr(theirs, key), key)


def test_a_run_trains_on_the_read_back_drives(data_run, tmp_path):
    out = tmp_path / "run"
    assert main(["--out", str(out), "--smoke", "--lamp-pairs", "1", "--drives-from",
                 str(data_run), "--stages", "target", "--target-call-steps", "1", *CPU]) == 0
    stages = [r["stage"] for r in read_log(out / "train_log.jsonl")]
    assert "drives_from" in stages and "simulated" not in stages and "target" in stages
    summary = json.loads((out / "summary.json").read_text())
    assert summary["drives_from"] == str(data_run)
    assert summary["train_drive_count"] == json.loads(
        (data_run / "summary.json").read_text())["train_drive_count"]


def test_drives_of_another_recipe_or_none_are_refused(data_run, tmp_path, capsys):
    assert main(["--out", str(tmp_path / "a"), "--smoke", "--drives-from", str(data_run),
                 *CPU]) == 2
    assert "differs in ['lamp_pairs']" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "b"), "--smoke", "--lamp-pairs", "1",
                 "--train-seed-offset", "4", "--seed", "3", "--drives-from", str(data_run),
                 *CPU]) == 2
    assert "differs in ['train_seed_offset', 'seed']" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "c"), "--smoke", "--drives-from", str(tmp_path),
                 *CPU]) == 2
    assert "no simulated drives" in capsys.readouterr().err
    for bad in (["--stages", "data", "--drives-from", str(data_run)],
                ["--resume", str(data_run), "--drives-from", str(data_run)]):
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "d"), *bad])
