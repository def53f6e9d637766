"""flashdrive-export --model-dir DIR --out OUTDIR: ONNX graphs of the engine's steps, TensorRT
plans where TensorRT imports, and OUTDIR/manifest.json describing them.

The shapes come from the engine this model directory and engine settings give (cache
capacity, prompt and streaming prefill lengths, verify block, samples), so the graphs are
exactly the steps that engine runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch

from flashdrive_ros.backends.digest import graph_sha256
from flashdrive_ros.backends.engine_cache import PRECISIONS, EngineCache
from flashdrive_ros.backends.model_specs import model_specs
from flashdrive_ros.backends.onnx_export import MANIFEST_FILE, export_all
from flashdrive_ros.backends.op_check import tensorrt_problems
from flashdrive_ros.backends.specs import GraphSpec
from flashdrive_ros.backends.tensorrt_import import TensorRTUnavailable, require_tensorrt
from flashdrive_ros.backends.trt_builder import build_plan, engine_key
from flashdrive_ros.engine.config import DRAFTER_FILE, EngineConfig
from flashdrive_ros.engine.engine import Engine
from flashdrive_ros.settings import add_setting_argument


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="flashdrive-export", description=__doc__.split("\n")[0])
    parser.add_argument("--model-dir", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    add_setting_argument(parser, EngineConfig, "device", help="cpu or cuda[:N] (cuda for "
                         "plans)")
    add_setting_argument(parser, EngineConfig, "dtype")
    parser.add_argument("--precision", default=None, choices=PRECISIONS,
                        help="TensorRT precision flags (default: that of --dtype)")
    add_setting_argument(parser, EngineConfig, "num_samples")
    add_setting_argument(parser, EngineConfig, "max_coc_tokens", type=int,
                         help="CoC token limit (sets the KV cache capacity; default: model's)")
    return parser.parse_args(argv)


def build_engines(specs: list[GraphSpec], manifest: dict, out: Path, precision: str,
                  device: torch.device) -> list[dict]:
    """One plan per graph under OUTDIR/engines, through the engine cache."""
    trt = require_tensorrt()
    gpu = (torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device))
    cache = EngineCache(out / "engines")
    files = {g["name"]: out / g["file"] for g in manifest["graphs"]}
    engines = []
    for spec in specs:
        key = engine_key(spec, graph_sha256(files[spec.name]), precision, trt.__version__, *gpu)
        cache.get_or_build(spec.name, key, lambda: build_plan(files[spec.name], spec, precision))
        plan = cache.plan_path(spec.name, key)
        engines.append({"name": spec.name, "file": str(plan.relative_to(out)),
                        "key": key.to_dict(), "key_sha256": key.digest()})
    return engines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    speculative = (args.model_dir / DRAFTER_FILE).is_file()
    cfg = EngineConfig(device=args.device, dtype=args.dtype, speculative=speculative,
                       num_samples=args.num_samples, max_coc_tokens=args.max_coc_tokens,
                       cuda_graphs=False)
    engine = Engine.load(args.model_dir, cfg)
    shapes = engine.shapes()
    specs = model_specs(engine.model, engine.drafter, shapes)
    extra = {"model_dir": str(args.model_dir.resolve()), "model_name": engine.model.cfg.name,
             "dtype": args.dtype, "shapes": dataclasses.asdict(shapes)}
    manifest = export_all(specs, args.out, extra)
    failed = False
    for graph in manifest["graphs"]:
        graph["tensorrt_10_13_problems"] = tensorrt_problems(args.out / graph["file"])
        failed = failed or bool(graph["tensorrt_10_13_problems"])
        print(f"{graph['name']}: {graph['file']} sha256 {graph['sha256'][:16]} "
              f"problems {graph['tensorrt_10_13_problems'] or 'none'}")
    precision = args.precision or {"float32": "fp32", "float16": "fp16",
                                   "bfloat16": "bf16"}[args.dtype]
    try:
        if not args.device.startswith("cuda"):
            raise TensorRTUnavailable("TensorRT plans need --device cuda")
        manifest["engines"] = build_engines(specs, manifest, args.out, precision,
                                            torch.device(args.device))
        manifest["tensorrt"] = "built"
    except TensorRTUnavailable as exc:
        manifest["engines"] = []
        manifest["tensorrt"] = f"no plans built: {exc}"
        print(manifest["tensorrt"])
    (args.out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {args.out / MANIFEST_FILE}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
