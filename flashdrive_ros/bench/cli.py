"""flashdrive-bench: per-stage latency of the reference path, the baseline and every shortcut
at a model shape with random weights; writes OUTDIR/bench.json and prints markdown tables."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import torch

from flashdrive_ros.backends.tensorrt_import import TensorRTUnavailable, require_tensorrt
from flashdrive_ros.bench.report import markdown
from flashdrive_ros.bench.shapes import SHAPES
from flashdrive_ros.bench.suite import Settings, run_suite
from flashdrive_ros.bench.variants import VARIANT_NAMES
from flashdrive_ros.engine.config import EngineConfig
from flashdrive_ros.settings import add_setting_argument

BENCH_FILE = "bench.json"
DEFAULT_COC_TOKENS = 16


def sample_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--samples takes integers like 1,6, got {text!r}")
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("--samples needs counts >= 1")
    return counts


def variant_names(text: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    unknown = sorted(set(names) - set(VARIANT_NAMES))
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"--variants takes names from {', '.join(VARIANT_NAMES)}; got {text!r}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="flashdrive-bench", description=__doc__)
    parser.add_argument("--shape", required=True, choices=SHAPES)
    parser.add_argument("--device", required=True, choices=("cuda", "cpu"))
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--windows", type=int, default=120, help="timed windows per variant")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed windows first (>= 1: the first is a full prefill)")
    parser.add_argument("--samples", type=sample_counts, default=[1, 6],
                        help="trajectory sample counts, comma-separated")
    parser.add_argument("--coc-tokens", type=int, default=DEFAULT_COC_TOKENS,
                        help="CoC tokens every window decodes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no further variant after this many seconds")
    parser.add_argument("--reference-windows", type=int, default=None,
                        help="timed windows of the reference path (default: --windows)")
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the HF transformers reference path")
    parser.add_argument("--variants", type=variant_names, default=None,
                        help="engine variants to time, comma-separated (default: all of "
                             f"{', '.join(VARIANT_NAMES)})")
    add_setting_argument(parser, EngineConfig, "backend",
                         help="encoder and backbone steps of the engine variants in torch, or "
                              "as TensorRT engines (CUDA)")
    args = parser.parse_args(argv)
    if args.windows < 1 or args.warmup < 1 or args.coc_tokens < 2 or (
            args.threads is not None and args.threads < 1) or (
            args.reference_windows is not None and args.reference_windows < 1):
        parser.error("--windows >= 1, --warmup >= 1, --coc-tokens >= 2, --threads >= 1 and "
                     "--reference-windows >= 1 are required")
    if args.backend == "tensorrt":
        if args.device != "cuda":
            parser.error("--backend tensorrt needs --device cuda")
        try:
            require_tensorrt()
        except TensorRTUnavailable as exc:
            parser.error(str(exc))
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but CUDA is not available")
    return args


def write_json(path: Path, bench: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(bench, indent=2) + "\n")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / BENCH_FILE
    command = shlex.join(["flashdrive-bench", *(sys.argv[1:] if argv is None else argv)])
    settings = Settings(args.shape, args.device, args.windows, args.warmup, args.samples,
                        args.coc_tokens, args.seed, not args.no_reference, args.budget_s,
                        args.backend, args.variants, args.reference_windows)

    def progress(bench: dict) -> None:
        write_json(path, bench)
        done = ", ".join(bench["variants"])
        print(f"flashdrive-bench: measured {done}", file=sys.stderr, flush=True)

    bench = run_suite(settings, command, progress)
    write_json(path, bench)
    print(markdown(bench), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
