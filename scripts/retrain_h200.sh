#!/usr/bin/env bash
# Retrain the embedded model on one H200 (training pipeline with the recipe's decision focus)
# and evaluate it on the 16 held-out 60 s drives 1000100..1000115 on the host's CPU cores.
#
#   bash scripts/retrain_h200.sh [all|train|target|resume|eval|drive|soup|policy|forks|probe|dagger|data]
#
# all    (default; one call, <= 9.5 min): pipeline with a TRAIN_MINUTES (5.5) budget, then the
#        16 drives with streaming only (the full-prefill replay does not fit in the same call).
# train  (one call, <= 9.5 min): the pipeline with an 8.7-minute budget (the 9-minute recipe
#        overran its budget by up to 9 s).
#        With TRAIN_ARGS="--init-from models/default --target-lr 2e-4" it fine-tunes the
#        shipped model (its tokenizer, action normalization, weights and drafters) on the
#        recipe's data in that one call (train/warm_start.py). A chain of such calls, each
#        from the model the last one brought back (carried in), adds --train-seed-offset
#        56, 112, ... so that every call trains on drives of its own.
# target (call 1 of 3, <= 9.5 min): data (drives cached under out/retrain_target/resume/drives),
#        tokenizer and the target stage on a TARGET_MINUTES (7.5) schedule, which this call
#        does not finish; checkpoint in out/retrain_target/resume.
# resume (call 2 of 3, <= 9.5 min): goes on from that checkpoint, ends the target schedule and
#        runs the later stages (streaming-aware backbone, drafters, streaming expert) on the
#        final target with the LATER_MINUTES (4) the recipe keeps for them; model in
#        out/retrain/model. Exit 3 if the target schedule did not end (then run resume again:
#        it goes on from out/retrain).
# eval   (the next call on the same warm machine, about 7 min): the 16 drives with streaming
#        and full prefill on the model of the last train or resume call, or on MODEL_DIR
#        (a carried model directory, e.g. one unpacked from an earlier call).
# policy (a call before `target`, <= 9.5 min): closed-loop drives of POLICY_MODEL
#        (models/default) labelled by the expert, DRIVES of SECONDS_PER_DRIVE, written to
#        out/policy_drives; then `TRAIN_ARGS="--extra-drives out/policy_drives" ... target`
#        trains on them besides the recipe's drives (DAgger-style data).
# forks  (a call before `train` or `target`, about 5 min for 120 seeds on 16 cores): the
#        lead-stop forks of FORK_SEEDS (120) training seeds from FORK_OFFSET (1024), 3 per
#        drive, written to out/lead_stop_drives (train/lead_stop_cache.py; FORK_ARGS adds
#        its options, e.g. "--moving-twin on"); then
#        `TRAIN_ARGS="--extra-drives out/lead_stop_drives --train-seed-offset N ..." train`
#        trains on them besides the recipe's drives, N past FORK_OFFSET + FORK_SEEDS.
# dagger (one call, <= 9.5 min): policy drives of POLICY_MODEL (DRIVES of SECONDS_PER_DRIVE,
#        from training seed POLICY_SEED_OFFSET, default 50000), then the pipeline on TRAIN_ARGS
#        plus --extra-drives out/policy_drives with TRAIN_MINUTES (4) in the same call: with
#        TRAIN_ARGS="--init-from models/default --target-lr 2e-4 ..." a DAgger round of the
#        shipped model in one call (the policy drives stay on the machine, too large to bring
#        back). Comes back as the train phase does, with policy_coverage.md.
# data   (a call before `train`, <= 9.5 min, no GPU work): the lead-stop forks as `forks`
#        makes them (FORK_SEEDS, FORK_OFFSET, FORK_ARGS) and beside them the drives of the
#        recipe of TRAIN_ARGS (pipeline --stages data, into out/retrain_data); then
#        `TRAIN_ARGS="<the same> --drives-from out/retrain_data" train` spends its whole call
#        on training (its --extra-drives out/lead_stop_drives are read as usual). FORK_SEEDS=0
#        leaves out/lead_stop_drives as an earlier `forks` call wrote it (the two in two calls).
# drive  (a call on the same warm machine): the closed-loop benchmark on that model,
#        DRIVES drives of SECONDS_PER_DRIVE from seed DRIVE_SEED (1000000) in flashdrive mode
#        at 128 ms latency (flashdrive-drive); run it beside `eval` with WORKERS splitting the
#        cores between them. MODEL_DIR as for eval.
# soup   (a call on the same warm machine, about 5 min for 24 drives each): the 50/50 average
#        of models/default and that model (train/average_models.py, into out/retrain/soup),
#        then the closed-loop benchmark of both side by side, WORKERS each (default half the
#        cores), as `drive` does: reports in closed_loop_finetune/ and closed_loop_soup/.
#        MODEL_DIR as for eval.
# probe  (a call on the same warm machine, a few minutes): the lamp probe and the lead probe
#        on that model side by side (eval/lamp_probe.py: the red-light waits of DRIVES
#        held-out drives from 1000100 planned standing under red and under green;
#        eval/lead_probe.py: their leads, the ego coming up behind them standing and
#        moving), and beside them the fork probe on the GPU (eval/fork_probe.py: the
#        lead-stop forks of FORK_DRIVES (8) held-out drives from 1000100 planned under the
#        expert's CoC: does the plan end behind the standing car). MODEL_DIR as for eval.
# The run directories (out/retrain, out/retrain_target) are ignored by git, so they stay on
# the machine between calls while it is held; a machine given back between `target` and
# `resume` takes the checkpoint with it (~100 MB with the optimizer state, and the drive
# cache it reads, too large to bring back), and `target` must run again.
# Comes back under $OUT: retrain_<phase>.tar.gz (summary.json, coverage.md, train_log.jsonl,
# held_out.json, held_out.md, the logs, and the model directory but model.safetensors) and
# model.safetensors (beside the tarball: the tarball with it would pass the 16 MiB per file).
# Each stage runs under a deadline (TOTAL_S, default 565 s from the start) so the tarball is
# always written. A CPU check of the script itself (tiny smoke model, one 10 s drive):
#   PYTHON=.venv/bin/python DEVICE=cpu TRAIN_ARGS=--smoke DRIVES=1 SECONDS_PER_DRIVE=10 \
#       OUT=/tmp/rt bash scripts/retrain_h200.sh
# and of the three-call form: the same with `target`, then `resume` (TRAIN_ARGS only reaches
# the target call; resume takes the recipe of the run it resumes), then `eval`.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=. PYTHONUNBUFFERED=1
phase="${1:-all}"
start=$(date +%s)
total_s="${TOTAL_S:-565}"
run_dir="out/retrain"
target_dir="out/retrain_target"
data_dir="out/retrain_data"
out="${OUT:-out}"
logs="${run_dir}/logs"
python="${PYTHON:-python3}"
device="${DEVICE:-cuda}"
drives="${DRIVES:-16}"
seconds="${SECONDS_PER_DRIVE:-60}"
read -r -a train_args <<< "${TRAIN_ARGS:-}"
read -r -a fork_args <<< "${FORK_ARGS:-}"
workers="${WORKERS:-$(( $(nproc) < drives ? $(nproc) : drives ))}"
model_dir="${MODEL_DIR:-${run_dir}/model}"
own_model=true
[ -n "${MODEL_DIR:-}" ] && own_model=false

left() { echo $(( start + total_s - $(date +%s) - ${1:-0} )); }

# run_module LOG MARGIN_S MODULE ARGS...: python -m MODULE under the call's deadline less
# MARGIN_S, output to LOG; its exit status
run_module() {
    local log="$1" margin="$2"
    shift 2
    timeout --signal=INT --kill-after=10 "$(left "${margin}")" "${python}" -m "$@" > "${log}" 2>&1
}

train() {
    local minutes="$1"
    shift
    rm -rf "${run_dir}"
    mkdir -p "${logs}"
    run_module "${logs}/train.log" 20 flashdrive_ros.train.pipeline \
        --out "${run_dir}" --minutes-budget "${minutes}" --device "${device}" "$@"
    local status=$?
    tail -n 40 "${logs}/train.log"
    echo "pipeline exit ${status} after $(( $(date +%s) - start )) s"
    return "${status}"
}

have_model() {
    if [ ! -f "${model_dir}/config.json" ]; then
        echo "no model in ${model_dir} (run the train phase first, or set MODEL_DIR)"
        return 2
    fi
    mkdir -p "${logs}"
}

evaluate() {
    local extra=("$@")
    have_model || return 2
    run_module "${logs}/held_out_${phase}.log" 15 flashdrive_ros.eval.held_out_drives \
        --model-dir "${model_dir}" --out "${run_dir}/held_out" --drives "${drives}" \
        --seconds "${seconds}" \
        --first-seed 1000100 --workers "${workers}" --threads 1 --device cpu "${extra[@]}"
    local status=$?
    cat "${run_dir}/held_out/held_out.md" 2>/dev/null || tail -n 40 "${logs}/held_out_${phase}.log"
    echo "held-out evaluation exit ${status} after $(( $(date +%s) - start )) s"
    return "${status}"
}

# closed_loop [MODEL NAME WORKERS]: the closed-loop benchmark of MODEL (default the phase's
# model) into ${run_dir}/NAME (default closed_loop)
closed_loop() {
    have_model || return 2
    local model="${1:-${model_dir}}" name="${2:-closed_loop}" cores="${3:-${workers}}"
    rm -rf "${run_dir:?}/${name}"
    run_module "${logs}/${name}.log" 15 flashdrive_ros.closed_loop.cli \
        --model-dir "${model}" --seconds "${seconds}" --seed "${DRIVE_SEED:-1000000}" \
        --drives "${drives}" --variants flashdrive --latency-ms 128 --workers "${cores}" \
        --threads 1 --no-pictures --plan-trace --out "${run_dir}/${name}"
    local status=$?
    tail -n 60 "${logs}/${name}.log"
    echo "closed loop ${name} exit ${status} after $(( $(date +%s) - start )) s"
    return "${status}"
}

soup_drives() {
    have_model || return 2
    rm -rf "${run_dir}/soup"
    "${python}" -m flashdrive_ros.train.average_models --model-dir models/default \
        --model-dir "${model_dir}" --weights 0.5,0.5 --out "${run_dir}/soup" || return 2
    local half=$(( ($(nproc) + 1) / 2 ))
    closed_loop "${model_dir}" closed_loop_finetune "${WORKERS:-${half}}" &
    local finetune=$!
    closed_loop "${run_dir}/soup/model" closed_loop_soup "${WORKERS:-${half}}"
    local status=$?
    wait "${finetune}" || status=$?
    return "${status}"
}

# scene_probe NAME [DRIVES DEVICE]: flashdrive_ros.eval.NAME (lamp_probe, lead_probe,
# fork_probe) on the phase's model over DRIVES (default ${drives}) held-out drives on DEVICE
# (default cpu) into ${run_dir}/NAME
scene_probe() {
    local name="$1" count="${2:-${drives}}" on="${3:-cpu}"
    have_model || return 2
    run_module "${logs}/${name}.log" 15 "flashdrive_ros.eval.${name}" \
        --model-dir "${model_dir}" --out "${run_dir}/${name}" --drives "${count}" \
        --seconds "${seconds}" --device "${on}"
    local status=$?
    tail -n 20 "${logs}/${name}.log"
    echo "${name} exit ${status} after $(( $(date +%s) - start )) s"
    return "${status}"
}

policy_drives() {
    mkdir -p "${logs}"
    rm -rf out/policy_drives
    run_module "${logs}/policy_drives.log" 15 flashdrive_ros.train.policy_drives \
        --model-dir "${POLICY_MODEL:-models/default}" --out out/policy_drives \
        --drives "${drives}" --seconds "${seconds}" --workers "${workers}" \
        --seed-offset "${POLICY_SEED_OFFSET:-50000}"
    local status=$?
    tail -n 40 "${logs}/policy_drives.log"
    cp out/policy_drives/coverage.md "${run_dir}/policy_coverage.md" 2>/dev/null
    echo "policy drives exit ${status} after $(( $(date +%s) - start )) s"
    return "${status}"
}

lead_stop_forks() {
    mkdir -p "${logs}"
    rm -rf out/lead_stop_drives
    run_module "${logs}/lead_stop_drives.log" 15 flashdrive_ros.train.lead_stop_cache \
        --out out/lead_stop_drives --seeds "${FORK_SEEDS:-120}" \
        --seed-offset "${FORK_OFFSET:-1024}" --per-drive 3 --workers "$(nproc)" "${fork_args[@]}"
    local status=$?
    tail -n 30 "${logs}/lead_stop_drives.log"
    cp out/lead_stop_drives/coverage.md "${run_dir}/lead_stop_coverage.md" 2>/dev/null
    echo "lead-stop forks exit ${status} after $(( $(date +%s) - start )) s"
    return "${status}"
}

simulate() {
    mkdir -p "${logs}"
    rm -rf "${data_dir}"
    run_module "${logs}/data.log" 15 flashdrive_ros.train.pipeline --out "${data_dir}" \
        --stages data --workers "$(nproc)" "${train_args[@]}"
    local status=$?
    tail -n 20 "${logs}/data.log"
    cp "${data_dir}/summary.json" "${run_dir}/data_summary.json" 2>/dev/null
    echo "simulated drives exit ${status} after $(( $(date +%s) - start )) s"
    return "${status}"
}

pack() {
    mkdir -p "${out}"
    local files=() wanted=(summary.json coverage.md train_log.jsonl logs held_out/held_out.json
                           held_out/held_out.md closed_loop/report.json closed_loop/report.md
                           lamp_probe/lamp_probe.json lamp_probe/lamp_probe.md
                           lead_probe/lead_probe.json lead_probe/lead_probe.md
                           fork_probe/fork_probe.json fork_probe/fork_probe.md
                           policy_coverage.md lead_stop_coverage.md
                           logs/lead_stop_drives.log data_summary.json logs/data.log
                           closed_loop_finetune/report.json
                           closed_loop_finetune/report.md closed_loop_soup/report.json
                           closed_loop_soup/report.md logs/closed_loop_finetune.log
                           logs/closed_loop_soup.log)
    if "${own_model}"; then
        wanted+=(model/config.json model/tokenizer.json model/manifest.json
                 model/drafter.safetensors model/drafter_mrope.safetensors)
    else
        wanted=("logs/held_out_${phase}.log" logs/closed_loop.log held_out/held_out.json
                held_out/held_out.md closed_loop/report.json closed_loop/report.md
                lamp_probe/lamp_probe.json lamp_probe/lamp_probe.md
                lead_probe/lead_probe.json lead_probe/lead_probe.md
                fork_probe/fork_probe.json fork_probe/fork_probe.md
                closed_loop_finetune/report.json closed_loop_finetune/report.md
                closed_loop_soup/report.json closed_loop_soup/report.md
                logs/closed_loop_finetune.log logs/closed_loop_soup.log)
    fi
    for f in "${wanted[@]}"; do
        [ -e "${run_dir}/${f}" ] && files+=("${f}")
    done
    tar -czf "${out}/retrain_${phase}.tar.gz" -C "${run_dir}" "${files[@]}"
    if "${own_model}" && [ -f "${run_dir}/model/model.safetensors" ]; then
        cp "${run_dir}/model/model.safetensors" "${out}/"
    fi
    ls -l "${out}"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
status=0
case "${phase}" in
    all)
        train "${TRAIN_MINUTES:-5.5}" "${train_args[@]}" || status=$?
        [ "${status}" -eq 0 ] && { evaluate --streaming-only || status=$?; }
        ;;
    train)
        train "${TRAIN_MINUTES:-8.7}" "${train_args[@]}" || status=$?
        ;;
    target)
        run_dir="${target_dir}"
        logs="${run_dir}/logs"
        train "${TRAIN_MINUTES:-8.7}" --stages target --target-minutes "${TARGET_MINUTES:-7.5}" \
            --later-minutes "${LATER_MINUTES:-4}" "${train_args[@]}" || status=$?
        ;;
    resume)
        from="${target_dir}"
        if [ -f "${run_dir}/resume/state.json" ]; then
            # a resume call that stopped inside the target schedule: go on from it
            rm -rf "${run_dir}.prev" && mv "${run_dir}" "${run_dir}.prev" && from="${run_dir}.prev"
        fi
        train "${TRAIN_MINUTES:-8.7}" --resume "${from}" || status=$?
        ;;
    eval)
        rm -rf "${run_dir}/held_out"
        evaluate ${EVAL_ARGS:-} || status=$?
        ;;
    drive)
        closed_loop || status=$?
        ;;
    policy)
        policy_drives || status=$?
        ;;
    forks)
        rm -rf "${run_dir}"
        lead_stop_forks || status=$?
        ;;
    data)
        rm -rf "${run_dir}"
        forks=""
        if [ "${FORK_SEEDS:-120}" != 0 ]; then
            lead_stop_forks &
            forks=$!
        fi
        simulate || status=$?
        if [ -n "${forks}" ]; then
            wait "${forks}" || status=$?
        fi
        ;;
    soup)
        soup_drives || status=$?
        ;;
    probe)
        scene_probe lamp_probe &
        lamp=$!
        scene_probe fork_probe "${FORK_DRIVES:-8}" "${device}" &
        forks=$!
        scene_probe lead_probe || status=$?
        wait "${lamp}" || status=$?
        wait "${forks}" || status=$?
        ;;
    dagger)
        rm -rf "${run_dir}"
        policy_drives || status=$?
        cp "${logs}/policy_drives.log" out/ 2>/dev/null
        if [ "${status}" -eq 0 ]; then
            train "${TRAIN_MINUTES:-4}" "${train_args[@]}" --extra-drives out/policy_drives \
                || status=$?
            cp out/policy_drives/coverage.md "${run_dir}/policy_coverage.md" 2>/dev/null
        fi
        cp out/policy_drives.log "${logs}/" 2>/dev/null
        ;;
    *)
        echo "usage: $0 [all|train|target|resume|eval|drive|soup|policy|forks|probe|dagger|data]"
        exit 2
        ;;
esac
"${own_model}" && [ -f "${run_dir}/summary.json" ] && "${python}" - "${run_dir}/summary.json" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
print("calls:", s.get("calls"))
t = s.get("target")
if t is None:
    print("target stage paused (no held-out figures yet)")
    sys.exit(0)
print("target steps", t["steps"], "flow draws", t.get("flow_draws"), "held-out CoC CE",
      round(t["eval_coc_loss"], 4), "flow", round(t["eval_flow_loss"], 4))
print("held-out decision accuracy (teacher forced):",
      {k[len("eval_decision_acc_"):] or "all": round(v, 3) for k, v in t.items()
       if k.startswith("eval_decision_acc")})
print("decision focus:", s.get("decision_focus"))
EOF
pack
echo "retrain_h200 ${phase} exit ${status} after $(( $(date +%s) - start )) s"
exit "${status}"
