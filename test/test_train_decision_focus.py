import contextlib
import dataclasses

import numpy as np
import pytest
import torch

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.sim.labels import DECISION_WORDS, DECISIONS, template_sentences
from flashdrive_ros.train.dataset import IGNORE, TrainSet
from flashdrive_ros.train.decision_focus import (
    PLAIN,
    DecisionFocus,
    decision_shares,
    decisive_lengths,
    draw_weights,
    hard_brakes,
    row_weights,
    start_share,
    starts_from_rest,
)
from flashdrive_ros.train.generate import generate_drive
from flashdrive_ros.train.log import TrainLog
from flashdrive_ros.train.pipeline import main, parse_args
from flashdrive_ros.train.run_data import train_tokenizer
from flashdrive_ros.train.target_losses import coc_loss, run_backbone, target_step_losses
from flashdrive_ros.train.target_train import train_target

FOLLOW = "Follow the slower car ahead and keep a safe distance in the lane"
TURN = "Follow the road as it turns sharply to the left and stay in the lane"


def test_decisive_lengths_end_where_one_decision_is_left():
    coc = [[1, 2, 3, 9], [1, 2, 4, 9], [1, 5, 6], [7], [1, 2, 3, 9]]
    decisions = [0, 1, 0, 2, 0]
    assert decisive_lengths(coc, decisions).tolist() == [3, 3, 2, 1, 3]
    assert decisive_lengths([[1, 2], [1, 2]], [0, 1]).tolist() == [2, 2]
    with pytest.raises(ValueError, match="decisions"):
        decisive_lengths([[1]], [0, 1])


def test_every_label_sentence_names_its_decision_with_its_first_word():
    sentences = template_sentences()
    assert {d for _, d in sentences} == set(DECISIONS) == set(DECISION_WORDS)
    assert all(s.split()[0] == DECISION_WORDS[d] for s, d in sentences)
    vocab: dict[str, int] = {}
    words = [[vocab.setdefault(w, len(vocab)) for w in s.split()] for s, _ in sentences]
    lengths = decisive_lengths(words, [DECISIONS.index(d) for _, d in sentences])
    assert lengths.tolist() == [1] * len(sentences)


def test_focus_settings_are_validated():
    assert DecisionFocus().token_weight > 1.0 and 0.0 < DecisionFocus().balance <= 1.0
    for bad in ({"token_weight": 0.5}, {"token_weight": float("nan")}, {"balance": -0.1},
                {"balance": 1.5}, {"start_weight": 0.5}, {"start_weight": float("inf")},
                {"side_weight": 0.9}, {"side_weight": float("nan")}, {"brake_weight": 0.0},
                {"brake_weight": float("inf")}):
        with pytest.raises(ValueError, match="DecisionFocus"):
            DecisionFocus(**bad)
    for flag, value in (("--decision-balance", "2"), ("--start-weight", "0.5"),
                        ("--side-weight", "0"), ("--brake-weight", "0.5")):
        with pytest.raises(SystemExit) as exit_info:
            main(["--out", "unused", "--smoke", flag, value])
        assert exit_info.value.code == 2
    assert parse_args(["--out", "o", "--start-weight", "4"])[1].decision.start_weight == 4.0
    assert parse_args(["--out", "o", "--side-weight", "3"])[1].decision.side_weight == 3.0
    assert parse_args(["--out", "o", "--brake-weight", "4"])[1].decision.brake_weight == 4.0
    assert DecisionFocus(balance=0.0, brake_weight=2.0).uniform is False
    assert DecisionFocus().uniform is False and PLAIN.uniform


def test_balance_moves_the_drawn_decision_shares_towards_equal():
    decision = np.array([0] * 900 + [2] * 100)
    speed = np.full(1000, 5.0)
    names = ("stop", "slow", "follow")

    def shares(balance):
        return decision_shares(decision, speed, DecisionFocus(balance=balance), names)

    assert shares(0.0) == {"stop": 0.9, "slow": 0.0, "follow": 0.1}
    assert shares(1.0) == {"stop": 0.5, "slow": 0.0, "follow": 0.5}
    assert shares(0.5)["follow"] == 0.25
    gen = torch.Generator().manual_seed(0)
    drawn = torch.multinomial(row_weights(decision, 0.5), 20000, replacement=True,
                              generator=gen)
    assert abs(float((torch.as_tensor(decision)[drawn] == 2).float().mean()) - 0.25) < 0.015


def test_start_weight_draws_the_starts_from_rest_more_often():
    stop, keep_lane = DECISIONS.index("stop"), DECISIONS.index("keep_lane")
    decision = np.array([stop] * 500 + [keep_lane] * 500)
    speed = np.array([0.0] * 500 + [0.1] * 50 + [0.29] * 50 + [0.3] * 50 + [8.0] * 350)
    starts = starts_from_rest(decision, speed)
    assert starts.sum() == 100 and starts[500:600].all()
    plain = DecisionFocus(balance=0.0)
    assert torch.equal(draw_weights(decision, speed, plain), torch.ones(1000, dtype=torch.float64))
    weighted_focus = DecisionFocus(balance=0.0, start_weight=5.0)
    weighted = draw_weights(decision, speed, weighted_focus)
    assert weighted[starts].eq(5.0).all() and weighted[~starts].eq(1.0).all()
    assert start_share(decision, speed, plain) == 0.1
    assert start_share(decision, speed, weighted_focus) == round(500 / 1400, 4)
    gen = torch.Generator().manual_seed(0)
    drawn = torch.multinomial(weighted, 20000, replacement=True, generator=gen)
    assert abs(float(torch.from_numpy(starts)[drawn].float().mean()) - 500 / 1400) < 0.015
    paired = np.zeros(1000, dtype=bool)
    paired[480:520] = True
    stays = paired & ~starts
    assert stays.any() and (paired & starts).any()
    with_pairs = draw_weights(decision, speed, weighted_focus, paired=paired)
    assert with_pairs[paired].eq(5.0).all()
    assert torch.equal(with_pairs[~paired], weighted[~paired])


def _futures(v0: float, accel: float, dt: float = 0.1, n: int = 64) -> np.ndarray:
    """[n, 3] poses of a straight future from v0 under a constant acceleration, held at 0."""
    t = dt * np.arange(1, n + 1)
    stop_t = -v0 / accel if accel < 0 else np.inf
    tc = np.minimum(t, stop_t)
    x = v0 * tc + 0.5 * accel * tc ** 2
    return np.stack([x, np.zeros(n), np.zeros(n)], axis=1)


def test_hard_brakes_are_futures_that_shed_speed_soon_and_are_drawn_more_often():
    speeds = np.array([8.0, 8.0, 8.0, 8.0, 0.0, 3.0])
    futures = np.stack([_futures(8.0, 0.0), _futures(8.0, -1.0), _futures(8.0, -1.5),
                        _futures(8.0, -4.0), _futures(0.0, 1.0), _futures(3.0, -3.0)])
    brakes = hard_brakes(speeds, futures, 0.1)
    assert brakes.tolist() == [False, False, True, True, False, False]
    assert not hard_brakes(speeds[:1], futures[:1, :0], 0.1).any()
    decision = np.array([DECISIONS.index("keep_lane")] * 6)
    weights = draw_weights(decision, speeds, DecisionFocus(balance=0.0, brake_weight=3.0), brakes)
    assert weights.tolist() == [1.0, 1.0, 3.0, 3.0, 1.0, 1.0]
    assert torch.equal(draw_weights(decision, speeds, DecisionFocus(balance=0.0), brakes),
                       torch.ones(6, dtype=torch.float64))


@pytest.fixture(scope="module")
def two_decision_data():
    """A short drive whose windows alternate between a follow and a turn CoC, which share
    their first two words."""
    drive = generate_drive(11, 2.6, (48, 64))
    follow, turn = DECISIONS.index("follow"), DECISIONS.index("turn")
    pick = np.arange(drive.num_steps) % 2 == 0
    drive = dataclasses.replace(
        drive, coc=[FOLLOW if p else TURN for p in pick],
        decision=np.where(pick, follow, turn).astype(np.int64))
    tokenizer = train_tokenizer([FOLLOW, TURN] * 20, 120, 1000)
    cfg = tiny(tokenizer.vocab_size)
    cfg.action = dataclasses.replace(cfg.action, num_traj_tokens=1000)
    return TrainSet.build(cfg, tokenizer, [drive])


def test_decisive_mask_covers_the_shared_prefix_and_the_first_differing_token(
        two_decision_data):
    data = two_decision_data
    rows = torch.arange(min(len(data), 4))
    batch = data.batch(rows, "cpu")
    n = data.prompt_len
    for b, row in enumerate(rows.tolist()):
        follow = data.tokenizer.encode(FOLLOW)
        turn = data.tokenizer.encode(TURN)
        shared = next(i for i, (a, c) in enumerate(zip(follow, turn)) if a != c)
        cols = torch.nonzero(batch.decisive[b]).flatten().tolist()
        assert cols == list(range(n - 1, n + shared))
        assert (batch.labels[b, cols] != IGNORE).all()
        assert int(data.decisive_lens[row]) == shared + 1


def test_side_mask_marks_the_labels_of_the_side_words(two_decision_data):
    data = two_decision_data
    batch = data.batch(torch.arange(min(len(data), 4)), "cpu")
    side_words = data.tokenizer.decode(batch.labels[batch.sided].tolist()).split()
    assert side_words == ["left"] * int((data.decision[:4] == DECISIONS.index("turn")).sum())
    assert not (batch.sided & batch.decisive).any()
    plain = data.batch(torch.arange(2), "cpu", with_coc=False)
    assert not plain.sided.any()


@pytest.mark.parametrize("focus", [DecisionFocus(token_weight=5.0),
                                   DecisionFocus(token_weight=1.0, side_weight=5.0),
                                   DecisionFocus(token_weight=3.0, side_weight=5.0)])
def test_loss_weights_scale_the_gradient_of_the_deciding_tokens_and_side_words_only(
        two_decision_data, focus):
    data = two_decision_data
    torch.manual_seed(0)
    model = AlpamayoModel(data.cfg).double()
    batch = data.batch(torch.arange(min(len(data), 4)), "cpu")
    out, _ = run_backbone(model, batch, data.image_token_id, torch.float64)
    assert PLAIN.loss_weights(batch.decisive, batch.sided) is None
    grads = []
    for weights in (None, focus.loss_weights(batch.decisive, batch.sided)):
        hidden = out.hidden.detach().requires_grad_(True)
        ce, _ = coc_loss(model, hidden, batch.labels, weights)
        ce.backward()
        grads.append(hidden.grad.norm(dim=-1))  # [B, T]
    keep = batch.labels != IGNORE
    decisive, sided = batch.decisive[keep], batch.sided[keep]
    assert bool(decisive.any()) and bool(sided.any()) and not bool((decisive | sided).all())
    weight = torch.where(sided, focus.side_weight,
                         torch.where(decisive, focus.token_weight, 1.0)).double()
    expected = weight * int(keep.sum()) / float(weight.sum())
    torch.testing.assert_close(grads[1][keep] / grads[0][keep], expected, rtol=1e-5,
                               atol=0.0)  # float32 logits
    gen = torch.Generator().manual_seed(0)
    losses = target_step_losses(model, batch, data.image_token_id, torch.float64, gen,
                                grad=False, focus=focus)
    assert losses["decision_hit"].shape == losses["side_hit"].shape == (batch.input_ids.shape[0],)


def test_balanced_target_training_runs_and_reports_the_accuracy_per_decision(
        two_decision_data, tmp_path):
    data = two_decision_data
    torch.manual_seed(0)
    model = AlpamayoModel(data.cfg)
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    out = train_target(model, data, data, 2, None, 2, 1e-3, 0, log, torch.device("cpu"),
                       contextlib.nullcontext, torch.float32, eval_rows=len(data),
                       log_every=1, focus=DecisionFocus(token_weight=5.0, balance=1.0))
    log.close()
    assert out["steps"] == 2 and np.isfinite(out["final_coc_loss"])
    assert {"eval_decision_acc", "eval_decision_acc_follow", "eval_decision_acc_turn",
            "eval_side_acc"} <= set(out)
    assert 0.0 <= out["final_decision_acc"] <= 1.0
