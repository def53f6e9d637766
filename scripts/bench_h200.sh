#!/usr/bin/env bash
# Full-size (Alpamayo 1.5-10B shape, random weights, bf16) benchmark on one H200 GPU:
# HF transformers reference, baseline, each shortcut alone and all shortcuts, 1 and 6 samples.
# Writes $OUT/bench_h200/bench.json and tables.md; prints the tables last. Stays under 9 min:
# no variant starts after --budget-s, and a hard timeout prints the partial tables.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
out="${OUT:-out}/bench_h200"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if ! timeout --signal=INT 510 python3 -m flashdrive_ros.bench.cli \
        --shape alpamayo-1.5-10b --device cuda --out "$out" \
        --windows 24 --warmup 3 --samples 1,6 --coc-tokens 16 --budget-s 360 \
        > "$out/tables.md"; then
    echo "flashdrive-bench stopped early; tables of the partial bench.json follow" >&2
    python3 -m flashdrive_ros.bench.report "$out/bench.json" > "$out/tables.md"
fi
cat "$out/tables.md"
