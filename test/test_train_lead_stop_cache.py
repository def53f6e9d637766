"""The lead-stop cache command: the forks of many training seeds as a drive cache that a
training run takes with --extra-drives."""

import pytest

from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.sim.labels import DECISIONS
from flashdrive_ros.train.drive_cache import INDEX
from flashdrive_ros.train.lead_stop_cache import main
from flashdrive_ros.train.run_data import load_extra_drives
from helpers.tiny_model import make_sim_sized_model_dir

SEED = 3  # training seed index whose 60 s drive has a clear straight stretch to place a car


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_sim_sized_model_dir(tmp_path_factory.mktemp("model"))


def test_the_forks_of_the_seeds_are_a_drive_cache_a_training_run_takes(model_dir, tmp_path,
                                                                        capsys):
    out = tmp_path / "forks"
    args = ["--out", str(out), "--model-dir", str(model_dir), "--seeds", "1",
            "--seed-offset", str(SEED), "--per-drive", "1", "--workers", "1"]
    assert main(args) == 0
    assert "1 forks" in capsys.readouterr().out
    cfg = ModelConfig.load(model_dir / "config.json")
    (drive,) = load_extra_drives(out, cfg)
    assert drive.seed == SEED and drive.contrast_step.size == 0
    assert drive.frames.shape[2:4] == (cfg.prompt.image_height, cfg.prompt.image_width)
    stops = [k for k, d in enumerate(drive.decision) if DECISIONS[d] == "stop"]
    assert stops and any(" behind the " in drive.coc[k] for k in stops)
    assert "seeds 3..3" in (out / "coverage.md").read_text()
    with pytest.raises(SystemExit):
        main(args)


def test_bad_settings_and_seeds_without_stops_are_refused(model_dir, tmp_path, capsys):
    base = ["--model-dir", str(model_dir), "--seed-offset", str(SEED)]
    for bad in (["--seeds", "0"], ["--seeds", "1", "--per-drive", "0"],
                ["--seeds", "1", "--seed-offset", "99999999"],
                ["--seeds", "1", "--model-dir", str(tmp_path / "none")]):
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "bad"), *base, *bad])
    out = tmp_path / "short"
    assert main(["--out", str(out), *base, "--seeds", "1", "--seconds", "10",
                 "--workers", "1"]) == 1
    assert "no lead stop" in capsys.readouterr().err
    assert not (out / INDEX).exists()
