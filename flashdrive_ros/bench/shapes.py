"""Model parts at a named shape with random weights: model, drafter, padded tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tokenizers import AddedToken

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ModelConfig, preset, tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.tokenizer import TextTokenizer, build_tokenizer
from flashdrive_ros.model.weights import CONFIG_FILE
from flashdrive_ros.paths import default_model_dir

SHAPES = ("tiny", "embedded", "alpamayo-1.5-10b")
CORPUS = ["Front camera: frame 0 the lead vehicle brakes, so the ego vehicle slows down and "
          "keeps its lane.", "Cross traffic clears the intersection; the ego car accelerates "
          "and follows the curve to the left."] * 20
BPE_VOCAB = 6000
PAD_TOKEN = "<|bench_pad_{}|>"


@dataclass
class Parts:
    cfg: ModelConfig
    model: AlpamayoModel
    drafter: Drafter
    tokenizer: TextTokenizer


def shape_config(shape: str) -> ModelConfig:
    """The preset of that name; `embedded` is the shipped model's config.json (its trained
    vocabulary size)."""
    if shape == "tiny":
        return tiny()
    if shape == "embedded":
        return ModelConfig.load(default_model_dir() / CONFIG_FILE)
    return preset(shape)


def padded_tokenizer(vocab_size: int, num_traj_tokens: int) -> TextTokenizer:
    """A BPE tokenizer with the Alpamayo specials, padded with filler tokens to `vocab_size`
    so the embedding and lm_head have the shape's full vocabulary."""
    bpe = min(BPE_VOCAB, vocab_size)
    tok = build_tokenizer(CORPUS, bpe, num_traj_tokens).tokenizer
    missing = vocab_size - tok.get_vocab_size(with_added_tokens=True)
    if missing < 0:
        raise ValueError(f"vocab_size {vocab_size} is below the tokenizer's own size")
    tok.add_tokens([AddedToken(PAD_TOKEN.format(i), special=True, normalized=False)
                    for i in range(missing)])
    return TextTokenizer(tok)


def build_parts(shape: str, device: str, dtype: torch.dtype, seed: int = 0) -> Parts:
    """Random weights; the lm_head row of <|cot_end|> is zeroed so greedy decoding over
    random logits never ends the CoC early (the CoC length is set by max_coc_tokens)."""
    cfg = shape_config(shape)
    tokenizer = padded_tokenizer(cfg.text.vocab_size, cfg.action.num_traj_tokens)
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = AlpamayoModel(cfg).eval()
            drafter = Drafter(cfg.drafter, cfg.text).eval()
    finally:
        torch.set_default_dtype(previous)
    with torch.no_grad():
        model.vlm.lm_head.weight[tokenizer.token_id("cot_end")].zero_()
    return Parts(cfg, model, drafter, tokenizer)
