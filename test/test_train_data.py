import dataclasses

import numpy as np
import pytest
import torch

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.prompt import PromptBuilder
from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.labels import DECISIONS, label_drive
from flashdrive_ros.sim.seeds import EVAL_SEEDS, TRAIN_SEEDS, is_eval_seed
from flashdrive_ros.train.dataset import IGNORE, TrainSet
from flashdrive_ros.sim.disturbance import Disturbance
from flashdrive_ros.train.generate import drive_jobs, generate_drive, run_drive_jobs
from flashdrive_ros.train.run_data import train_tokenizer

SEED = 11
SECONDS = 2.0


@pytest.fixture(scope="module")
def drive():
    return generate_drive(SEED, SECONDS, (48, 64))


@pytest.fixture(scope="module")
def data(drive):
    tokenizer = train_tokenizer(drive.coc, 120, 1000)
    cfg = tiny(tokenizer.vocab_size)
    cfg.action = dataclasses.replace(cfg.action, num_traj_tokens=1000)
    return TrainSet.build(cfg, tokenizer, [drive])


def test_seed_ranges_are_disjoint():
    assert max(TRAIN_SEEDS) < min(EVAL_SEEDS)
    assert is_eval_seed(min(EVAL_SEEDS)) and not is_eval_seed(max(TRAIN_SEEDS))


def test_drive_matches_the_simulator(drive):
    log = simulate(SEED, SECONDS)
    labels = label_drive(log.infos, log.frame_count)
    assert drive.num_steps == log.frame_count
    assert drive.coc == [label.coc for label in labels]
    assert [DECISIONS[i] for i in drive.decision] == [label.decision for label in labels]
    for k in (15, drive.num_steps - 1):
        np.testing.assert_allclose(drive.expert_future[k], log.future(k))
    assert drive.frames.shape[1:] == (4, 48, 64, 3)


def test_windows_history_ends_at_zero_and_future_is_the_expert(drive, data):
    log = simulate(SEED, SECONDS)
    assert len(data) == drive.num_steps - 15
    for row in range(len(data)):
        step = int(data.step_of[row])
        np.testing.assert_allclose(data.history[row][-1], np.zeros(4), atol=1e-12)
        np.testing.assert_allclose(data.history[row], log.history(step), atol=1e-9)
        np.testing.assert_allclose(data.future[row], log.future(step))
        frames = data.images(torch.tensor([row]))[0]  # [V, F, H, W, 3]
        np.testing.assert_array_equal(frames[:, -1].numpy(), drive.frames[step])
        np.testing.assert_array_equal(frames[:, 0].numpy(), drive.frames[step - 3])
    assert np.isfinite(data.actions.numpy()).all()
    assert abs(float(data.actions[..., 0].mean())) < 0.5


def test_batch_rows_hold_prompt_then_coc_with_shifted_labels(drive, data):
    tok = data.tokenizer
    rows = torch.tensor([0, len(data) - 1])
    batch = data.batch(rows, "cpu")
    n = data.prompt_len
    builder = PromptBuilder(data.cfg, tok)
    for i, row in enumerate(rows.tolist()):
        length = int(batch.seq_lens[i])
        ids = batch.input_ids[i, :length].tolist()
        assert ids[:n] == builder.build(data.history_ids[row].tolist()).token_ids
        assert ids[-2:] == [tok.token_id("cot_end"), tok.token_id("traj_future_start")]
        assert tok.decode(ids[n:-2]) == drive.coc[int(data.step_of[row])]
        labels = batch.labels[i]
        assert labels[n - 1:length - 1].tolist() == ids[n:]
        assert (labels[:n - 1] == IGNORE).all() and (labels[length - 1:] == IGNORE).all()
    per_window = 16 * data.cfg.tokens_per_image
    assert batch.pixel_patches.shape[0] == 2 * per_window * 4


def test_a_dropped_history_leaves_the_placeholders_and_nothing_else_changes(data):
    rows = torch.tensor([0, 1, len(data) - 1])
    kept = torch.tensor([True, False, True])
    plain = data.batch(rows, "cpu")
    dropped = data.batch(rows, "cpu", history_kept=kept)
    hist = data.builder.layout.history
    placeholder = data.tokenizer.token_id("traj_history")
    assert (dropped.input_ids[1, hist.start:hist.stop] == placeholder).all()
    assert not (plain.input_ids[1, hist.start:hist.stop] == placeholder).any()
    outside = torch.ones(plain.input_ids.shape[1], dtype=torch.bool)
    outside[hist.start:hist.stop] = False
    assert torch.equal(dropped.input_ids[:, outside], plain.input_ids[:, outside])
    assert torch.equal(dropped.input_ids[kept], plain.input_ids[kept])
    assert torch.equal(dropped.labels, plain.labels)
    assert torch.equal(dropped.actions, plain.actions)


def test_drives_made_in_parallel_come_back_in_job_order_as_made_one_by_one():
    cfg = tiny()
    jobs = (drive_jobs([5, 6, 7], 1.0, cfg)
            + drive_jobs([11, 12, 13], 1.0, cfg, disturbance=Disturbance(first_s=0.2),
                         disturbed_share=0.5, plan_futures=True))
    assert any(job[4] is not None for job in jobs) and any(job[4] is None for job in jobs[3:])
    parallel = run_drive_jobs(jobs, workers=2)
    alone = run_drive_jobs(jobs, workers=1)
    assert [d.seed for d in parallel] == [5, 6, 7, 11, 12, 13]
    for a, b in zip(parallel, alone):
        assert a.coc == b.coc
        for key in ("frames", "poses", "expert_future"):
            assert np.array_equal(getattr(a, key), getattr(b, key)), (a.seed, key)
