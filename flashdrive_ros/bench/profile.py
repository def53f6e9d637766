"""Where one engine variant's time goes: torch.profiler over sliding windows at a bench shape.

Prints the per-stage wall time (profiler ranges `stage:*`, CPU side) and the CUDA kernels
that take the most device time, for every valid combination of the `--graphs`,
`--rotated-keys`, `--staged-prefix`, `--action-attention`, `--compiled-expert` and
`--compiled-backbone` values given (one model build).
With CUDA graphs on, kernels inside graphs appear as graph launches; profile with `--graphs
off` to see them.

    python -m flashdrive_ros.bench.profile --shape alpamayo-1.5-10b --device cuda \
        --graphs off,on --rotated-keys on,off
    python -m flashdrive_ros.bench.profile --shape alpamayo-1.5-10b --device cuda \
        --graphs off,on --stage action --staged-prefix on,off
    python -m flashdrive_ros.bench.profile --shape alpamayo-1.5-10b --device cuda \
        --graphs on --stage action --action-attention masked,flex
    python -m flashdrive_ros.bench.profile --shape alpamayo-1.5-10b --device cuda \
        --graphs on --stage action --compiled-expert off,on
    python -m flashdrive_ros.bench.profile --shape alpamayo-1.5-10b --device cuda \
        --graphs on --compiled-backbone off,on

`--stage action` profiles only the action stage (flow matching) of each window, reasoned
outside the profiler: one profiler per window's action stage, their averages summed (a
profiler toggled off and on inside one session dropped the CUDA kernels).
"""

from __future__ import annotations

import argparse
import itertools

import torch
from torch.autograd.profiler_util import EventList, FunctionEventAvg
from torch.profiler import ProfilerActivity, profile

from flashdrive_ros.bench.shapes import SHAPES, build_parts
from flashdrive_ros.bench.windows import SlidingWindows
from flashdrive_ros.engine.config import DTYPES, EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.model.cache_attention import ACTION_ATTENTION
from flashdrive_ros.model.config import ConfigError
from flashdrive_ros.settings import add_setting_argument

STAGES = ("all", "action")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=SHAPES, default="tiny")
    parser.add_argument("--device", default="cpu")
    add_setting_argument(parser, EngineConfig, "dtype", default=None,
                         help="default: bfloat16 on CUDA, float32 on the CPU")
    add_setting_argument(parser, EngineConfig, "mode")
    parser.add_argument("--graphs", type=switch_values, default=["off"],
                        help="on, off or on,off")
    parser.add_argument("--rotated-keys", type=switch_values, default=["on"],
                        help="on, off or on,off")
    parser.add_argument("--staged-prefix", type=switch_values, default=["on"],
                        help="on, off or on,off")
    parser.add_argument("--action-attention", type=attention_values, default=["masked"],
                        help=f"one or more of {','.join(ACTION_ATTENTION)}, comma-separated")
    parser.add_argument("--compiled-expert", type=switch_values, default=["off"],
                        help="on, off or on,off")
    parser.add_argument("--compiled-backbone", type=switch_values, default=["off"],
                        help="on, off or on,off")
    parser.add_argument("--stage", choices=STAGES, default="all",
                        help="all: whole windows; action: only their action stage")
    parser.add_argument("--coc-tokens", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (default: torch's own choice)")
    return parser.parse_args(argv)


def switch_values(text: str) -> list[str]:
    values = text.split(",")
    if not values or any(v not in ("on", "off") for v in values):
        raise argparse.ArgumentTypeError(f"expected on, off or on,off; got {text!r}")
    return values


def attention_values(text: str) -> list[str]:
    values = text.split(",")
    if any(v not in ACTION_ATTENTION for v in values):
        raise argparse.ArgumentTypeError(f"expected values of {ACTION_ATTENTION}; got {text!r}")
    return values


def engine_config(args: argparse.Namespace, dtype: str, graphs: str, rotated: str,
                  staged: str, attention: str = "masked", compiled_expert: str = "off",
                  compiled_backbone: str = "off") -> EngineConfig:
    common = dict(mode=args.mode, device=args.device, dtype=dtype,
                  max_coc_tokens=args.coc_tokens, coc_reuse=False)
    if args.mode == "baseline":
        return EngineConfig(**common)
    return EngineConfig(cuda_graphs=graphs == "on", rotated_keys=rotated == "on",
                        staged_prefix=staged == "on", action_attention=attention,
                        compiled_expert=compiled_expert == "on",
                        compiled_backbone=compiled_backbone == "on", **common)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    parts = build_parts(args.shape, args.device, DTYPES[dtype])
    for switches in itertools.product(args.graphs, args.rotated_keys, args.staged_prefix,
                                      args.action_attention, args.compiled_expert,
                                      args.compiled_backbone):
        try:
            cfg = engine_config(args, dtype, *switches)
        except ConfigError as exc:
            print(f"\nskipped graphs/rotated/staged/attention/compiled expert/compiled backbone "
                  f"{'/'.join(switches)}: {exc}")
            continue
        profile_variant(args, parts, cfg)
    return 0


def profile_variant(args: argparse.Namespace, parts, cfg: EngineConfig) -> None:
    engine = Engine(parts.model, parts.tokenizer, parts.drafter, cfg)
    drive = SlidingWindows(parts.cfg)
    for window in drive.take(args.warmup):
        engine.step(window)
    cuda = args.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    plans = []
    if args.stage == "action":
        totals: dict[str, FunctionEventAvg] = {}
        for window in drive.take(args.windows):
            reasoning = engine.reason(window)
            with profile(activities=activities) as prof:
                plans.append(engine.act(reasoning))
            for avg in prof.key_averages():
                if avg.key in totals:
                    totals[avg.key].add(avg)
                else:
                    totals[avg.key] = avg
        events = EventList(list(totals.values()), use_device="cuda" if cuda else None)
    else:
        with profile(activities=activities) as prof:
            for window in drive.take(args.windows):
                plans.append(engine.step(window))
        events = prof.key_averages()
    print(f"\n{args.shape} {cfg.mode} stage {args.stage} cuda_graphs={cfg.cuda_graphs} "
          f"rotated_keys={cfg.rotated_keys} staged_prefix={cfg.staged_prefix} "
          f"action_attention={cfg.action_attention} compiled_expert={cfg.compiled_expert} "
          f"compiled_backbone={cfg.compiled_backbone} {cfg.dtype} on "
          f"{args.device}, {args.windows} "
          f"windows after {args.warmup}")
    for name in ("encode", "prefill", "decode", "action", "total"):
        values = sorted(p.timings_ms[name] for p in plans)
        print(f"  {name:8s} median {values[len(values) // 2]:9.2f} ms")
    print(f"  rounds per window {sum(len(p.accepted_lengths) for p in plans) / len(plans):.1f}")
    stages = [e for e in events if e.key.startswith("stage:")]
    for e in sorted(stages, key=lambda e: e.key):
        print(f"  {e.key:16s} cpu {e.cpu_time_total / 1e3 / args.windows:9.2f} ms/window")
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(events.table(sort_by=sort, row_limit=args.top, max_name_column_width=60), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
