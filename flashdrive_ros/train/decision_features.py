"""Does the language model carry the lamp to where it decides? The lamp pairs of held-out drives
(sim/lamp_pairs.py, the last frame green in the green twin) are built as training windows and
run through the whole backbone; at the last prompt token, whose logits give the CoC's first
(deciding) token, a logistic regression of the lamp's colour is fitted on the hidden state
after each decoder layer and after the final norm, on the pairs of the first `train_share` of
the seeds, and scored on the rest per gap from the front bumper to the line, as
eval.lamp_features does on the vision tokens. Writes decision_features.json and
decision_features.md in OUT.

`python -m flashdrive_ros.train.decision_features --model-dir DIR --out DIR [--drives N]
[--first-seed N] [--seconds S] [--pairs-per-wait N] [--train-share F] [--l2 L] [--workers W]`
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from flashdrive_ros.eval.lamp_features import (
    add_reader_arguments,
    fit_lamp_reader,
    reader_scores,
    reader_seeds,
    summarize,
)
from flashdrive_ros.eval.scene_probe import write_probe_report
from flashdrive_ros.paths import default_model_dir
from flashdrive_ros.sim.lamp_pairs import LampPairs
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.drive import SCENE_COLUMNS, Drive
from flashdrive_ros.train.generate import lamp_pair_drives
from flashdrive_ros.train.target_losses import run_backbone
from flashdrive_ros.train.warm_start import ACTION_STATS

JSON_FILE, MARKDOWN_FILE = "decision_features.json", "decision_features.md"
FINAL = "final"
LIGHT_GAP = SCENE_COLUMNS.index("light_gap_m")


@torch.no_grad()
def decision_states(model, tokenizer, drives: list[Drive], device: torch.device | str,
                    batch_size: int = 16) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The last window of each drive through the backbone -> ({layer name (the decoder
    layer's index, or FINAL after the final norm): [N, H] float32 hidden state at the last
    prompt token}, [N, 4] scene readings of those windows)."""
    cfg = model.cfg
    stats = {key: getattr(cfg.action, key) for key in ACTION_STATS}
    data = TrainSet.build(cfg, tokenizer, drives, stats=stats, device=device)
    last_of_drive = np.append(data.drive_of[1:] != data.drive_of[:-1], True)  # [N] bool
    rows = torch.as_tensor(np.flatnonzero(last_of_drive), dtype=torch.long)
    layers = tuple(range(cfg.text.num_hidden_layers))
    parts: dict[str, list[np.ndarray]] = {**{str(i): [] for i in layers}, FINAL: []}
    last = data.prompt_len - 1
    for start in range(0, len(rows), batch_size):
        batch = data.batch(rows[start:start + batch_size], device, with_coc=False)
        out, _ = run_backbone(model, batch, data.image_token_id, torch.float32, grad=False,
                              output_layers=layers)
        for i in layers:
            parts[str(i)].append(out.layer_hidden[i][:, last].float().cpu().numpy())
        parts[FINAL].append(out.hidden[:, last].float().cpu().numpy())
    return ({name: np.concatenate(p) for name, p in parts.items()},
            data.scene[rows].numpy())


def layer_summaries(train: dict[str, np.ndarray], test: dict[str, np.ndarray],
                    test_gaps: np.ndarray, l2: float) -> dict[str, list[dict]]:
    """Per layer name: the reader fitted on `train` ([2P, H], red then green of each pair)
    scored on `test` per gap bin (eval.lamp_features.summarize)."""
    return {name: summarize(reader_scores(test[name], fit_lamp_reader(train[name], l2)),
                            test_gaps) for name in train}


def markdown(summaries: dict[str, list[dict]], model_dir: str, train_seeds: list[int],
             test_seeds: list[int]) -> str:
    names = list(summaries)
    lines = [f"# Decision features: {model_dir}", "",
             f"Linear reader of the lamp on the hidden state at the last prompt token after "
             f"each decoder layer, fitted on the lamp pairs of seeds {train_seeds[0]} .. "
             f"{train_seeds[-1]}, tested on {test_seeds[0]} .. {test_seeds[-1]}. Each cell: "
             f"green above red / both right.", "",
             "| gap front bumper to line (m) | pairs | " + " | ".join(
                 f"layer {n}" if n != FINAL else "final norm" for n in names) + " |",
             "|---|---|" + "---|" * len(names)]
    for k, first in enumerate(summaries[names[0]]):
        low, high = first["gap_m"]
        cells = []
        for name in names:
            s = summaries[name][k]
            cells.append("-" if s["pairwise"] is None
                         else f"{s['pairwise']:.2f} / {s['both_right']:.2f}")
        lines.append(f"| {low:g}-{high:g} | {first['pairs']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from flashdrive_ros.model.alpamayo import AlpamayoModel
    from flashdrive_ros.model.release_tokenizer import load_tokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_reader_arguments(p)
    p.add_argument("--workers", type=int, default=None, help="processes rendering the pairs")
    args = p.parse_args(argv)
    seeds, split = reader_seeds(p, args)
    model_dir = args.model_dir or default_model_dir()
    try:
        model = AlpamayoModel.from_dir(model_dir, device=args.device)
        tokenizer = load_tokenizer(model_dir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    model.eval()
    spec = LampPairs(per_wait=args.pairs_per_wait, green_frames=(1, 1))
    sides = []
    for part in (seeds[:split], seeds[split:]):
        drives = lamp_pair_drives(part, args.seconds, model.cfg, spec, workers=args.workers)
        sides.append(decision_states(model, tokenizer, drives, args.device) if drives
                     else None)
    if sides[0] is None or sides[1] is None:
        print("error: no lamp pair on one side of the split (more --drives?)", file=sys.stderr)
        return 1
    (train, _), (test, test_scene) = sides
    summaries = layer_summaries(train, test, test_scene[0::2, LIGHT_GAP], args.l2)
    text = markdown(summaries, str(model_dir), seeds[:split], seeds[split:])
    write_probe_report(args.out, JSON_FILE, MARKDOWN_FILE,
                       {"model_dir": str(model_dir), "train_seeds": seeds[:split],
                        "test_seeds": seeds[split:],
                        "train_pairs": len(train[FINAL]) // 2, "summaries": summaries}, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
