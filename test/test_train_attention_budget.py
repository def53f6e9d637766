import contextlib
import dataclasses

import torch

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.train.attention_budget import (
    PADDING,
    attention_budget,
    budget_of_weights,
    context_token_types,
)
from flashdrive_ros.train.drafter_data import DraftCorpus, sample_blocks

IMAGE = 50
PROMPT_LEN = 12
HISTORY = range(8, 10)


def _corpus(n: int = 6) -> DraftCorpus:
    prompt = torch.tensor([1, 2, IMAGE, IMAGE, IMAGE, 3, 4, 5, 6, 7, 8, 9])
    coc = torch.arange(20, 28)
    ids = torch.cat([prompt, coc]).expand(n, -1).clone()
    width = ids.shape[1]
    cfg = tiny(vocab_size=60)
    feats = torch.randn(n, width, len(cfg.drafter.target_layer_ids) * cfg.text.hidden_size)
    positions = torch.arange(width).view(1, 1, -1).expand(3, n, -1).clone()
    lengths = torch.full((n,), width)
    return DraftCorpus(ids, feats, positions, lengths, prompt_len=PROMPT_LEN,
                       context_len=PROMPT_LEN)


def test_types_follow_the_prompt_layout():
    corpus = _corpus()
    batch = sample_blocks(corpus, torch.arange(6), 4, 60, torch.Generator().manual_seed(0),
                          context_len=16)
    types = context_token_types(batch, PROMPT_LEN, IMAGE, HISTORY)
    for b in range(6):
        anchor = int(batch.anchors[b])
        pad = max(16 - anchor, 0)
        want = ([2, 2, 0, 0, 0, 2, 2, 2, 1, 1, 2, 2] + [3] * (anchor - PROMPT_LEN))[-16:]
        assert types[b, pad:].tolist() == want
        assert (types[b, :pad] == PADDING).all()


def test_shares_split_the_attention_mass():
    weights = torch.zeros(1, 2, 3, 6)
    weights[..., 0] = 0.5
    weights[..., 2] = 0.25
    weights[..., 5] = 0.25
    types = torch.tensor([[0, PADDING, 3, 1]])
    shares = budget_of_weights(weights, types)
    assert {k: float(v) for k, v in shares.items()} == {
        "vision": 0.5, "history": 0.0, "prompt_text": 0.0, "generated": 0.25, "block": 0.25}


def _budget_of_tiny_drafter(context_len: int) -> dict[str, float]:
    cfg = tiny(vocab_size=60)
    torch.manual_seed(0)
    drafter = Drafter(dataclasses.replace(cfg.drafter, context_len=context_len), cfg.text)
    embed = torch.nn.Embedding(60, cfg.text.hidden_size)
    return attention_budget(drafter, _corpus(), torch.arange(6), embed, PROMPT_LEN, IMAGE,
                            HISTORY, 0, contextlib.nullcontext, block_size=4)


def test_budget_of_a_drafter_sums_to_one():
    shares = _budget_of_tiny_drafter(16)
    assert abs(sum(shares.values()) - 1.0) < 1e-5
    assert min(shares.values()) >= 0.0 and shares["vision"] > 0.0


def test_a_drafter_reading_only_recent_text_puts_no_attention_on_images():
    shares = _budget_of_tiny_drafter(4)
    assert shares["vision"] == 0.0 and shares["prompt_text"] + shares["generated"] > 0.0
