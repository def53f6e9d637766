"""Lamp pairs: the two drives of a pair are the same frames of a red-light wait moved back
along the ego's heading, and differ only in the ego's signal head on their last frames: the
red one stands with a stop label and a standing future, the green one has the go label and
the expert's start at the light's own green; rendered, their pictures differ only in the few
pixels of that head."""

import dataclasses

import numpy as np
import pytest

from flashdrive_ros.model.config import tiny
from flashdrive_ros.sim.drive import FUTURE_STEPS, HISTORY_STEPS, simulate
from flashdrive_ros.sim.labels import DECISIONS, label_drive
from flashdrive_ros.sim.lamp_pairs import LampPairs, pair_logs
from flashdrive_ros.sim.light_branches import red_waits
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.decision_focus import DecisionFocus, draw_weights
from flashdrive_ros.train.generate import lamp_pair_drives
from flashdrive_ros.train.run_data import train_tokenizer

SEED, SECONDS = 1000, 14.0
SPEC = LampPairs(per_wait=3, back_m=(2.0, 6.0), green_frames=(2, 2))


@pytest.fixture(scope="module")
def drive():
    return simulate(SEED, SECONDS)


@pytest.fixture(scope="module")
def pairs(drive):
    return pair_logs(drive, SPEC, np.random.default_rng(0))


def test_lamp_pair_settings_are_validated():
    for bad in ({"per_wait": -1}, {"back_m": (3.0, 1.0)}, {"back_m": (-1.0, 1.0)},
                {"last_s": 0.0}, {"green_frames": (0, 2)}, {"green_frames": (3, 2)},
                {"green_frames": (1, HISTORY_STEPS + 1)}):
        with pytest.raises(ValueError, match="LampPairs"):
            LampPairs(**bad)
    assert not LampPairs().enabled and SPEC.enabled


def test_a_pair_is_the_wait_moved_back_under_both_lamps(drive, pairs):
    wait = red_waits(drive)[0]
    assert len(pairs) == 2 * SPEC.per_wait
    gaps = []
    for red, green in zip(pairs[::2], pairs[1::2]):
        assert red.frame_count == green.frame_count == HISTORY_STEPS
        k = int(round(red.infos[-1].t * 10))
        assert wait.first <= k <= wait.last
        back = red.infos[-1].light_gap - drive.infos[k].light_gap
        assert 2.0 <= back <= 6.0
        gaps.append(back)
        moved = np.hypot(red.scenes[-1].ego.x - drive.scenes[k].ego.x,
                         red.scenes[-1].ego.y - drive.scenes[k].ego.y)
        assert moved == pytest.approx(back, abs=1e-9)
        assert [s.light_states[wait.light] for s in red.scenes] == ["red"] * HISTORY_STEPS
        assert [s.light_states[wait.light] for s in green.scenes] == (
            ["red"] * (HISTORY_STEPS - 2) + ["green"] * 2)
        assert [s.ego for s in red.scenes] == [s.ego for s in green.scenes]
        np.testing.assert_array_equal(red.ego, green.ego)
        red_label, green_label = (label_drive(log.infos, log.frame_count)[-1]
                                  for log in (red, green))
        assert red_label.decision == "stop" and green_label.decision == "keep_lane"
        np.testing.assert_array_equal(red.future(HISTORY_STEPS - 1), np.zeros((FUTURE_STEPS, 3)))
        np.testing.assert_array_equal(green.future(HISTORY_STEPS - 1),
                                      drive.future(wait.last + 1))
        assert green.future(HISTORY_STEPS - 1)[-1, 0] > 10.0
    assert len(set(gaps)) == len(gaps)


def test_a_wait_without_a_go_at_its_green_gives_no_pair(drive):
    wait = red_waits(drive)[0]
    cut = drive.cut(0, wait.last + 1)
    assert pair_logs(cut, SPEC, np.random.default_rng(0)) == []
    assert pair_logs(drive, LampPairs(), np.random.default_rng(0)) == []
    crossing = [dataclasses.replace(info, ped_gap=3.0) if wait.first <= k <= wait.last
                else info for k, info in enumerate(drive.infos)]
    blocked = dataclasses.replace(drive, infos=crossing)
    assert pair_logs(blocked, SPEC, np.random.default_rng(0)) == []


def test_the_rendered_pair_differs_only_in_the_lamp():
    cfg = tiny(512)
    spec = LampPairs(per_wait=1, green_frames=(1, 1))
    red, green = lamp_pair_drives([SEED], SECONDS, cfg, spec, workers=1)
    assert red.window_steps(cfg.prompt.num_frames, cfg.action.num_history).tolist() == [
        HISTORY_STEPS - 1]
    np.testing.assert_array_equal(red.frames[:-1], green.frames[:-1])
    np.testing.assert_array_equal(red.poses, green.poses)
    changed = np.any(red.frames[-1] != green.frames[-1], axis=-1)  # [N_cam, H, W]
    assert 0 < changed.sum() < 0.02 * changed.size
    assert DECISIONS[red.decision[-1]] == "stop"
    assert DECISIONS[green.decision[-1]] == "keep_lane"
    assert red.speed[-1] < 0.3 and green.speed[-1] < 0.3
    assert lamp_pair_drives([SEED], SECONDS, cfg, LampPairs(), workers=1) == []
    assert red.tags[-1].split(",")[-1] == green.tags[-1].split(",")[-1] == "lamp_pair"
    assert not any("lamp_pair" in tags for tags in red.tags[:-1])
    tok = train_tokenizer(red.coc + green.coc, 64, cfg.action.num_traj_tokens)
    cfg.text.vocab_size = tok.vocab_size
    data = TrainSet.build(cfg, tok, [red, green])
    assert data.lamp_pair.tolist() == [True, True]
    focus = DecisionFocus(balance=0.0, start_weight=4.0)
    weights = draw_weights(data.decision, data.v0, focus, paired=data.lamp_pair)
    assert weights.tolist() == [4.0, 4.0]
    assert draw_weights(data.decision, data.v0, focus).tolist() == [1.0, 4.0]
