import json

import pytest

from flashdrive_ros.bench.acceptance import (
    decode_analysis,
    implied_decode_ms,
    per_round_ms,
    per_token_ms,
    trained_accepted_length,
)


def test_implied_decode_arithmetic():
    token = per_token_ms(160.0, 16)
    assert token == 10.0
    round_ms = per_round_ms(250.0, 15.0, token)
    assert round_ms == 16.0
    assert implied_decode_ms(round_ms, token, 16, 5.0) == 15 / 5 * 16 + 10 == 58.0
    assert implied_decode_ms(round_ms, token, 16, 1.0) == 250.0
    with pytest.raises(ValueError):
        implied_decode_ms(round_ms, token, 16, 0.0)


def test_decode_analysis_reports_each_accepted_length():
    out = decode_analysis(160.0, 250.0, 15.0, 16, [(6.0, "a"), (5.0, "b")])
    assert out["per_round_ms"] == 16.0 and out["round_over_token"] == 1.6
    assert [i["label"] for i in out["implied"]] == ["a", "b"]
    assert out["implied"][0]["decode_ms"] == pytest.approx(15 / 6 * 16 + 10)
    assert out["implied"][1]["speedup_vs_autoregressive"] == pytest.approx(160 / 58)


def test_trained_accepted_length_reads_the_shipped_drafter(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"drafter": {"rotary": "mrope"}}))
    (tmp_path / "train_summary.json").write_text(json.dumps(
        {"drafter_flat": {"eval_accept_len": 6.0}, "drafter_mrope": {"eval_accept_len": 6.5}}))
    length, label = trained_accepted_length(tmp_path)
    assert length == 6.5 and "drafter_mrope" in label
    assert trained_accepted_length(tmp_path / "missing") is None
