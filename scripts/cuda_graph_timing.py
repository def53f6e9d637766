"""Per-stage engine latency on a CUDA device, eager vs CUDA graphs, as a markdown table.

Models have random weights: the tiny test config, and the full-size Alpamayo 1.5 config cut
to a few layers (text, expert, vision; full widths, full vocabulary, full-size 2-layer
drafter). Each row: median of CUDA-event stage times over `--windows` consecutive streaming
windows after `--warmup` windows (the first is a full prefill; graphs are captured there).
Random drafters rarely propose the target's token, so decoding runs about one token per
verify round, and random CoCs usually run to max_coc_tokens.

    PYTHONPATH=. python3 scripts/cuda_graph_timing.py [--layers 4] [--windows 20]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics

import numpy as np
import torch
from tokenizers import AddedToken

from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.engine.types import STAGES, Window
from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.model.config import ModelConfig, alpamayo_1_5_10b, tiny
from flashdrive_ros.model.drafter import Drafter
from flashdrive_ros.model.tokenizer import TextTokenizer, build_tokenizer

CORPUS = ["The lead vehicle brakes at the crosswalk, so the ego vehicle slows down and keeps "
          "its lane. A cyclist merges from the right; yield and follow the road."] * 20


def truncated_full_size(layers: int, vocab_size: int) -> ModelConfig:
    """Alpamayo 1.5 widths and vocabulary with `layers` text/expert layers and vision blocks;
    deepstack taps and drafter feature layers moved into the kept layers."""
    cfg = alpamayo_1_5_10b()
    kept = tuple(range(1, layers))
    return dataclasses.replace(
        cfg, name=f"alpamayo-1.5-{layers}-layers",
        vision=dataclasses.replace(cfg.vision, depth=layers, deepstack_visual_indexes=kept),
        text=dataclasses.replace(cfg.text, num_hidden_layers=layers, vocab_size=vocab_size),
        expert=dataclasses.replace(cfg.expert, num_hidden_layers=layers),
        drafter=dataclasses.replace(cfg.drafter, target_layer_ids=kept))


def padded_tokenizer(vocab_size: int) -> TextTokenizer:
    """A corpus-trained tokenizer padded with placeholder tokens to `vocab_size`."""
    tok = build_tokenizer(CORPUS, vocab_size=4600)
    tok.tokenizer.add_tokens([AddedToken(f"<|placeholder_{i}|>", normalized=False)
                              for i in range(vocab_size - tok.vocab_size)])
    return tok


def build(cfg: ModelConfig, dtype: torch.dtype) -> tuple[AlpamayoModel, Drafter]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda"):
            model = AlpamayoModel(cfg).eval()
            drafter = Drafter(cfg.drafter, cfg.text).eval()
    finally:
        torch.set_default_dtype(previous)
    return model, drafter


def windows(cfg: ModelConfig, count: int):
    p, a = cfg.prompt, cfg.action
    rng = np.random.default_rng(0)
    shape = (len(p.camera_names), p.num_frames + count - 1, p.image_height, p.image_width, 3)
    frames = rng.integers(0, 256, shape, dtype=np.uint8)
    history = np.zeros((a.num_history, 4))
    history[:, 0] = np.linspace(-6.0, 0.0, a.num_history)
    for n in range(count):
        stamps = p.frame_dt * (n + np.arange(p.num_frames, dtype=np.float64))
        yield Window(t0=float(stamps[-1]), images=frames[:, n:n + p.num_frames],
                     image_stamps=np.tile(stamps, (shape[0], 1)), ego_history=history,
                     speed=6.0, sequence=n)


def measure(engine: Engine, warmup: int, count: int) -> dict[str, float]:
    plans = [engine.step(w) for w in windows(engine.model.cfg, warmup + count)][warmup:]
    row = {s: statistics.median(p.timings_ms[s] for p in plans) for s in STAGES}
    row["tokens"] = statistics.median(p.tokens_generated for p in plans)
    rounds = [n for p in plans for n in p.accepted_lengths]
    row["accepted"] = sum(rounds) / max(len(rounds), 1)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--windows", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device")
    dtype = getattr(torch, args.dtype)
    full_vocab = alpamayo_1_5_10b().text.vocab_size
    setups = [("tiny", padded_tokenizer(4600)),
              (f"alpamayo-1.5 full-size, {args.layers} layers", padded_tokenizer(full_vocab))]
    header = ("| model | steps | " + " | ".join(f"{s} ms" for s in STAGES)
              + " | CoC tokens | tokens/round |")
    print(f"\nGPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}, "
          f"median over {args.windows} streaming windows after {args.warmup} warm-up windows, "
          f"1 sample, random weights\n")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for name, tok in setups:
        cfg = (tiny(vocab_size=tok.vocab_size) if name == "tiny"
               else truncated_full_size(args.layers, tok.vocab_size))
        model, drafter = build(cfg, dtype)
        for graphs in (False, True):
            engine = Engine(model, tok, drafter,
                            EngineConfig(device="cuda", dtype=args.dtype, cuda_graphs=graphs))
            row = measure(engine, args.warmup, args.windows)
            cells = [f"{row[s]:.1f}" for s in STAGES]
            print(f"| {name} | {'CUDA graphs' if graphs else 'eager'} | " + " | ".join(cells)
                  + f" | {row['tokens']:.0f} | {row['accepted']:.2f} |", flush=True)
        del model, drafter, engine
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
