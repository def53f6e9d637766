#!/usr/bin/env bash
# Drafter study on one H200 GPU, the target frozen (MODEL_DIR, default models/default; e.g.
# MODEL_DIR=out/retrain/model after scripts/retrain_h200.sh): greedy CoC corpus
# with whole-prompt features, SFT of DFlash flat, DFlash mrope and EAGLE-3, RL of the best SFT
# drafter (static and policy KL anchors), then accepted length at blocks 8 and 16 inside the
# engine on held-out drives, drafter/target cost ratio c, L/(1+c) and the first-layer attention
# budget. Writes $OUT/drafters/ (drafter_*.safetensors, study.json, study.md, train_log.jsonl,
# stdout.log) and prints study.md last. About 7 minutes; a hard stop at 560 s keeps the stages
# that finished (study.json and study.md are rewritten after every stage).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
out="${OUT:-out}/drafters"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
timeout --signal=INT 560 python3 -m flashdrive_ros.train.drafter_study \
    --model-dir "${MODEL_DIR:-models/default}" --out "$out" --minutes-budget 7 --device cuda \
    > "$out/stdout.log" 2>&1
status=$?
grep -v '^|' "$out/stdout.log" | tail -n 60
echo "drafter_study exit ${status}"
if [ -f "$out/study.md" ]; then
    cat "$out/study.md"
fi
exit "${status}"
