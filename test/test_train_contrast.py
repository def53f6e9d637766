"""Contrasts of the lead-stop forks: the same windows as the fork's own (pictures, history)
under the CoC and future of the expert driving the world without the standing car. They join
the training set as windows of their own whose CoC carries no labels, so they train the
action expert alone, and only their words tell them from the fork's own windows."""

import dataclasses

import numpy as np
import pytest
import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.sim.labels import DECISIONS
from flashdrive_ros.sim.lead_stops import LeadStops
from flashdrive_ros.train.dataset import IGNORE, TrainSet
from flashdrive_ros.train.drive import Drive
from flashdrive_ros.train.drive_cache import load_drives, save_drives
from flashdrive_ros.train.generate import lead_stop_drives
from flashdrive_ros.train.pipeline_args import parse_args
from flashdrive_ros.train.run_data import train_tokenizer
from flashdrive_ros.train.streaming_tune import sequence_ends
from flashdrive_ros.train.target_losses import target_step_losses

SEED, SECONDS = 3, 60.0
SPEC = LeadStops(per_drive=1, max_s=4.0, contrast=True)


@pytest.fixture(scope="module")
def drives():
    cfg = tiny(512)
    (plain,) = lead_stop_drives([SEED], SECONDS, cfg, dataclasses.replace(SPEC, contrast=False),
                                workers=1, standing_lead=True)
    (contrasted,) = lead_stop_drives([SEED], SECONDS, cfg, SPEC, workers=1, standing_lead=True)
    return plain, contrasted


@pytest.fixture(scope="module")
def data(drives):
    drive = drives[1]
    tokenizer = train_tokenizer((drive.coc + drive.contrast_coc) * 4, 120, 1000)
    cfg = tiny(tokenizer.vocab_size)
    cfg.action = dataclasses.replace(cfg.action, num_traj_tokens=1000)
    return TrainSet.build(cfg, tokenizer, [drive])


def test_contrasts_are_the_drive_without_the_standing_car(drives):
    plain, drive = drives
    assert plain.contrast_step.size == 0 and plain.contrast_coc == []
    assert np.array_equal(plain.frames, drive.frames) and plain.coc == drive.coc
    assert np.array_equal(plain.expert_future, drive.expert_future)
    steps = drive.contrast_step
    assert steps.size >= 20 and np.all(np.diff(steps) > 0)
    assert np.all(drive.speed[steps] >= 1.0)
    own = drive.expert_future[steps, -1, 0]  # own: [C] travel of the fork's own futures
    other = drive.contrast_future[:, -1, 0]  # other: [C] travel without the car
    assert np.all(other > own + 5.0), (own, other)
    assert {DECISIONS[d] for d in drive.decision[steps]} == {"stop"}
    assert "stop" not in {DECISIONS[d] for d in drive.contrast_decision}
    assert all(not text.startswith("Stop") for text in drive.contrast_coc)


def test_contrast_settings_are_validated():
    with pytest.raises(ValueError, match="contrast"):
        LeadStops(contrast=True)
    _, recipe = parse_args(["--out", "x", "--lead-stops", "2", "--lead-stop-contrast", "on"])
    assert recipe.lead_stops == LeadStops(per_drive=2, contrast=True)
    with pytest.raises(SystemExit):
        parse_args(["--out", "x", "--lead-stop-contrast", "on"])


def test_a_drive_checks_its_contrasts(drives):
    drive = drives[1]
    with pytest.raises(ValueError, match="contrast"):
        dataclasses.replace(drive, contrast_coc=drive.contrast_coc[1:])
    with pytest.raises(ValueError, match="contrast steps"):
        dataclasses.replace(drive, contrast_step=drive.contrast_step[::-1].copy())


def test_the_drive_cache_keeps_the_contrasts_and_reads_caches_without_them(drives, tmp_path):
    plain, drive = drives
    save_drives([drive, plain], tmp_path)
    back, back_plain = load_drives(tmp_path)
    assert np.array_equal(back.contrast_step, drive.contrast_step)
    assert back.contrast_coc == drive.contrast_coc
    assert np.array_equal(back.contrast_decision, drive.contrast_decision)
    assert np.array_equal(back.contrast_future, drive.contrast_future)
    assert back_plain.contrast_step.size == 0
    older = {key: getattr(plain, key) for key in ("frames", "stamps", "poses", "speed",
                                                   "decision", "expert_future", "scene")}
    assert Drive(plain.seed, plain.scenario, plain.dt, coc=plain.coc, tags=plain.tags,
                 **older).contrast_coc == []


def test_contrast_windows_share_the_pictures_and_history_and_carry_no_coc_labels(drives, data):
    drive = drives[1]
    own, other = ~data.contrast, data.contrast
    first = drive.window_steps(data.cfg.prompt.num_frames, data.cfg.action.num_history)[0]
    assert int(other.sum()) == int((drive.contrast_step >= first).sum()) > 0
    assert not own[np.argmax(other):].any(), "contrast windows come after the drive's own"
    for row in np.flatnonzero(other):
        (twin,) = np.flatnonzero(own & (data.step_of == data.step_of[row]))
        assert torch.equal(data.frame_index[row], data.frame_index[twin])
        assert np.array_equal(data.history[row], data.history[twin])
        assert not torch.equal(data.coc_ids[row], data.coc_ids[twin])
        assert not torch.allclose(data.actions[row], data.actions[twin])
    rows = torch.as_tensor(np.flatnonzero(other)[:3])
    ids, labels, _ = data.token_rows(rows)
    assert (labels == IGNORE).all()
    coc = ids[:, data.prompt_len:]
    assert (coc == data.coc_ids[rows, :coc.shape[1]]).all()
    _, own_labels, _ = data.token_rows(torch.as_tensor(np.flatnonzero(own)[:3]))
    assert (own_labels != IGNORE).any(dim=1).all()


def _losses(data, rows):
    torch.manual_seed(0)
    model = AlpamayoModel(data.cfg)
    batch = data.batch(torch.as_tensor(rows), "cpu")
    losses = target_step_losses(model, batch, data.image_token_id, torch.float32,
                                torch.Generator().manual_seed(1))
    return model, losses


def test_contrast_windows_train_the_action_expert_alone(data):
    own = np.flatnonzero(~data.contrast)[-3:]
    other = np.flatnonzero(data.contrast)[:3]
    _, alone = _losses(data, own)
    _, mixed = _losses(data, np.concatenate([own, other]))
    torch.testing.assert_close(mixed["coc_loss"], alone["coc_loss"], rtol=1e-5, atol=1e-6)
    model, contrast_only = _losses(data, other)
    assert float(contrast_only["coc_loss"].detach()) == 0.0
    assert float(contrast_only["flow_loss"].detach()) > 0.0
    (contrast_only["coc_loss"] + contrast_only["flow_loss"]).backward()
    assert model.expert.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0
    assert model.vlm.language_model.layers[0].self_attn.k_proj.weight.grad.abs().sum() > 0


def test_later_stages_draw_no_contrast_window(data):
    other = np.flatnonzero(data.contrast)
    own = data.own_rows()
    assert len(own) + len(other) == len(data) and not data.contrast[own.numpy()].any()
    runs = np.flatnonzero((np.diff(data.step_of[other]) == 1)
                          & (data.drive_of[other][1:] == data.drive_of[other][:-1]))
    assert runs.size > 0, "contrast windows of consecutive steps would pass as sequences"
    for length in (1, 2, 3):
        ends = sequence_ends(data, torch.arange(len(data)), length)
        assert len(ends) > 0 and not data.contrast[ends.numpy()].any()
