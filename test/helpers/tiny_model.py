"""The tiny Alpamayo-structured model with random weights (seed 0): in memory, or as a model
directory with its tokenizer and drafter."""

import dataclasses
from pathlib import Path

import torch

from flashdrive_ros.engine.config import DRAFTER_FILE
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.manifest import write_manifest
from flashdrive_ros.model.tokenizer import TextTokenizer, build_tokenizer
from flashdrive_ros.model.weights import save_model_dir

CORPUS = ["the lead vehicle slows down, keep a safe gap and stay in the lane",
          "clear road ahead, keep lane at the speed limit"] * 10
# Holds the prompt's own wording, so that prompts tokenize short.
PROMPT_CORPUS = ["Front camera: frame 0 the car ahead brakes, so the ego vehicle slows down.",
                 "output the chain-of-thought reasoning of the driving process, then output the "
                 "future trajectory. You are a driving assistant that generates safe and "
                 "accurate actions."] * 10
SIM_CORPUS = ["Keep lane, the road ahead is clear.", "Slow down and stop for the red light."]
MAX_COC_TOKENS = 6


def tiny_parts(corpus: list[str] = CORPUS, max_coc_tokens: int | None = None,
               tokenizer: TextTokenizer | None = None, image_size: tuple[int, int] | None = None,
               fourier_max_freq: float | None = None
               ) -> tuple[AlpamayoModel, TextTokenizer, Drafter]:
    """(model, tokenizer, DFlash drafter) in eval mode. tokenizer: instead of one trained on
    `corpus` (its trajectory token count sets the config's); max_coc_tokens: the config's CoC
    budget; image_size: (width, height) of the model's input images; fourier_max_freq: the
    action encoder's highest frequency (the config's 100 makes the random expert's samples
    swing by 0.1 for 1e-6 in their input; 1 keeps that near 1e-5)."""
    tokenizer = tokenizer or build_tokenizer(corpus, vocab_size=4600)
    cfg = tiny(vocab_size=tokenizer.vocab_size)
    prompt = cfg.prompt
    if max_coc_tokens is not None:
        prompt = dataclasses.replace(prompt, max_coc_tokens=max_coc_tokens)
    if image_size is not None:
        prompt = dataclasses.replace(prompt, image_width=image_size[0],
                                     image_height=image_size[1])
    action = dataclasses.replace(cfg.action, num_traj_tokens=tokenizer.num_traj_tokens)
    if fourier_max_freq is not None:
        action = dataclasses.replace(action, fourier_max_freq=fourier_max_freq)
    cfg = dataclasses.replace(cfg, prompt=prompt, action=action)
    torch.manual_seed(0)
    model = AlpamayoModel(cfg).eval()
    return model, tokenizer, Drafter(cfg.drafter, cfg.text).eval()


def make_tiny_model_dir(path, max_coc_tokens: int = MAX_COC_TOKENS, manifest: bool = False,
                        **changes) -> Path:
    """`tiny_parts(max_coc_tokens=..., **changes)` saved in `path` (config.json, weights,
    tokenizer, drafter; manifest.json when `manifest`). The CoC budget keeps a CPU step
    short."""
    path = Path(path)
    model, tokenizer, drafter = tiny_parts(max_coc_tokens=max_coc_tokens, **changes)
    save_model_dir(model, model.cfg, tokenizer, path)
    drafter.save_safetensors(path / DRAFTER_FILE)
    if manifest:
        write_manifest(path)
    return path


def make_sim_sized_model_dir(path, max_coc_tokens: int = MAX_COC_TOKENS) -> Path:
    """A tiny model directory at 64x32 (the sim bag's aspect), with a tokenizer made as
    training makes one (1000 trajectory tokens) and a manifest."""
    from flashdrive_ros.train.run_data import train_tokenizer

    tokenizer = train_tokenizer(SIM_CORPUS * 10, 120, 1000)
    return make_tiny_model_dir(path, max_coc_tokens, manifest=True, tokenizer=tokenizer,
                               image_size=(64, 32))
