import contextlib

import torch

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.train.drafter_data import IGNORE, DraftCorpus, sample_blocks
from flashdrive_ros.train.drafter_train import acceptance_length, train_drafter
from flashdrive_ros.train.log import TrainLog, read_log


def _corpus(n: int = 24, context: int = 8, coc: int = 12, vocab: int = 60) -> DraftCorpus:
    gen = torch.Generator().manual_seed(0)
    cfg = tiny()
    width = context + coc
    start = torch.randint(0, vocab - coc, (n, 1), generator=gen)
    ids = (start + torch.arange(width)[None, :]) % vocab
    feats = torch.randn(n, width, len(cfg.drafter.target_layer_ids) * cfg.text.hidden_size,
                        generator=gen)
    positions = (torch.arange(width) + 100).view(1, 1, -1).expand(3, n, -1).clone()
    lengths = torch.randint(context + 4, width + 1, (n,), generator=gen)
    return DraftCorpus(ids, feats, positions, lengths, prompt_len=100 + context,
                       context_len=context)


def test_blocks_hold_the_sequence_after_the_anchor():
    corpus = _corpus()
    gen = torch.Generator().manual_seed(1)
    rows = torch.arange(len(corpus))
    batch = sample_blocks(corpus, rows, 8, mask_id=999, generator=gen)
    assert batch.block_ids.shape == (len(corpus), 8)
    assert (batch.block_ids[:, 1:] == 999).all()
    for b in range(len(corpus)):
        anchor_local = int(batch.flat_positions[b, 8]) - (corpus.prompt_len - 8)
        assert 8 <= anchor_local <= int(corpus.lengths[b]) - 2
        assert batch.block_ids[b, 0] == corpus.ids[b, anchor_local]
        for j in range(7):
            idx = anchor_local + 1 + j
            want = int(corpus.ids[b, idx]) if idx < int(corpus.lengths[b]) else IGNORE
            assert int(batch.labels[b, j]) == want
        torch.testing.assert_close(batch.context[b], corpus.features[b, anchor_local - 8:
                                                                     anchor_local])
        assert torch.equal(batch.mrope_positions[0, b], batch.flat_positions[b])


def test_acceptance_length_counts_leading_hits():
    labels = torch.tensor([[1, 2, 3], [1, 2, 3], [1, IGNORE, IGNORE]])
    logits = torch.nn.functional.one_hot(torch.tensor([[1, 2, 0], [0, 2, 3], [1, 0, 0]]), 5)
    assert acceptance_length(logits.float(), labels).tolist() == [3, 1, 2]


def test_drafter_training_lowers_loss(tmp_path):
    torch.manual_seed(0)
    cfg = tiny(vocab_size=60)
    drafter = Drafter(cfg.drafter, cfg.text)
    embed = torch.nn.Embedding(60, cfg.text.hidden_size).requires_grad_(False)
    head = torch.nn.Linear(cfg.text.hidden_size, 60, bias=False).requires_grad_(False)
    corpus = _corpus()
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    rows = torch.arange(len(corpus))
    out = train_drafter(drafter, corpus, rows[:20], rows[20:], embed, head, steps=60,
                        batch_size=16, lr=3e-3, seed=0, log=log, stage="drafter_flat",
                        autocast=contextlib.nullcontext)
    log.close()
    assert out["final_loss"] < 0.7 * out["first_loss"]
    assert out["eval_accept_len"] >= 1.0
    assert read_log(tmp_path / "log.jsonl")[-1]["stage"] == "drafter_flat_eval"


def test_longer_context_is_padded_at_the_front():
    corpus = _corpus(context=8)
    gen = torch.Generator().manual_seed(2)
    rows = torch.arange(len(corpus))
    batch = sample_blocks(corpus, rows, 4, mask_id=999, generator=gen, context_len=20)
    assert batch.context.shape[:2] == (len(corpus), 20)
    for b in range(len(corpus)):
        anchor = int(batch.anchors[b])
        first = 20 - anchor
        assert not batch.context_mask[b, :first].any() and batch.context_mask[b, first:].all()
        assert torch.equal(batch.context_ids[b, first:], corpus.ids[b, :anchor])
        torch.testing.assert_close(batch.context[b, first:], corpus.features[b, :anchor])
        assert int(batch.block_ids[b, 0]) == int(corpus.ids[b, anchor])


def test_eagle_training_lowers_loss_at_both_block_sizes(tmp_path):
    import dataclasses

    from flashdrive_ros.model.eagle_drafter import EagleDrafter

    torch.manual_seed(0)
    cfg = tiny(vocab_size=60)
    drafter = EagleDrafter(dataclasses.replace(cfg.drafter, kind="eagle3", num_hidden_layers=1,
                                               context_len=12), cfg.text)
    embed = torch.nn.Embedding(60, cfg.text.hidden_size).requires_grad_(False)
    head = torch.nn.Linear(cfg.text.hidden_size, 60, bias=False).requires_grad_(False)
    corpus = _corpus()
    log = TrainLog(tmp_path / "log.jsonl", echo=False)
    rows = torch.arange(len(corpus))
    out = train_drafter(drafter, corpus, rows[:20], rows[20:], embed, head, steps=40,
                        batch_size=16, lr=3e-3, seed=0, log=log, stage="drafter_eagle",
                        autocast=contextlib.nullcontext, block_sizes=(4, 8))
    log.close()
    assert out["final_loss"] < 0.7 * out["first_loss"]
    assert {"eval_accept_len_block4", "eval_accept_len_block8"} <= set(out)
    assert out["eval_accept_len"] == out["eval_accept_len_block8"]
