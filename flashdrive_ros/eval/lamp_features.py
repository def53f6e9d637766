"""Does the vision encoder see the lamp where the model does not read it? The lamp pairs of
held-out drives (sim/lamp_pairs.py: the end of a red-light wait with the ego moved back, once
under red and once with its signal head green) are rendered and encoded by the model's vision
encoder alone, and a logistic regression on the frozen image tokens of every camera is fitted
to the lamp's colour on the pairs of the first `train_share` of the seeds. On the rest it
reports, per gap from the front bumper to the line: `pairwise`, the share of pairs whose green
picture scores above its red one (the lamp is linearly readable), and `both_right`, the share
where both are classed right by the fitted threshold. Writes lamp_features.json and
lamp_features.md in OUT.

`python -m flashdrive_ros.eval.lamp_features --model-dir DIR --out DIR [--drives N]
[--first-seed N] [--seconds S] [--pairs-per-wait N] [--train-share F] [--l2 L]`
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from flashdrive_ros.eval.scene_probe import add_probe_arguments, held_out_seeds, \
    write_probe_report
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.drive import simulate
from flashdrive_ros.sim.lamp_pairs import LampPairs, pair_logs
from flashdrive_ros.sim.render import Renderer

JSON_FILE, MARKDOWN_FILE = "lamp_features.json", "lamp_features.md"
GAP_BINS_M = (0.0, 3.0, 5.0, 7.0, 9.0, 13.0)


def pair_features(model, seed: int, seconds: float, spec: LampPairs
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The seed's lamp pairs through the vision encoder: (features [2P, N_cam * T * D] of the
    last frame, red then green of each pair; gaps [P] front bumper to the line, m)."""
    from flashdrive_ros.model.preprocess import preprocess_images

    log = simulate(seed, seconds)
    logs = pair_logs(log, spec, np.random.default_rng([seed, 5]))
    cfg = model.cfg
    size = (cfg.prompt.image_height, cfg.prompt.image_width)
    renderer = Renderer(log.world)
    features = []
    for pair_log in logs:
        views = np.stack(renderer.render(pair_log.scenes[-1]))  # views: [N_cam, H, W, 3]
        patches, grid = preprocess_images(views, cfg.vision, size)
        with torch.no_grad():
            tokens, _ = model.vlm.visual(patches, grid)  # tokens: [N_cam * T, D]
        features.append(tokens.float().flatten().numpy())
    gaps = np.array([red.infos[-1].light_gap for red in logs[::2]], dtype=np.float64)
    if not features:
        return np.zeros((0, 0), dtype=np.float32), gaps
    return np.stack(features).astype(np.float32), gaps


def fit_lamp_reader(features: np.ndarray, l2: float) -> tuple[np.ndarray, float, np.ndarray,
                                                              np.ndarray]:
    """Logistic regression of the colour (red 0, green 1, alternating rows) on standardized
    features [2P, K] -> (weights [K], bias, mean [K], scale [K])."""
    x = torch.from_numpy(features).double()
    mean, scale = x.mean(0), x.std(0) + 1e-3
    x = (x - mean) / scale
    y = torch.arange(len(x), dtype=torch.float64) % 2
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    b = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=300, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(x @ w + b, y) \
            + l2 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return (w.detach().numpy(), float(b.detach()), mean.numpy(), scale.numpy())


def reader_scores(features: np.ndarray, reader: tuple) -> np.ndarray:
    """[2P] logits of green for features [2P, K]."""
    w, b, mean, scale = reader
    return ((features - mean) / scale) @ w + b


def summarize(scores: np.ndarray, gaps: np.ndarray) -> list[dict]:
    """Per GAP_BINS_M bin of the pairs' gaps: pairs, pairwise and both_right shares."""
    red, green = scores[0::2], scores[1::2]
    out = []
    for low, high in zip(GAP_BINS_M[:-1], GAP_BINS_M[1:]):
        inside = (gaps >= low) & (gaps < high)
        count = int(inside.sum())
        out.append({"gap_m": [low, high], "pairs": count,
                    "pairwise": round(float(np.mean(green[inside] > red[inside])), 3)
                    if count else None,
                    "both_right": round(float(np.mean((green[inside] > 0)
                                                      & (red[inside] < 0))), 3)
                    if count else None})
    return out


def markdown(summary: list[dict], model_dir: str, train_seeds: list[int],
             test_seeds: list[int]) -> str:
    lines = [f"# Lamp features: {model_dir}", "",
             f"Linear reader of the lamp on the frozen vision tokens, fitted on the lamp pairs of "
             f"seeds {train_seeds[0]} .. {train_seeds[-1]}, tested on {test_seeds[0]} .. "
             f"{test_seeds[-1]}.", "",
             "| gap front bumper to line (m) | pairs | green above red | both right |",
             "|---|---|---|---|"]
    for s in summary:
        low, high = s["gap_m"]
        cells = ["-" if s[k] is None else f"{s[k]:.2f}" for k in ("pairwise", "both_right")]
        lines.append(f"| {low:g}-{high:g} | {s['pairs']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def add_reader_arguments(parser: argparse.ArgumentParser) -> None:
    """The probe's arguments (40 drives by default) and those of the lamp pairs and the
    reader's fit."""
    add_probe_arguments(parser)
    parser.set_defaults(drives=40)
    parser.add_argument("--pairs-per-wait", type=int, default=6)
    parser.add_argument("--train-share", type=float, default=0.5,
                        help="share of the seeds (the first ones) the reader is fitted on")
    parser.add_argument("--l2", type=float, default=0.1, help="L2 weight of the reader's fit")


def reader_seeds(parser: argparse.ArgumentParser, args: argparse.Namespace
                 ) -> tuple[list[int], int]:
    """(the held-out seeds, how many of the first the reader is fitted on); a parser error
    for settings that leave one side empty or are out of range."""
    seeds = held_out_seeds(parser, args)
    split = int(round(args.train_share * len(seeds)))
    if not 0 < split < len(seeds) or args.pairs_per_wait < 1 or not args.l2 >= 0:
        parser.error("need seeds on both sides of --train-share, --pairs-per-wait >= 1, "
                     "--l2 >= 0")
    return seeds, split


def main(argv: list[str] | None = None) -> int:
    from flashdrive_ros.model.alpamayo import AlpamayoModel

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_reader_arguments(p)
    args = p.parse_args(argv)
    seeds, split = reader_seeds(p, args)
    model_dir = args.model_dir or default_model_dir()
    try:
        model = AlpamayoModel.from_dir(model_dir, device=args.device)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spec = LampPairs(per_wait=args.pairs_per_wait, green_frames=(1, 1))
    made = [pair_features(model, seed, args.seconds, spec) for seed in seeds]
    train = [f for f, _ in made[:split] if len(f)]
    test = [f for f, _ in made[split:] if len(f)]
    if not train or not test:
        print("error: no lamp pair on one side of the split (more --drives?)", file=sys.stderr)
        return 1
    train, test = np.concatenate(train), np.concatenate(test)
    reader = fit_lamp_reader(train, args.l2)
    summary = summarize(reader_scores(test, reader),
                        np.concatenate([g for _, g in made[split:]]))
    text = markdown(summary, str(model_dir), seeds[:split], seeds[split:])
    write_probe_report(args.out, JSON_FILE, MARKDOWN_FILE,
                       {"model_dir": str(model_dir), "train_seeds": seeds[:split],
                        "test_seeds": seeds[split:], "train_pairs": len(train) // 2,
                        "summary": summary}, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
