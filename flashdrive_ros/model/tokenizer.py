"""Text tokenizer: a `tokenizers.Tokenizer` (tokenizer.json) with the Qwen and Alpamayo specials.

Vocabulary order mirrors the release: byte-level BPE, then the Qwen special tokens, then the
trajectory tokens `<i0>`, `<i1>`, ..., then the Alpamayo special tokens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

QWEN_SPECIALS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
)
ALPAMAYO_SPECIAL_NAMES = (
    "prompt_start", "prompt_end", "image_start", "image_pre_tkn", "image_end",
    "traj_history_start", "traj_history_pre_tkn", "traj_history_end", "cot_start", "cot_end",
    "meta_action_start", "meta_action_end", "traj_future_start", "traj_future_pre_tkn",
    "traj_future_end", "traj_history", "traj_future", "image_pad", "vectorized_wm",
    "vectorized_wm_start", "vectorized_wm_end", "vectorized_wm_pre_tkn", "route_start",
    "route_pad", "route_end", "question_start", "question_end", "answer_start", "answer_end",
)
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class TokenizerError(ValueError):
    """A tokenizer file is missing or unusable, or a required token is absent."""


def special(name: str) -> str:
    """'cot_start' -> '<|cot_start|>'; a full token string is returned unchanged."""
    return name if name.startswith("<") else f"<|{name}|>"


def traj_token(index: int) -> str:
    return f"<i{index}>"


class TextTokenizer:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        for name in ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                     "<|image_pad|>", "<|cot_start|>", "<|cot_end|>", "<|traj_future_start|>",
                     "<|traj_history_start|>", "<|traj_history|>", "<|traj_history_end|>",
                     traj_token(0)):
            if tokenizer.token_to_id(name) is None:
                raise TokenizerError(f"tokenizer lacks required token {name!r}")
        self.traj_token_start = self.token_id(traj_token(0))
        count = 0
        while tokenizer.token_to_id(traj_token(count)) == self.traj_token_start + count:
            count += 1
        self.num_traj_tokens = count

    @classmethod
    def from_file(cls, path: str | Path) -> TextTokenizer:
        path = Path(path)
        if not path.is_file():
            raise TokenizerError(f"tokenizer file not found: {path}")
        try:
            json.loads(path.read_text(encoding="utf-8"))
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:
            raise TokenizerError(f"tokenizer file {path} is not a valid tokenizer.json: "
                                 f"{type(exc).__name__}: {exc}") from None
        return cls(tok)

    def save(self, path: str | Path) -> None:
        self.tokenizer.save(str(path))

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def __len__(self) -> int:
        return self.vocab_size

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_marking(self, text: str, words: Iterable[str]) -> tuple[list[int], list[bool]]:
        """encode(text), and per token whether it overlaps one of `words` standing as a whole
        word in `text` (one encoding)."""
        spans = [m.span() for m in re.finditer(
            r"\b(?:" + "|".join(map(re.escape, words)) + r")\b", text)]
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        return encoding.ids, [any(a < stop and start < b for start, stop in spans)
                              for a, b in encoding.offsets]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise TokenizerError(f"token ids outside the vocabulary [0, {self.vocab_size}): "
                                 f"{bad[:8]}")
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def token_id(self, name: str) -> int:
        """Id of a token given as 'cot_start', '<|cot_start|>' or '<i12>'."""
        idx = self.tokenizer.token_to_id(special(name))
        if idx is None:
            raise TokenizerError(f"token {special(name)!r} is not in the vocabulary")
        return idx


def backbone_tokenizer(corpus: list[str], base_size: int) -> Tokenizer:
    """A Qwen-style backbone tokenizer: byte-level BPE of at most `base_size` tokens trained on
    `corpus`, then the Qwen special tokens (no trajectory or Alpamayo tokens)."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if base_size < len(alphabet):
        raise TokenizerError(f"BPE size {base_size} is below the {len(alphabet)}-byte alphabet")
    if not corpus or not any(s.strip() for s in corpus):
        raise TokenizerError("tokenizer corpus is empty")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=base_size, initial_alphabet=alphabet,
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in QWEN_SPECIALS])
    return tok


def build_tokenizer(corpus: list[str], vocab_size: int,
                    num_traj_tokens: int = 4000) -> TextTokenizer:
    """Train a byte-level BPE on `corpus` and add the specials and trajectory tokens.

    The result has at most `vocab_size` tokens (exactly that many when the corpus offers
    enough merges); size the model's vocabulary with `TextTokenizer.vocab_size`.
    """
    added = len(QWEN_SPECIALS) + num_traj_tokens + len(ALPAMAYO_SPECIAL_NAMES) - 1
    alphabet = len(pre_tokenizers.ByteLevel.alphabet())
    if vocab_size - added < alphabet:
        raise TokenizerError(f"vocab_size {vocab_size} too small: {added} added tokens plus a "
                             f"{alphabet}-byte alphabet need >= {added + alphabet}")
    tok = backbone_tokenizer(corpus, vocab_size - added)
    tok.add_tokens([AddedToken(traj_token(i), normalized=False)
                    for i in range(num_traj_tokens)])
    tok.add_special_tokens([AddedToken(special(n), special=True, normalized=False)
                            for n in ALPAMAYO_SPECIAL_NAMES if special(n) not in QWEN_SPECIALS])
    return TextTokenizer(tok)
