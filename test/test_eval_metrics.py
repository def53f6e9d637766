import math

import numpy as np
import pytest

from flashdrive_ros.eval.metrics import (
    ade,
    displacement,
    fde,
    horizon_steps,
    min_ade,
    min_fde,
    named_sides,
    nearest_decision,
    percentiles,
    window_metrics,
    words,
)
from flashdrive_ros.eval.offline import LabelIndex
from flashdrive_ros.eval.records import LabelRecord
from flashdrive_ros.eval.summary import (
    SkipCounter,
    WindowResult,
    compare_blocks,
    group_block,
    grouped,
    summarize,
)


def straight(speed, steps=64, dt=0.1, lateral=0.0):
    t = dt * np.arange(1, steps + 1)
    return np.stack([speed * t, np.full(steps, lateral), np.zeros(steps)], axis=1)


def test_ade_fde_hand_computed():
    truth = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]])
    pred = np.array([[1.0, 3.0], [6.0, 0.0], [3.0, 0.0]])
    assert displacement(pred[None], truth)[0].tolist() == [3.0, 4.0, 0.0]
    assert ade(pred, truth) == pytest.approx(7.0 / 3.0)
    assert fde(pred, truth) == 0.0
    assert ade(pred, truth, steps=2) == pytest.approx(3.5)
    assert fde(pred, truth, steps=2) == 4.0


def test_min_ade_uses_best_of_first_k_samples():
    truth = np.zeros((4, 3))
    samples = np.zeros((8, 4, 3))
    samples[2:6, :, 0] = 3.0
    samples[0, :, 0] = 2.0   # ADE 2
    samples[1, :, 1] = 1.0   # ADE 1
    samples[6, :, 0] = 0.5   # ADE 0.5 but outside the first 6
    samples[7, :, 0] = 0.1
    assert min_ade(samples, truth, k=1) == 2.0
    assert min_ade(samples, truth, k=6) == 1.0
    assert min_ade(samples, truth, k=8) == pytest.approx(0.1)
    assert min_ade(samples[:2], truth, k=6) == 1.0
    samples[1, -1, 1] = 5.0
    samples[4, -1, 0] = 0.25
    assert min_fde(samples, truth, k=6) == 0.25
    assert min_fde(samples, truth, k=1) == 2.0


def test_window_metrics_horizons_and_constant_velocity():
    truth = straight(10.0)
    plan = np.stack([straight(10.0, lateral=1.0), straight(10.0)])
    cv = straight(9.0)
    m = window_metrics(plan, truth, cv, dt=0.1)
    assert m["minade1_3s"] == pytest.approx(1.0)
    assert m["minade1_6s"] == pytest.approx(1.0)
    assert m["minade6_6s"] == pytest.approx(0.0)
    assert m["fde1_6s"] == pytest.approx(1.0)
    # CV error grows 1 m/s: mean over t = 0.1..3.0 is 1.55 m, over 0.1..6.4 is 3.25 m
    assert m["cv_minade_3s"] == pytest.approx(1.55)
    assert m["cv_minade_6s"] == pytest.approx(3.25)
    assert m["cv_fde_6s"] == pytest.approx(6.4)


def test_horizon_and_shape_errors():
    assert horizon_steps(3.0, 0.1, 64) == 30
    assert horizon_steps(6.4, 0.1, 64) == 64
    with pytest.raises(ValueError, match="needs 64 waypoints"):
        horizon_steps(6.4, 0.1, 32)
    with pytest.raises(ValueError, match="waypoints"):
        displacement(np.zeros((1, 5, 2)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="trajectory"):
        ade(np.zeros(5), np.zeros((5, 2)))


def test_percentiles_hand_computed():
    stats = percentiles([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert stats["p50"] == pytest.approx(5.5)
    assert stats["p90"] == pytest.approx(9.1)
    assert stats["p99"] == pytest.approx(9.91)
    assert stats["mean"] == pytest.approx(5.5)
    assert stats["max"] == 10.0
    assert percentiles([])["p50"] is None


def test_nearest_decision_by_shared_words():
    examples = [(words("Slow down and stop because the light is red"), "stop"),
                (words("Keep lane and maintain speed since the road is clear"), "keep_lane"),
                (words("Follow the slower car ahead"), "follow")]
    assert nearest_decision("slow down and STOP, the light is red!", examples) == "stop"
    assert nearest_decision("keep the lane, road is clear", examples) == "keep_lane"
    assert nearest_decision("zebra", examples) is None
    assert nearest_decision("anything", []) is None


def make_result(t0, total_ms, accepted, err, decision=None, predicted=None):
    truth = straight(10.0)
    samples = straight(10.0, lateral=err)[None]
    return WindowResult(t0=t0, samples=samples, truth=truth, constant_velocity=truth,
                        metrics=window_metrics(samples, truth, truth, 0.1),
                        timings_ms={"encode": 1.0, "prefill": 2.0, "decode": 3.0,
                                    "action": 4.0, "total": total_ms},
                        accepted_lengths=accepted, tokens_generated=10, coc_text="text",
                        decision=decision, predicted_decision=predicted)


def test_summarize_and_compare():
    skipped = SkipCounter()
    skipped.add("no_future", "odometry ends")
    skipped.add("no_future", "odometry ends again")
    base = summarize([make_result(0.0, 200.0, [], 1.0, "stop", "stop"),
                      make_result(0.1, 300.0, [], 3.0, "go", "stop")], skipped, 10.0)
    fast = summarize([make_result(0.0, 50.0, [4, 6], 1.0),
                      make_result(0.1, 150.0, [2], 2.0)], SkipCounter(), 10.0)
    assert base["windows"] == 2
    assert base["minade1_6s"] == pytest.approx(2.0)
    assert base["decision_match_rate"] == pytest.approx(0.5)
    assert base["skipped_windows"] == {"total": 2, "reasons": {"no_future": 2},
                                       "examples": {"no_future": "odometry ends"}}
    assert base["latency_ms"]["total"]["p50"] == pytest.approx(250.0)
    assert base["accepted_length_mean"] is None
    assert fast["accepted_length_mean"] == pytest.approx(4.0)
    assert fast["within_control_period"] == pytest.approx(0.5)
    assert fast["decision_match_rate"] is None
    ratios = compare_blocks(base, fast)
    assert ratios["speedup_total_p50"] == pytest.approx(2.5)
    assert ratios["speedup_encode_p50"] == pytest.approx(1.0)
    assert ratios["metric_deltas"]["minade1_6s"] == pytest.approx(-0.5)
    assert not math.isnan(ratios["speedup_total_p90"])


def test_grouped_blocks_take_each_window_in_every_group_it_names():
    truth = straight(10.0)

    def result(err, cv_err, tags, decision, predicted):
        samples = straight(10.0, lateral=err)[None]
        cv = straight(10.0, lateral=cv_err)
        return WindowResult(t0=0.0, samples=samples, truth=truth, constant_velocity=cv,
                            metrics=window_metrics(samples, truth, cv, 0.1), timings_ms={},
                            decision=decision, predicted_decision=predicted, tags=tags)

    results = [result(1.0, 4.0, ("turn", "intersection"), "turn", "turn"),
               result(3.0, 2.0, ("turn",), "stop", "follow"),
               result(5.0, 0.0, (), None, None)]
    groups = grouped(results, [r.tags for r in results])
    assert list(groups) == ["intersection", "turn"]
    turn = groups["turn"]
    assert turn["windows"] == turn["labelled_windows"] == 2
    assert turn["minade1_6s"] == pytest.approx(2.0) and turn["cv_minade_6s"] == pytest.approx(3.0)
    assert turn["minade1_cv_ratio"] == pytest.approx(2.0 / 3.0)
    assert turn["decision_match_rate"] == pytest.approx(0.5)
    assert groups["intersection"]["minade1_cv_ratio"] == pytest.approx(0.25)
    alone = group_block(results[2:])
    assert alone["minade1_cv_ratio"] is None and alone["decision_match_rate"] is None
    assert summarize(results, SkipCounter(), 10.0)["scenarios"] == groups
    with pytest.raises(ValueError, match="2 key sets for 3 windows"):
        grouped(results, [(), ()])


def test_sides_named_in_order_and_matched_only_where_the_decision_is_right():
    assert named_sides("Nudge slightly left around the parked car on the right") == (
        "left", "right")
    assert named_sides("Slow down: the road bends sharply to the RIGHT.") == ("right",)
    assert named_sides("Keep lane, the leftover lane is bright") == ()
    truth = straight(10.0)

    def result(coc, decision, predicted, sides):
        return WindowResult(t0=0.0, samples=truth[None], truth=truth, constant_velocity=truth,
                            metrics=window_metrics(truth[None], truth, truth, 0.1),
                            timings_ms={}, coc_text=coc, decision=decision,
                            predicted_decision=predicted, label_sides=sides)

    right = result("Turn left through the tight bend", "turn", "turn", ("left",))
    wrong = result("Slow down because the road bends sharply to the right", "turn", "turn",
                   ("left",))
    silent = result("Turn through the bend", "turn", "turn", ("left",))
    other_decision = result("Keep lane", "turn", "keep_lane", ("left",))
    no_side = result("Stop at the line", "stop", "stop", ())
    assert (right.side_match, wrong.side_match, silent.side_match) == (True, False, False)
    assert other_decision.side_match is None and no_side.side_match is None
    block = group_block([right, wrong, silent, other_decision, no_side])
    assert block["side_windows"] == 3
    assert block["side_match_rate"] == pytest.approx(1 / 3)
    assert group_block([no_side])["side_match_rate"] is None


def test_label_index_gives_the_sides_of_the_nearest_labelled_coc():
    labels = LabelIndex([
        LabelRecord(1.0, {"coc": "Turn right through the tight bend", "decision": "turn"}),
        LabelRecord(1.1, {"coc": "Keep the lane", "decision": "keep_lane"}),
        LabelRecord(1.2, {"decision": "keep_lane"})], tolerance=0.05)
    assert labels.sides_at(1.01) == ("right",)
    assert labels.sides_at(1.09) == () and labels.sides_at(1.2) == ()
    assert labels.sides_at(5.0) == ()
