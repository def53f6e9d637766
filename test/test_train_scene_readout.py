"""Scene readout: the expert reads the gap to the vehicle ahead, drives and training windows
keep the lamp, both gaps, the vehicle's speed and the next tight bend per step, the classes bin
them, the head's loss, and the recipe's weight and blind share (the head beside the target trainer:
test_train_resume.py)."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from flashdrive_ros.model.config import tiny
from flashdrive_ros.sim.bends import BEND_RANGE_M, TIGHT_CURVATURE, bend_ahead
from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.lamp_pairs import moved_back
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.generate import generate_drive
from flashdrive_ros.train.pipeline_args import parse_args
from flashdrive_ros.train.recipe import Recipe
from flashdrive_ros.train.run_data import train_tokenizer
from flashdrive_ros.train.scene_readout import (
    BENDS,
    GAP_CLASSES,
    LAMPS,
    MOTIONS,
    SceneReadout,
    bend_classes,
    gap_classes,
    lamp_classes,
    motion_classes,
    readout_losses,
    scene_class_counts,
    scene_readings,
)
from flashdrive_ros.train.sensor_noise import SensorNoise

SEED = 1000003


@pytest.fixture(scope="module")
def log():
    return simulate(SEED, 20.0)


def test_the_expert_reads_the_nearest_vehicle_ahead_and_moving_back_lengthens_it(log):
    infos = log.infos
    binding = [i for i in infos if i.reason in ("lead", "vehicle")]
    assert binding, "the seed should have a vehicle holding the ego back"
    assert all(i.vehicle_gap is not None and i.vehicle_speed is not None for i in binding)
    seen = [i for i in infos if i.vehicle_gap is not None]
    assert all(-1.0 < i.vehicle_gap < 80.0 for i in seen)
    assert any(i.vehicle_gap is None for i in infos)
    back = moved_back(log, 3.0, 0.0)
    for a, b in zip(infos, back.infos):
        assert (a.vehicle_gap is None) == (b.vehicle_gap is None)
        if a.vehicle_gap is not None:
            assert b.vehicle_gap == pytest.approx(a.vehicle_gap + 3.0)


def test_the_next_tight_bend_is_read_from_the_front_bumper_and_moving_back_lengthens_it():
    log = simulate(1000024, 20.0)
    route = log.world.route
    grid = np.arange(0.0, route.length, 0.5)
    tight = grid[np.abs(route.curvature_at(grid)) >= TIGHT_CURVATURE]
    start = tight[0]
    assert route.curvature_at(start) < 0, "seed 1000024 should bend right first"
    assert bend_ahead(route, start - 20.0) == pytest.approx((20.0, -1.0), abs=0.6)
    assert bend_ahead(route, start + 1.0) == (0.0, -1.0)
    assert all(np.isnan(bend_ahead(route, start - BEND_RANGE_M - 2.0)))
    scene = scene_readings(log.infos, route)
    back = scene_readings(moved_back(log, 3.0, 0.0).infos, route)
    seen = ~np.isnan(scene[:, 4]) & (scene[:, 4] > 0) & (back[:, 4] < BEND_RANGE_M - 3.0)
    assert seen.any()
    np.testing.assert_allclose(back[seen, 4], scene[seen, 4] + 3.0, atol=1.01)


def test_readings_and_classes(log):
    scene = scene_readings(log.infos, log.world.route)
    assert scene.shape == (len(log.infos), 6)
    for info, row in zip(log.infos, scene):
        assert row[0] == LAMPS.index(info.light_state or "none")
        assert math.isnan(row[1]) == (info.light_gap is None)
        assert math.isnan(row[2]) == (info.vehicle_gap is None)
        assert math.isnan(row[3]) == (info.vehicle_speed is None)
        if info.vehicle_speed is not None:
            assert row[3] == info.vehicle_speed
    nan = math.nan
    table = torch.tensor([[1.0, 10.0, 3.0, 0.0, 0.0, -1.0], [3.0, 45.0, 6.0, 4.0, 12.0, 1.0],
                          [2.0, 39.9, 19.9, 0.49, 30.0, -1.0], [0.0, nan, 41.0, 0.0, nan, nan],
                          [1.0, -1.0, nan, nan, 9.9, 1.0]])
    assert [LAMPS[i] for i in lamp_classes(table)] == ["red", "none", "yellow", "none", "red"]
    assert [GAP_CLASSES[i] for i in gap_classes(table)] == ["0-6", "6-12", "12-20", "none",
                                                             "none"]
    assert [MOTIONS[i] for i in motion_classes(table)] == ["standing", "moving", "standing",
                                                            "none", "none"]
    counts = scene_class_counts(table)
    assert counts["lamp"] == {"none": 2, "red": 2, "yellow": 1, "green": 0}
    assert sum(counts["gap"].values()) == 5
    assert counts["motion"] == {"none": 2, "standing": 2, "moving": 1}
    assert [BENDS[i] for i in bend_classes(table)] == ["right 0-10", "left 10-25", "right 25-45",
                                                        "none", "left 0-10"]
    assert counts["bend"]["none"] == 1 and sum(counts["bend"].values()) == 5


def test_the_loss_and_hits_of_the_head():
    torch.manual_seed(0)
    readout = SceneReadout(8)
    hidden = torch.randn(4, 8)
    nan = math.nan
    scene = torch.tensor([[1.0, 10.0, 3.0, 0.0, 4.0, 1.0], [0.0, nan, nan, nan, nan, nan],
                          [3.0, 5.0, 30.0, 7.0, nan, nan], [0.0, nan, 50.0, 0.0, 0.0, -1.0]])
    out = readout_losses(readout, hidden, scene)
    lamp_logits, gap_logits, motion_logits, bend_logits = readout(hidden)
    assert motion_logits.shape == (4, len(MOTIONS)) and bend_logits.shape == (4, len(BENDS))
    ce = torch.nn.functional.cross_entropy
    want = (ce(lamp_logits, lamp_classes(scene)) + ce(gap_logits, gap_classes(scene))
            + ce(motion_logits, motion_classes(scene)) + ce(bend_logits, bend_classes(scene))) / 4
    torch.testing.assert_close(out["readout_loss"], want)
    assert torch.isnan(out["lamp_hit"][[1, 3]]).all() and not torch.isnan(
        out["lamp_hit"][[0, 2]]).any()
    assert torch.isnan(out["motion_hit"][[1, 3]]).all() and not torch.isnan(
        out["motion_hit"][[0, 2]]).any()
    assert set(out["gap_hit"].tolist()) <= {0.0, 1.0}
    assert torch.isnan(out["bend_hit"][[1, 2]]).all() and not torch.isnan(
        out["bend_hit"][[0, 3]]).any()


def test_training_windows_keep_the_readings_of_their_step():
    drive = generate_drive(SEED, 2.2, (48, 64), SensorNoise())
    assert drive.scene.shape == (drive.num_steps, 6)
    tokenizer = train_tokenizer(drive.coc * 4, 120, 1000)
    cfg = tiny(tokenizer.vocab_size)
    cfg.action = dataclasses.replace(cfg.action, num_traj_tokens=1000)
    data = TrainSet.build(cfg, tokenizer, [drive])
    steps = drive.window_steps(cfg.prompt.num_frames, cfg.action.num_history)
    np.testing.assert_array_equal(data.scene.numpy(), drive.scene[steps].astype(np.float32))
    batch = data.batch(torch.tensor([2, 0]), "cpu")
    torch.testing.assert_close(batch.scene, data.scene[[2, 0]], equal_nan=True)


def test_the_recipe_and_command_line_carry_the_weight():
    assert Recipe().scene_weight == 0.0
    _, recipe = parse_args(["--out", "x", "--scene-weight", "0.5"])
    assert recipe.scene_weight == 0.5
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="scene_weight"):
            Recipe(scene_weight=bad)
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--scene-weight", "-1"])
    _, recipe = parse_args(["--out", "x", "--scene-weight", "0.5", "--readout-blind", "0.25"])
    assert recipe.readout_blind == 0.25
    with pytest.raises(ValueError, match="readout_blind"):
        Recipe(readout_blind=0.25)
    with pytest.raises(ValueError, match="readout_blind"):
        Recipe(scene_weight=1.0, history_dropout=0.5, readout_blind=0.5)
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--readout-blind", "0.25"])
