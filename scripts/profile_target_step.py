"""Time and profile target training steps of a recipe on the CPU (or a GPU).

    PYTHONPATH=. python scripts/profile_target_step.py [--smoke] [--batch 32] [--steps 3]
        [--flow-draws K] [--threads 1] [--device cpu] [--trace FILE]

Builds a training set from short simulator drives at the recipe's image size, then times
`--steps` full optimizer steps (after one warm-up step) of `target_train.target_step` and
prints the torch.profiler table of one more step (top operators by self time, with counts)
and how many aten operators that step dispatched (views included; on a GPU the others are
kernel launches).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from torch.profiler import ProfilerActivity, profile

from flashdrive_ros.model.alpamayo import AlpamayoModel
from flashdrive_ros.sim.seeds import train_seeds
from flashdrive_ros.train.dataset import TrainSet
from flashdrive_ros.train.generate import generate_drives
from flashdrive_ros.train.run_data import train_tokenizer
from flashdrive_ros.train.recipe import Recipe, smoke
from flashdrive_ros.train.target_train import target_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--drives", type=int, default=2)
    parser.add_argument("--drive-seconds", type=float, default=8.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--flow-draws", type=int, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--trace", default=None)
    args = parser.parse_args()
    recipe = smoke() if args.smoke else Recipe()
    draws = recipe.flow_draws if args.flow_draws is None else args.flow_draws
    device = torch.device(args.device)
    torch.manual_seed(0)
    probe = recipe.model_config(4096)
    drives = generate_drives(train_seeds(args.drives), args.drive_seconds, probe, 1)
    torch.set_num_threads(args.threads)
    tokenizer = train_tokenizer([c for d in drives for c in d.coc], recipe.bpe_tokens,
                                probe.action.num_traj_tokens)
    cfg = recipe.model_config(tokenizer.vocab_size)
    data = TrainSet.build(cfg, tokenizer, drives, device=device)
    model = AlpamayoModel(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.target_lr, fused=True)
    gen = torch.Generator(device=device).manual_seed(0)
    pick = torch.Generator().manual_seed(0)
    cuda = device.type == "cuda"
    autocast = ((lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if cuda
                else contextlib.nullcontext)
    cache_dtype = torch.bfloat16 if cuda else torch.float32

    def step() -> None:
        rows = torch.randint(len(data), (args.batch,), generator=pick)
        target_step(model, opt, data, rows, device, autocast, cache_dtype, gen,
                    recipe.flow_weight, recipe.decision.token_weight, draws)
        if cuda:
            torch.cuda.synchronize()

    step()
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    per_step = min(times)
    print(f"{cfg.name} batch {args.batch}, {draws} flow draws on {device}: {per_step:.3f} s "
          f"per step (fastest of {args.steps}; mean {sum(times) / len(times):.3f} s; "
          f"{torch.get_num_threads()} threads)")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=False) as prof:
        step()
    events = prof.key_averages()
    print(f"aten operators dispatched in one step: "
          f"{sum(e.count for e in events if e.key.startswith('aten::'))}")
    print(events.table(sort_by="self_cpu_time_total", row_limit=40))
    if args.trace:
        prof.export_chrome_trace(args.trace)


if __name__ == "__main__":
    main()
