"""Helpers shared by the ROS tests: a tiny random-weight model directory for the real engine."""

import dataclasses

import torch

from flashdrive_ros.engine.config import DRAFTER_FILE
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.tokenizer import build_tokenizer
from flashdrive_ros.model.weights import save_model_dir

CORPUS = ["the lead vehicle slows down, keep a safe gap and stay in the lane",
          "clear road ahead, keep lane at the speed limit"] * 10
MAX_COC_TOKENS = 6


def make_tiny_model_dir(path):
    """A tiny Alpamayo-structured model (random weights, seed 0) with tokenizer and drafter;
    CoC decoding is capped at MAX_COC_TOKENS tokens so a CPU step stays short."""
    torch.manual_seed(0)
    tokenizer = build_tokenizer(CORPUS, vocab_size=4600)
    cfg = tiny(vocab_size=tokenizer.vocab_size)
    cfg = dataclasses.replace(cfg, prompt=dataclasses.replace(cfg.prompt,
                                                              max_coc_tokens=MAX_COC_TOKENS))
    save_model_dir(AlpamayoModel(cfg), cfg, tokenizer, path)
    Drafter(cfg.drafter, cfg.text).save_safetensors(path / DRAFTER_FILE)
    return path


def test_tiny_model_dir_is_complete(tmp_path):
    path = make_tiny_model_dir(tmp_path / "m")
    assert {"config.json", "tokenizer.json", DRAFTER_FILE} <= {p.name for p in path.iterdir()}
