"""Decode cost per speculative round and per autoregressive token, and the decode time implied
by an accepted length (tokens committed per round, the engine's `accepted_lengths`)."""

from __future__ import annotations

import json
from pathlib import Path

PUBLISHED_ACCEPTED_LENGTH = 5.6
PUBLISHED_LABEL = "published: FlashDrive paper, Alpamayo 1.5 DFlash drafter, block 8"
TRAINED_LABEL = ("measured: trained embedded model's {rotary} drafter, offline eval "
                 "(models/default/train_summary.json drafter_{rotary}.eval_accept_len)")


def per_token_ms(ar_decode_ms: float, coc_tokens: int) -> float:
    """Autoregressive decode runs coc_tokens - 1 one-token steps and one finish pass (3 tokens,
    costed as one step): decode / coc_tokens."""
    return ar_decode_ms / coc_tokens


def per_round_ms(spec_decode_ms: float, rounds: float, token_ms: float) -> float:
    """Speculative decode = rounds x (draft + verify) + the finish pass (costed as one
    autoregressive step; a round that verified <|cot_end|>, <|traj_future_start|> skips it,
    which random-weight drafters almost never draft)."""
    if rounds <= 0:
        raise ValueError(f"rounds must be > 0, got {rounds}")
    return (spec_decode_ms - token_ms) / rounds


def implied_decode_ms(round_ms: float, token_ms: float, coc_tokens: int,
                      accepted_length: float) -> float:
    """The first CoC token comes from the prefill; the other coc_tokens - 1 take
    (coc_tokens - 1) / accepted_length rounds; then the finish pass."""
    if accepted_length <= 0:
        raise ValueError(f"accepted_length must be > 0, got {accepted_length}")
    return (coc_tokens - 1) / accepted_length * round_ms + token_ms


def trained_accepted_length(model_dir: Path) -> tuple[float, str] | None:
    """(accepted length, label) of the shipped drafter, or None when the files are absent."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
        summary = json.loads((model_dir / "train_summary.json").read_text())
        rotary = config["drafter"]["rotary"]
        return (float(summary[f"drafter_{rotary}"]["eval_accept_len"]),
                TRAINED_LABEL.format(rotary=rotary))
    except (OSError, KeyError, TypeError, ValueError):
        return None


def decode_analysis(ar_decode_ms: float, spec_decode_ms: float, rounds: float,
                    coc_tokens: int, accepted_lengths: list[tuple[float, str]]) -> dict:
    """All inputs are p50s of one run with a fixed CoC length (random weights: acceptance is
    near zero, so `rounds` is near coc_tokens - 1)."""
    token_ms = per_token_ms(ar_decode_ms, coc_tokens)
    round_ms = per_round_ms(spec_decode_ms, rounds, token_ms)
    implied = [{"label": label, "accepted_length": length,
                "decode_ms": implied_decode_ms(round_ms, token_ms, coc_tokens, length),
                "speedup_vs_autoregressive": ar_decode_ms / implied_decode_ms(
                    round_ms, token_ms, coc_tokens, length)}
               for length, label in accepted_lengths]
    return {"coc_tokens": coc_tokens, "autoregressive_decode_ms": ar_decode_ms,
            "speculative_decode_ms": spec_decode_ms, "rounds_measured": rounds,
            "per_token_ms": token_ms, "per_round_ms": round_ms,
            "round_over_token": round_ms / token_ms, "implied": implied}
