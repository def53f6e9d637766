import pytest

from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.tokenizer import (
    ALPAMAYO_SPECIAL_NAMES,
    QWEN_SPECIALS,
    TextTokenizer,
    TokenizerError,
    build_tokenizer,
)

CORPUS = [
    "The ego vehicle slows down because a pedestrian is crossing ahead.",
    "Keep lane and maintain speed; the road ahead is clear.",
    "Nudge to the left to keep distance from the parked truck on the right.",
    "Stop for the red light at the intersection, then proceed when green.",
] * 20


@pytest.fixture(scope="module")
def tok() -> TextTokenizer:
    return build_tokenizer(CORPUS, vocab_size=4600)


def test_round_trip_and_specials_are_single_tokens(tok):
    text = ("<|im_start|>user\nKeep lane<|cot_start|>the road ahead is clear"
            "<|cot_end|><|traj_future_start|>")
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert ids[0] == tok.token_id("<|im_start|>")
    assert ids[-2:] == [tok.token_id("cot_end"), tok.token_id("traj_future_start")]
    assert ids.count(tok.token_id("cot_start")) == 1
    assert tok.decode(ids, skip_special_tokens=True) == "user\nKeep lanethe road ahead is clear"
    plain = "Unseen wörds 123 ünïcode!"
    assert tok.decode(tok.encode(plain)) == plain


def test_encode_marking_covers_the_tokens_of_whole_words_only(tok):
    text = "Nudge to the left of the leftover cart, bright lights on the right"
    ids, marks = tok.encode_marking(text, ("left", "right"))
    assert ids == tok.encode(text)
    assert len(marks) == len(ids)
    assert tok.decode([i for i, m in zip(ids, marks) if m]).split() == ["left", "right"]
    assert not any(tok.encode_marking("Keep lane, leftover and bright", ("left", "right"))[1])
    unseen = "zqx leftz left"
    marked = [i for i, m in zip(*tok.encode_marking(unseen, ("left",))) if m]
    assert tok.decode(marked).strip() == "left"


def test_vocabulary_layout_mirrors_release(tok):
    assert tok.vocab_size <= 4600
    first = tok.token_id(QWEN_SPECIALS[0])
    assert [tok.token_id(s) for s in QWEN_SPECIALS] == list(range(first, first + 14))
    assert tok.traj_token_start == first + 14
    assert tok.num_traj_tokens == 4000
    assert tok.token_id("<i3999>") == tok.traj_token_start + 3999
    alp = [n for n in ALPAMAYO_SPECIAL_NAMES if n != "image_pad"]
    assert [tok.token_id(n) for n in alp] == list(range(first + 4014, first + 4014 + 28))
    assert tok.vocab_size == first + 4014 + 28
    assert tok.encode("<i17>") == [tok.traj_token_start + 17]
    cfg = tiny(vocab_size=tok.vocab_size)
    assert cfg.text.vocab_size == len(tok)


def test_save_load_and_bad_files(tok, tmp_path):
    path = tmp_path / "tokenizer.json"
    tok.save(path)
    again = TextTokenizer.from_file(path)
    assert again.encode(CORPUS[0]) == tok.encode(CORPUS[0])
    assert again.token_id("cot_start") == tok.token_id("<|cot_start|>")
    with pytest.raises(TokenizerError, match="not found"):
        TextTokenizer.from_file(tmp_path / "missing.json")
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(path.read_text()[:500])
    with pytest.raises(TokenizerError, match="not a valid"):
        TextTokenizer.from_file(corrupt)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x80\x04\x95PK\x03\x04")
    with pytest.raises(TokenizerError, match="not a valid"):
        TextTokenizer.from_file(binary)
    with pytest.raises(TokenizerError, match="not in the vocabulary"):
        tok.token_id("no_such_token")
    with pytest.raises(TokenizerError, match="outside"):
        tok.decode([tok.vocab_size + 5])


def test_build_rejects_impossible_sizes():
    with pytest.raises(TokenizerError, match="too small"):
        build_tokenizer(CORPUS, vocab_size=1000)
    with pytest.raises(TokenizerError, match="empty"):
        build_tokenizer(["  "], vocab_size=4600)
