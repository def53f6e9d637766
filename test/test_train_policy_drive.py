"""Policy drives (DAgger-style data): the planner drives in closed loop, each frame's label and
future are the expert's from the state the planner reached; a drive cache of them joins a
training run's drives, checked against the model's inputs and the held-out seeds."""

import dataclasses
import time

import numpy as np
import pytest

from flashdrive_ros.closed_loop.expert_planner import ExpertPlanner
from flashdrive_ros.model.config import ModelConfig
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.disturbance import Disturbance
from flashdrive_ros.sim.drive import SUBSTEPS, simulate, to_frame
from flashdrive_ros.sim.labels import label_drive
from flashdrive_ros.sim.seeds import train_seeds
from flashdrive_ros.train.drive_cache import save_drives
from flashdrive_ros.train.generate import generate_drive, generate_drives
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.policy_drive import PolicySpec, simulate_policy
from flashdrive_ros.train.recipe import smoke
from flashdrive_ros.train.run_data import fresh_data, load_extra_drives

SEED = 77


@pytest.fixture(scope="module")
def model_cfg():
    return ModelConfig.load(default_model_dir() / "config.json")


def test_with_the_expert_driving_the_futures_are_where_the_ego_goes(model_cfg):
    log, metrics = simulate_policy(SEED, 5.0, ExpertPlanner, model_cfg, latency_ms=100.0)
    assert log.frame_count == 51 and len(log.scenes) == len(log.infos) == 51
    assert log.ego.shape == (5 * 50 + 1, 7) and log.planned.shape == (51, 64, 3)
    assert metrics["collisions"] == 0
    labels = label_drive(log.infos, log.frame_count)
    assert len(labels) == 51
    errors = []
    for k in range(20, 40):
        ahead = to_frame(log.ego[k * SUBSTEPS, 1:4], log.ego[(k + 10) * SUBSTEPS, 1:4][None])[0]
        errors.append(np.hypot(*(log.future(k)[9, :2] - ahead[:2])))
    assert np.median(errors) < 0.3, f"1 s ahead the driven ego is {np.median(errors):.2f} m " \
        "from the expert future"


def test_a_model_drives_and_the_expert_labels_where_it_went(model_cfg):
    policy = PolicySpec(str(default_model_dir()), latency_ms=128.0)
    size = (model_cfg.prompt.image_height, model_cfg.prompt.image_width)
    drive = generate_drive(SEED, 4.0, size, policy=policy)
    plain = simulate(SEED, 4.0)
    assert drive.frames.shape == (41, 4, *size, 3)
    assert drive.expert_future.shape == (41, 64, 3)
    assert np.isfinite(drive.expert_future).all() and np.isfinite(drive.poses).all()
    driven = drive.speed[-1]
    assert abs(driven - plain.ego[40 * SUBSTEPS, 4]) > 1e-6, "the expert drove, not the model"
    with pytest.raises(ValueError, match="not both"):
        generate_drive(SEED, 1.0, size, disturbance=Disturbance(), policy=policy)


def test_a_policy_needs_a_model_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        PolicySpec(str(tmp_path))


def test_extra_drives_join_the_training_drives_of_a_run(tmp_path):
    recipe = smoke()
    cfg = recipe.model_config(4096)
    extra = generate_drives([50_001], recipe.drive_seconds, cfg, workers=1)
    save_drives(extra, tmp_path / "extra")
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    recipe = dataclasses.replace(recipe, extra_drives=str(tmp_path / "extra"))
    _, train, _, summary = fresh_data(tmp_path, recipe, 1, log, time.monotonic(), None)
    assert len(train) == recipe.train_drives + 1 and train[-1].seed == 50_001
    assert summary["extra_drives"] == 1 and summary["train_drive_count"] == len(train)


def test_extra_drives_of_another_image_size_or_a_held_out_seed_are_refused(tmp_path):
    cfg = smoke().model_config(4096)
    other = dataclasses.replace(cfg, prompt=dataclasses.replace(cfg.prompt, image_width=64))
    save_drives(generate_drives([50_002], 1.0, other, workers=1), tmp_path / "size")
    with pytest.raises(ValueError, match="cameras at"):
        load_extra_drives(tmp_path / "size", cfg)
    save_drives(generate_drives([1_000_001], 1.0, cfg, workers=1), tmp_path / "held_out")
    with pytest.raises(ValueError, match="held-out seed"):
        load_extra_drives(tmp_path / "held_out", cfg)


def test_extra_drives_that_repeat_the_runs_own_training_seeds_are_refused(tmp_path):
    recipe = smoke()
    (own,) = train_seeds(1, recipe.train_seed_offset)
    save_drives(generate_drives([own], 1.0, recipe.model_config(4096), workers=1),
                tmp_path / "own")
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    recipe = dataclasses.replace(recipe, extra_drives=str(tmp_path / "own"))
    with pytest.raises(ValueError, match=f"seed {own} is also one of the run's own"):
        fresh_data(tmp_path, recipe, 1, log, time.monotonic(), None)
