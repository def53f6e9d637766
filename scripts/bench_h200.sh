#!/usr/bin/env bash
# Full-size (Alpamayo 1.5-10B shape, random weights, bf16) benchmark on one H200 GPU in one
# call of at most 9 minutes: the CUDA-graph variants first (all shortcuts; at accepted length
# 5.6 / block 8 and 11.5 / block 16; flex verify attention; FP8 backbone weights), then the
# HF reference on fewer windows, the baseline and each shortcut alone, 1 and 6 samples.
# Writes $OUT/bench_h200/bench.json and tables.md and prints the tables last. A variant whose
# windows would not fit in the budget runs fewer or is skipped with the reason; a hard
# timeout (TIMEOUT_S, default 520 s) prints the partial tables. SHAPE / DEVICE / WINDOWS /
# BUDGET_S override the defaults (e.g. SHAPE=tiny DEVICE=cpu for a check of the whole run on
# a CPU; BUDGET_S=280 TIMEOUT_S=380 for a call with less device time left). VARIANTS (comma-
# separated engine variants) times those alone, the reference right before `baseline` (or
# last without it): the whole list took 440 s for its first six variants on an H100, so the
# reference in the same run needs a shorter list, e.g.
#   VARIANTS=flashdrive_flex_verify_compiled_expert_at_5.6_block8,flashdrive_compiled_at_5.6_block8,baseline
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
shape="${SHAPE:-alpamayo-1.5-10b}"
device="${DEVICE:-cuda}"
out="${OUT:-out}/bench_h200"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if ! timeout --signal=INT "${TIMEOUT_S:-520}" python3 -m flashdrive_ros.bench.cli \
        --shape "$shape" --device "$device" --out "$out" \
        --windows "${WINDOWS:-12}" --warmup 3 --samples 1,6 --coc-tokens 16 \
        --reference-windows 4 --budget-s "${BUDGET_S:-440}" \
        ${VARIANTS:+--variants "$VARIANTS"} \
        > "$out/tables.md"; then
    echo "flashdrive-bench stopped early; tables of the partial bench.json follow" >&2
    python3 -m flashdrive_ros.bench.report "$out/bench.json" > "$out/tables.md"
fi
cat "$out/tables.md"
